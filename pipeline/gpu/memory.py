"""CUDA memory for the strategies: pinned host buffers, the arena's single cudaMalloc, per-frame cudaMalloc."""

from __future__ import annotations

import time
import weakref

import numpy as np

from ..memory.device_pool import BufferSpec, DevicePool, FrameBuffers
from ..memory.host_ring import HostRing
from ..errors import GPUError
from ..memory.registry import MemoryRequest
from ..memory.strategies import Memory, PerFrameDevice, per_frame_host
from .cuda import cupy
from .failures import creating, cuda_error


WRITE_COMBINED = 4  # cudaHostAllocWriteCombined


def pinned_array(nbytes: int, flags: int = 0) -> np.ndarray:
    """Exact-size page-locked memory (cudaHostAlloc), bypassing CuPy's power-of-two pinned pool."""
    cuda = cupy().cuda
    # Only the pointer type exports the buffer protocol; the array keeps it (and the memory) alive.
    return np.frombuffer(cuda.PinnedMemoryPointer(cuda.PinnedMemory(nbytes, flags), 0), np.uint8, nbytes)


def write_combined_array(nbytes: int) -> np.ndarray:
    """Pinned memory the CPU writes past its caches and the GPU reads without snooping them: for slots the
    CPU only writes (a decoded frame on its way up). Reading it from the CPU is very slow."""
    return pinned_array(nbytes, WRITE_COMBINED)


class _Allocation:
    """One cudaMalloc, freed once: by ``free()``, or when nothing refers to it any more (its backing and every
    view into it). The views name it as their owner; the backing is not, so no reference cycle holds the
    arena until a full collection."""

    def __init__(self, nbytes: int):
        rt = cupy().cuda.runtime
        self.ptr = rt.malloc(nbytes)
        self.free = weakref.finalize(self, rt.free, self.ptr)
        self.free.atexit = False  # at interpreter exit the driver frees everything anyway


class CudaBacking:
    """One cudaMalloc for the whole arena; views are CuPy arrays pointing into it."""

    def __init__(self, nbytes: int):
        cp = cupy()
        self.ptr = 0
        try:
            allocation = _Allocation(nbytes)
        except Exception as e:  # out of memory, or any CUDA error: one line with the sizes
            raise cuda_error(e, needed=nbytes, what="the device arena") from e
        self.ptr, self.nbytes = allocation.ptr, nbytes
        self._release = allocation.free  # close() frees it; so does dropping everything if close() never ran
        self._mem = creating("wrapping the device arena", lambda: cp.cuda.UnownedMemory(self.ptr, nbytes, allocation))

    def view(self, offset: int, spec: BufferSpec):
        cp = cupy()
        return cp.ndarray(spec.shape, spec.dtype, memptr=cp.cuda.MemoryPointer(self._mem, offset))

    def close(self) -> None:
        self._release()  # runs cudaFree once; later calls do nothing
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


class StreamOrderedDevice:
    """Per-frame buffers from one of CuPy's allocators, released by dropping them (stream-ordered reuse).

    ``cupy``: CuPy's caching MemoryPool, whose free lists are per stream; ``async``: cudaMallocAsync
    through MemoryAsyncPool, freed with cudaFreeAsync on the allocating stream.
    """

    def __init__(self, kind: str):
        cp = cupy()
        self.kind = kind
        self.calls = 0
        self.device_allocs = 0
        if kind == "cupy":
            self.pool = cp.cuda.MemoryPool(allocator=self._counting_malloc)
        else:
            self.pool = cp.cuda.MemoryAsyncPool()

    def _counting_malloc(self, nbytes: int):
        cp = cupy()
        self.device_allocs += 1  # a pool miss: a real cudaMalloc
        return cp.cuda.MemoryPointer(cp.cuda.Memory(nbytes), 0)

    def alloc_frame(self, specs: list[BufferSpec]) -> FrameBuffers:
        cp = cupy()
        arrays = [cp.ndarray(s.shape, s.dtype, memptr=self.pool.malloc(s.nbytes)) for s in specs]
        self.calls += len(specs)
        if self.kind == "async":
            self.device_allocs += len(specs)  # each is a cudaMallocAsync call
        return FrameBuffers(arrays, [])

    def free_frame(self, buffers: FrameBuffers, after=None) -> None:
        buffers.arrays.clear()  # the allocator orders reuse after the work already queued on the stream

    def drain(self) -> None:
        pass

    def close(self) -> None:
        """Hand the pool's cached blocks back, so the next run (a bench's next strategy) starts clean."""
        self.pool.free_all_blocks()

    def counters(self) -> dict[str, int]:
        reserved = self.pool.total_bytes()
        return {
            "device_allocs": self.device_allocs,
            "device_frees": 0,
            "pool_hits": self.calls - (self.device_allocs if self.kind == "cupy" else 0),
            "pool_waits": 0,
            "bytes_reserved": reserved,
            "bytes_in_use": self.pool.used_bytes(),
            "bytes_peak": reserved,
        }


