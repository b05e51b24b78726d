"""CUDA streams and per-frame events, and the device operations the processor issues on them.

Each in-flight frame gets a :class:`CudaContext` from a fixed pool: a stream (round-robin over S
non-blocking streams) and four events created once, so nothing is created per frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .cuda import cupy
from .failures import creating
from .surfaces import SurfaceViews

_MARKS = ("start", "uploaded", "filtered", "done")


@dataclass(eq=False)
class CudaContext:
    index: int
    stream: Any
    events: dict[str, Any]

    @property
    def uploaded(self):
        return self.events["uploaded"]

    @property
    def done(self):
        return self.events["done"]

    def timings_ms(self) -> dict[str, float]:
        """Stage times from the events; call only once ``done`` has completed."""
        elapsed = cupy().cuda.get_elapsed_time
        e = self.events
        return {
            "upload": elapsed(e["start"], e["uploaded"]),
            "kernels": elapsed(e["uploaded"], e["filtered"]),
            "download": elapsed(e["filtered"], e["done"]),
        }


class CudaOps:
    """Upload, kernels and download on the frame's own stream."""

    name = "cuda"
    folds_pointwise = True  # the conversion kernels take pointwise filters in (see Processor._folded)

    def __init__(self, streams: int, default_stream: bool = False):
        cp = cupy()
        # The naive strategy runs on the legacy default stream, as code that never thinks about streams does.
        self.streams = [cp.cuda.Stream.null] if default_stream else creating("creating CUDA streams", lambda: [
            cp.cuda.Stream(non_blocking=True) for _ in range(streams)
        ])
        self._current_event = creating("creating CUDA events", cp.cuda.Event)
        self._null = cp.cuda.Stream.null
        self.surfaces = SurfaceViews()
        self._memcpy = cp.cuda.runtime.memcpyAsync
        self._h2d, self._d2h = cp.cuda.runtime.memcpyHostToDevice, cp.cuda.runtime.memcpyDeviceToHost

    def context(self, index: int) -> CudaContext:
        cp = cupy()
        events = creating("creating CUDA events", lambda: {m: cp.cuda.Event() for m in (*_MARKS, "decoded")})
        return CudaContext(index, self.streams[index % len(self.streams)], events)

    def surface(self, ctx: CudaContext, frame):
        """A decoded frame's (Y, UV) planes, in place, ordered after the decoder's copy into them.

        FFmpeg's NVDEC path copies each decoded picture into its output surface on the legacy default
        stream, without waiting: the frame's own (non-blocking) stream waits on an event recorded there,
        on the device, so the host never blocks."""
        planes = self.surfaces.views(frame)
        decoded = ctx.events["decoded"]
        decoded.record(self._null)
        ctx.stream.wait_event(decoded)
        return planes

    def scope(self, ctx: CudaContext):
        return ctx.stream

    def mark(self, ctx: CudaContext, name: str) -> None:
        ctx.events[name].record(ctx.stream)

    def after(self, ctx: CudaContext, previous: CudaContext) -> None:
        """Order this frame's kernels after the previous frame's (temporal filters share state)."""
        if previous.stream is not ctx.stream:
            ctx.stream.wait_event(previous.events["filtered"])

    def upload(self, ctx: CudaContext, dst, host) -> None:
        # cudaMemcpyAsync straight from the slot: asynchronous for pinned memory, synchronous for pageable.
        self._memcpy(dst.data.ptr, host.ctypes.data, host.nbytes, self._h2d, ctx.stream.ptr)

    def download(self, ctx: CudaContext, host, src) -> None:
        self._memcpy(host.ctypes.data, src.data.ptr, host.nbytes, self._d2h, ctx.stream.ptr)

    @staticmethod
    def run_filter(f, src, dst, scratch) -> None:
        f.cuda(src, dst, scratch)

    def record_current(self):
        """An event at the end of the work queued so far on the caller's current stream (reused: buffers
        given back with it are released in order, so a later re-record only delays them, never early)."""
        self._current_event.record(cupy().cuda.get_current_stream())
        return self._current_event

    def synchronize_all(self) -> None:
        for s in self.streams:
            s.synchronize()
