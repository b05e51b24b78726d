"""The CPU backend: the same stages with NumPy/OpenCV kernels, for machines without a GPU.

Its "events" are already complete when recorded (work runs synchronously), and its stage times come
from the host clock, so the processor and the memory bookkeeping run unchanged.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import numpy as np

from .latency import HostClock
from .memory.device_pool import DevicePool, NumpyBacking, arena_capacity, commit_pages
from .memory.host_ring import HostRing
from .memory.registry import MemoryRequest, Strategy
from .memory.strategies import Memory, PerFrameDevice, per_frame_host


class HostEvent:
    done = True

    def synchronize(self) -> None:
        pass


_DONE = HostEvent()


@dataclass(eq=False)
class CpuContext:
    index: int
    stamps: dict[str, float] = field(default_factory=dict)
    uploaded: HostEvent = _DONE
    done: HostEvent = _DONE

    def timings_ms(self) -> dict[str, float]:
        s = self.stamps
        return {
            "upload": (s["uploaded"] - s["start"]) * 1e3,
            "kernels": (s["filtered"] - s["uploaded"]) * 1e3,
            "download": (s["done"] - s["filtered"]) * 1e3,
        }


class CpuOps:
    name = "cpu"
    folds_pointwise = False  # the references run every filter on its own

    def context(self, index: int) -> CpuContext:
        return CpuContext(index)

    def scope(self, ctx: CpuContext):
        return contextlib.nullcontext()

    def mark(self, ctx: CpuContext, name: str) -> None:
        ctx.stamps[name] = time.perf_counter()

    def after(self, ctx: CpuContext, previous: CpuContext) -> None:
        pass  # work runs in submission order already

    def upload(self, ctx: CpuContext, dst: np.ndarray, host: np.ndarray) -> None:
        np.copyto(dst, host)

    def download(self, ctx: CpuContext, host: np.ndarray, src: np.ndarray) -> None:
        np.copyto(host, src)

    @staticmethod
    def run_filter(f, src, dst, scratch) -> None:
        f.cpu(src, dst, scratch)

    def surface(self, ctx: CpuContext, frame):
        raise NotImplementedError("the CPU backend takes frames in host memory only")

    def record_current(self) -> None:
        return None  # work ran already

    def synchronize_all(self) -> None:
        pass


class CpuBackend:
    """NumPy arrays for device memory, the host clock for GPU events."""

    name = "cpu"

    def __init__(self, strategy: Strategy):
        self.strategy = strategy
        self.ops = CpuOps()
        self.clock = HostClock()

    def memory(self, request: MemoryRequest) -> Memory:
        return self.strategy.build("cpu", request)

    def array_module(self):
        return np


def _fresh(nbytes: int) -> np.ndarray:
    return np.empty(nbytes, np.uint8)


def _committed(nbytes: int) -> np.ndarray:
    """A buffer whose pages are touched now: reserved for real, so that the next run's memory check
    sees it gone (np.empty alone only reserves addresses, and every run's check would pass)."""
    return commit_pages(np.empty(nbytes, np.uint8))


def arena_frames(req: MemoryRequest) -> int:
    """Frames whose buffers the CPU arena holds at once. Work runs synchronously in the submit thread,
    so a frame's buffers are free again as soon as it is submitted (first-fit then hands the same block
    out again), unless the consumer keeps its output in "device" memory (``frames()``): then up to the
    frames in flight, plus the one it holds."""
    return req.in_flight + req.held if req.out_bytes == 0 else 1


def host_bytes_needed(req: MemoryRequest) -> int:
    """What the pooled CPU strategy really touches: the arena for :func:`arena_frames` and both rings
    (slots are taken in turn, so every one is used)."""
    arena = arena_capacity(req.frame_bytes, arena_frames(req), req.headroom, req.state_bytes)
    return arena + req.ring_size * (req.in_bytes + req.out_bytes)


def _ring(req: MemoryRequest, nbytes: int) -> HostRing | None:
    # Whole, whatever ``lazy_ring`` asks: committed up front, so that the next run's memory check sees it taken
    # (and ordinary memory costs microseconds a slot, where a pinned 4K slot costs milliseconds).
    return HostRing(req.ring_size, nbytes, _committed) if nbytes else None


def pooled_memory(req: MemoryRequest) -> Memory:
    """A host ring each way and one NumPy arena: the CUDA pool's bookkeeping, on the CPU."""
    device = DevicePool.sized_for(req.frame_bytes, arena_frames(req), req.headroom, NumpyBacking, req.state_bytes)
    return Memory("pool", _ring(req, req.in_bytes), _ring(req, req.out_bytes), device,
                  pinned=False)


def naive_memory(req: MemoryRequest) -> Memory:
    """Fresh arrays per frame, with the same bookkeeping as CUDA's naive strategy."""
    device = PerFrameDevice(lambda spec: np.empty(spec.shape, spec.dtype), lambda array: None)
    return Memory("naive", per_frame_host(req.in_bytes, _fresh), per_frame_host(req.out_bytes, _fresh), device,
                  pinned=False)
