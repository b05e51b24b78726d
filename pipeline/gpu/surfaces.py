"""Frames a hardware decoder left in device memory, seen by CuPy in place (DLPack, no copy).

PyAV exports each plane of a CUDA frame through DLPack (NV12: Y as (H, W) uint8 and UV as (H/2, W/2, 2),
rows padded to the surface pitch; P010, from 10-bit streams: the same shapes in uint16, each sample in the
high 10 bits). ``cupy.from_dlpack(plane)`` would pass a stream argument that PyAV
refuses, so the capsule is taken first: ``cupy.from_dlpack(plane.__dlpack__())``. The views keep the
frame's buffer referenced; the processor drops them once the frame's work has completed, and only then
does the buffer go back to the decoder's pool.

The decoder's own surface pool is allocated by FFmpeg as it needs (it grows, then stays): the distinct
surfaces seen are counted, so a run's statistics show it flat after warm-up.
"""

from __future__ import annotations

from typing import Any

from .cuda import cupy

MAX_TRACKED = 4096  # a pool larger than this is not a pool: stop counting exactly


class SurfaceViews:
    def __init__(self):
        self._seen: set[int] = set()
        self.surface_bytes = 0

    def views(self, frame: Any) -> tuple[Any, Any]:
        cp = cupy()
        y = cp.from_dlpack(frame.planes[0].__dlpack__())
        uv = cp.from_dlpack(frame.planes[1].__dlpack__())
        ptr = y.data.ptr
        if ptr not in self._seen and len(self._seen) < MAX_TRACKED:
            self._seen.add(ptr)
            self.surface_bytes += y.strides[0] * y.shape[0] + uv.strides[0] * uv.shape[0]
        return y, uv

    @property
    def count(self) -> int:
        return len(self._seen)
