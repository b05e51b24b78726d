"""The CPU backend: the same stages with NumPy/OpenCV kernels, for machines without a GPU.

Its "events" are already complete when recorded (work runs synchronously), and its stage times come
from the host clock, so the processor and the memory bookkeeping run unchanged.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import numpy as np

from .filters.color import rgb_to_yuv_cpu, yuv_to_rgb_cpu
from .memory.device_pool import DevicePool, NumpyBacking
from .memory.host_ring import HostRing
from .memory.strategies import Memory, PerFrameDevice, PerFrameHost


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

    yuv_to_rgb = staticmethod(yuv_to_rgb_cpu)
    rgb_to_yuv = staticmethod(rgb_to_yuv_cpu)

    @staticmethod
    def run_filter(f, src, dst, scratch) -> None:
        f.cpu(src, dst, scratch)

    def synchronize_all(self) -> None:
        pass


def _fresh(nbytes: int) -> np.ndarray:
    return np.empty(nbytes, np.uint8)


def cpu_memory(strategy: str, in_bytes: int, out_bytes: int, frame_bytes: int, cfg, extra: int = 0) -> Memory:
    """Pool: a host ring and one NumPy arena; naive: fresh arrays per frame (same bookkeeping as CUDA)."""
    if strategy == "naive":
        device = PerFrameDevice(lambda spec: np.empty(spec.shape, spec.dtype), lambda array: None)
        return Memory(strategy, PerFrameHost(in_bytes, _fresh), PerFrameHost(out_bytes, _fresh), device, False)
    device = DevicePool.sized_for(frame_bytes, cfg.in_flight, cfg.arena_headroom, NumpyBacking, extra)
    in_host = HostRing(cfg.ring_size, in_bytes, _fresh)
    out_host = HostRing(cfg.ring_size, out_bytes, _fresh)
    return Memory(strategy, in_host, out_host, device, pinned=False)