def cupy_pinned_allocator():
    """Host buffers from CuPy's PinnedMemoryPool (cudaHostAlloc on a miss), counted."""
    cuda = cupy().cuda
    misses = [0]

    def counting(nbytes: int):
        misses[0] += 1
        return cuda.PinnedMemoryPointer(cuda.PinnedMemory(nbytes), 0)

    pool = cuda.PinnedMemoryPool(allocator=counting)

    def allocate(nbytes: int) -> np.ndarray:
        return np.frombuffer(pool.malloc(nbytes), np.uint8, nbytes)

    return allocate, misses


def _pooled_device(req: MemoryRequest) -> DevicePool:
    return DevicePool.sized_for(req.frame_bytes, req.in_flight + req.held, req.headroom, CudaBacking, req.state_bytes)


def _ring(req: MemoryRequest, nbytes: int, allocate) -> HostRing | None:
    return HostRing(req.ring_size, nbytes, allocate, eager=1 if req.lazy_ring else None) if nbytes else None


def check_pinned(req: MemoryRequest) -> None:
    """Pinning too much starves the page cache and every other process: the rings must fit the cap."""
    from ..memory.shared import default_pinned_cap

    needed = req.ring_size * (req.in_bytes + req.out_bytes)
    cap = req.pinned_cap if req.pinned_cap is not None else default_pinned_cap()
    if cap is not None and needed > cap:
        raise GPUError(f"pinned host memory: the host rings need {needed / 2**20:.0f} MiB, over the cap of "
                       f"{cap / 2**20:.0f} MiB ({'--pinned-cap-mib' if req.pinned_cap else 'half of the RAM'}; "
                       "lower --ring-size, or raise --pinned-cap-mib)")


def pooled(req: MemoryRequest) -> Memory:
    """The default: a pinned ring each way and one cudaMalloc'd arena; nothing allocated per frame (a lazy
    ring allocates each of its slots once, as the run first needs it)."""
    check_pinned(req)
    t0 = time.perf_counter()
    device = _pooled_device(req)
    t1 = time.perf_counter()
    try:
        in_host = _ring(req, req.in_bytes, write_combined_array if req.write_combined else pinned_array)
        out_host = _ring(req, req.out_bytes, pinned_array)
    except BaseException:
        device.close()
        raise
    setup = {"arena": (t1 - t0) * 1e3, "pinned_ring": (time.perf_counter() - t1) * 1e3}
    return Memory("pool", in_host, out_host, device, pinned=True, setup_ms=setup)


def pinned_per_frame(req: MemoryRequest) -> Memory:
    """cudaHostAlloc/cudaFreeHost per frame: the pinned memory is right, its lifetime is not."""
    return Memory("pinned-per-frame", per_frame_host(req.in_bytes, pinned_array),
                  per_frame_host(req.out_bytes, pinned_array), _pooled_device(req), pinned=True)


def naive(req: MemoryRequest) -> Memory:
    return Memory("naive", per_frame_host(req.in_bytes, pageable), per_frame_host(req.out_bytes, pageable),
                  PerFrameDevice(cuda_malloc, cuda_free), pinned=False)


def _stream_ordered(kind: str, req: MemoryRequest) -> Memory:
    allocate, misses = cupy_pinned_allocator()
    return Memory(kind, per_frame_host(req.in_bytes, allocate), per_frame_host(req.out_bytes, allocate),
                  StreamOrderedDevice(kind), pinned=True, extra={"host_allocs": lambda: misses[0]})


def cupy_pool(req: MemoryRequest) -> Memory:
    return _stream_ordered("cupy", req)


def async_pool(req: MemoryRequest) -> Memory:
    return _stream_ordered("async", req)
