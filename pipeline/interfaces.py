"""The seams of the pipeline, as protocols: a frame source, a frame sink, a backend and device memory.

The engine (:class:`pipeline.engine.Pipeline`) is written against these only, so any part can be
swapped: a PyAV decoder or frames from your own arrays, an encoder or a null sink, CUDA or the CPU,
pooled or per-frame memory. The built-in parts: :mod:`pipeline.source` (PyAV decode), :mod:`pipeline.nvdec`
(decode into device memory), :mod:`pipeline.sink` (PyAV encode), :mod:`pipeline.adapters` (arrays in,
null and Python sinks), :mod:`pipeline.cpu` and :mod:`pipeline.gpu.backend`.
"""

from __future__ import annotations

from typing import Any, ContextManager, Iterator, Protocol, runtime_checkable

from .video import FrameMeta, StreamInfo


class Event(Protocol):
    """A point in a stream's work: ``done`` polls, ``synchronize`` waits for it (and only it)."""

    @property
    def done(self) -> bool: ...

    def synchronize(self) -> None: ...


@runtime_checkable
class FrameSource(Protocol):
    """Decoded frames, in order, with the audio packets to pass through between them.

    ``layout`` says what each frame is: ``"i420"`` or ``"rgb24"`` host frames, copied into a host slot
    by :meth:`copy_into`, or ``"nv12"`` surfaces already in device memory (NVDEC), read in place.
    """

    info: StreamInfo  # the decoded video as the pipeline works on it (even size, colour, clock)
    layout: str
    audio: Any  # an audio passthrough object for the sink (see pipeline.source.AudioTracks), or None
    decode_errors: int
    corrupt_frames: int
    retimed_frames: int

    def items(self, limit: int | None = None) -> Iterator[Any]:
        """``DecodedFrame`` and ``AudioPacket`` entries (see :mod:`pipeline.source`) in demux order."""
        ...

    def copy_into(self, frame: Any, dst: Any) -> None:
        """Copy one host frame into a host slot of ``layout_nbytes(layout, info.format)`` bytes."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class FrameSink(Protocol):
    """Where processed frames go. ``residence`` says whether it takes host frames (downloaded into a
    host slot, e.g. an encoder) or device frames (the device buffer itself, e.g. Python code using CuPy)."""

    residence: str  # "host" or "device"
    layout: str  # "i420" or "rgb24"
    target: Any  # where it writes (a path, a URL, "null"...), for messages

    def write_video(self, frame: Any, meta: FrameMeta) -> None: ...

    def write_audio(self, packet: Any) -> bool: ...

    def finish(self) -> None:
        """The run succeeded: flush and finalise (an encoder writes its trailer, a file is renamed)."""
        ...

    def abort(self) -> None:
        """The run failed: leave nothing behind."""
        ...


class Context(Protocol):
    """One in-flight frame's stream and events (a small fixed pool of these is reused)."""

    stream: Any
    uploaded: Event
    done: Event

    def timings_ms(self) -> dict[str, float]: ...


class Ops(Protocol):
    """The device operations the processor issues, on the frame's own stream."""

    name: str
    folds_pointwise: bool

    def context(self, index: int) -> Context: ...

    def scope(self, ctx: Context) -> ContextManager: ...

    def mark(self, ctx: Context, name: str) -> None: ...

    def after(self, ctx: Context, previous: Context) -> None: ...

    def upload(self, ctx: Context, dst: Any, host: Any) -> None: ...

    def surface(self, ctx: Context, frame: Any) -> Any:
        """Views of a frame decoded into device memory, readable on ``ctx``'s stream."""
        ...

    def download(self, ctx: Context, host: Any, src: Any) -> None: ...

    def run_filter(self, f: Any, src: Any, dst: Any, scratch: list) -> None: ...

    def synchronize_all(self) -> None: ...


class Clock(Protocol):
    def stamps(self, ctx: Context) -> dict[str, float]:
        """Host times of the frame's uploaded/filtered/done points; ``done`` must have completed."""
        ...


class DeviceMemory(Protocol):
    """Per-frame device buffers: an arena sub-allocator or a real allocation per buffer."""

    def alloc_frame(self, specs: list) -> Any: ...

    def free_frame(self, buffers: Any, after: Event | None) -> None: ...

    def drain(self) -> None: ...

    def counters(self) -> dict[str, Any]: ...


class Backend(Protocol):
    """Where frames are processed: its operations, its clock, and how it builds memory for a strategy."""

    name: str  # "cuda" or "cpu"
    ops: Ops
    clock: Clock

    def memory(self, request: Any) -> Any:
        """The :class:`~pipeline.memory.strategies.Memory` of one run, for this backend's strategy."""
        ...

    def array_module(self) -> Any:
        """NumPy or CuPy: what frame arrays handed to Python are."""
        ...
