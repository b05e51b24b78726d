"""CUDA memory for the strategies: pinned host buffers, the arena's single cudaMalloc, per-frame cudaMalloc."""

from __future__ import annotations

import numpy as np

from ..errors import GPUError
from ..memory.device_pool import BufferSpec, DevicePool
from ..memory.host_ring import HostRing
from ..memory.strategies import Memory, PerFrameDevice, PerFrameHost
from .cuda import cupy


def pinned_array(nbytes: int) -> np.ndarray:
    """Exact-size page-locked memory (cudaHostAlloc), bypassing CuPy's power-of-two pinned pool."""
    cuda = cupy().cuda
    # Only the pointer type exports the buffer protocol; the array keeps it (and the memory) alive.
    return np.frombuffer(cuda.PinnedMemoryPointer(cuda.PinnedMemory(nbytes), 0), np.uint8, nbytes)


class CudaBacking:
    """One cudaMalloc for the whole arena; views are CuPy arrays pointing into it."""

    def __init__(self, nbytes: int):
        cp = cupy()
        try:
            self.ptr = cp.cuda.runtime.malloc(nbytes)
        except cp.cuda.runtime.CUDARuntimeError as e:
            raise GPUError(f"out of device memory: cannot reserve a {nbytes / 2**20:.0f} MiB arena ({e})") from e
        self.nbytes = nbytes
        self._mem = cp.cuda.UnownedMemory(self.ptr, nbytes, self)

    def view(self, offset: int, spec: BufferSpec):
        cp = cupy()
        return cp.ndarray(spec.shape, spec.dtype, memptr=cp.cuda.MemoryPointer(self._mem, offset))

    def close(self) -> None:
        if self.ptr:
            cupy().cuda.runtime.free(self.ptr)
            self.ptr = 0


def cuda_malloc(spec: BufferSpec):
    """A real cudaMalloc, outside every pool (the naive strategy)."""
    cp = cupy()
    ptr = cp.cuda.runtime.malloc(spec.nbytes)
    mem = cp.cuda.UnownedMemory(ptr, spec.nbytes, None)
    return cp.ndarray(spec.shape, spec.dtype, memptr=cp.cuda.MemoryPointer(mem, 0))


def cuda_free(array) -> None:
    cupy().cuda.runtime.free(array.data.ptr)


def pageable(nbytes: int) -> np.ndarray:
    return np.empty(nbytes, np.uint8)


def cuda_memory(strategy: str, in_bytes: int, out_bytes: int, frame_bytes: int, cfg, extra: int = 0) -> Memory:
    if strategy == "pool":
        device = DevicePool.sized_for(frame_bytes, cfg.in_flight, cfg.arena_headroom, CudaBacking, extra)
        in_host = HostRing(cfg.ring_size, in_bytes, pinned_array)
        out_host = HostRing(cfg.ring_size, out_bytes, pinned_array)
        return Memory(strategy, in_host, out_host, device, pinned=True)
    if strategy == "naive":
        device = PerFrameDevice(cuda_malloc, cuda_free)
        return Memory(strategy, PerFrameHost(in_bytes, pageable), PerFrameHost(out_bytes, pageable), device, False)
    raise GPUError(f"allocation strategy {strategy!r} is not available in this build")
