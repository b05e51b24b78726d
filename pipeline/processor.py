"""The GPU stage: per frame, upload, conversion to RGB, the filter chain, a user's stage, conversion back,
download.

Backend-neutral: ``ops`` is :class:`~pipeline.gpu.streams.CudaOps` or :class:`~pipeline.cpu.CpuOps`,
``memory`` one of the allocation strategies. Everything for a frame is issued on its own stream, and
buffers are handed back with the event of their last use, so nothing waits on the whole device.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable

import numpy as np

from .channels import wait_for
from .config import is_int, safe_repr
from .convert import DEVICE_LAYOUTS, converter, layout_depth, layout_nbytes, layout_shape
from .errors import ConfigError, StageError
from .memory.device_pool import BufferSpec, frame_bytes
from .memory.registry import MemoryRequest
from .video import MAX_SIDE, VideoFormat, WorkItem, pixel_aspect


def _checked_size(f, width: int, height: int) -> tuple[int, int]:
    """``f``'s output size from ``width`` x ``height``, within what every later stage takes: a size derived
    from the aspect ratio (scale=w=16384:h=2,scale=w=-1:h=16384) can pass the limit its arguments keep to."""
    size = f.output_size(width, height)
    if not (isinstance(size, tuple) and len(size) == 2 and all(is_int(v) for v in size)):
        raise ConfigError(f"{f.name}: output_size({width}, {height}) gave {safe_repr(size)}; a filter's output size "
                          "is a (width, height) tuple of integers")
    w, h = int(size[0]), int(size[1])
    if not (2 <= w <= MAX_SIDE and 2 <= h <= MAX_SIDE):
        raise ConfigError(f"{f.name}: its output would be {w}x{h} (from {width}x{height}); frame sides are "
                          f"2 to {MAX_SIDE}")
    return w, h


@dataclass(frozen=True)
class FramePlan:
    """The device buffers one frame needs, computed once from the input format, the chain and where the
    frame starts and ends (layouts), after pointwise filters at the chain's ends are folded into the
    conversions (they need no buffer of their own). Building it binds the input's colour to the chain's
    filters (:meth:`~pipeline.filters.Filter.use_colour`); the output's depth is its layout's.

    ``specs[input]`` holds the uploaded frame (None for device input), ``specs[rgb]`` the converted
    frame, then each remaining filter's scratch and output, and ``specs[output]`` the converted result.
    """

    in_format: VideoFormat
    out_format: VideoFormat
    specs: tuple[BufferSpec, ...]
    steps: tuple[tuple[Any, int, int, tuple[int, ...]], ...]  # (filter, src index, dst index, scratch indices)
    state: tuple[tuple[BufferSpec, ...], ...]  # per filter of the chain: buffers kept across frames
    input: int | None
    rgb: int
    last_rgb: int
    output: int
    in_layout: str = "i420"
    out_layout: str = "i420"
    head: tuple = ()  # pointwise filters run inside the conversion to RGB
    tail: tuple = ()  # ... inside the conversion back
    chain: tuple = field(default=(), repr=False)

    @classmethod
    def build(cls, fmt: VideoFormat, chain, *, in_layout: str = "i420", out_layout: str = "i420",
              fold: bool = False, stage: bool = False) -> FramePlan:
        chain = tuple(chain)
        for f in chain:  # filters that take luma weigh it with the input's own matrix
            f.use_colour(fmt.colour)
        head, tail = _foldable_ends(chain, stage) if fold else ((), ())
        specs: list[BufferSpec] = []

        def add(shape, dtype=np.float32) -> int:
            specs.append(BufferSpec(tuple(shape), dtype))
            return len(specs) - 1

        input_ = None if in_layout in DEVICE_LAYOUTS else add((layout_nbytes(in_layout, fmt),), np.uint8)
        w, h = fmt.width, fmt.height
        rgb = src = add((3, h, w))
        steps = []
        sized_by = None
        for f in chain[1 if head else 0:len(chain) - (1 if tail else 0)]:
            scratch = tuple(add(shape) for shape in f.scratch_shapes(w, h))
            size = _checked_size(f, w, h)
            sized_by = f.name if size != (w, h) else sized_by
            w, h = size
            dst = add((3, h, w))
            steps.append((f, src, dst, scratch))
            src = dst
        if (w % 2 or h % 2) and out_layout != "rgb24":  # between filters any size: the planes are RGB
            raise ConfigError(f"{sized_by}: the chain's output would be {w}x{h}; the output is 4:2:0, so its sides "
                              "must be even")
        out = fmt.resized(w, h).with_depth(layout_depth(out_layout))
        output = add(layout_shape(out_layout, out) if out_layout == "rgb24" else (layout_nbytes(out_layout, out),),
                     np.uint8)
        state = []
        w, h = fmt.width, fmt.height
        for f in chain:
            state.append(tuple(BufferSpec(tuple(s), np.float32) for s in f.state_shapes(w, h)))
            w, h = f.output_size(w, h)
        return cls(fmt, out, tuple(specs), tuple(steps), tuple(state), input_, rgb, src, output, in_layout,
                   out_layout, head, tail, chain)

    @property
    def frame_bytes(self) -> int:
        return frame_bytes(list(self.specs))

    def output_sar(self, sar: Fraction | None) -> Fraction | None:
        """The output's pixel aspect ratio: the input's through each filter's geometry; unknown stays unknown
        (FFmpeg's scale keeps an unset one unset), and so does one a plugin makes no ratio of."""
        w, h = self.in_format.width, self.in_format.height
        for f in self.chain:
            if sar is None:
                break
            sar = pixel_aspect(f.output_sar(sar, w, h))
            w, h = f.output_size(w, h)
        return sar

    @property
    def state_bytes(self) -> int:
        return frame_bytes([s for specs in self.state for s in specs])

    def request(self, settings, *, host_in: bool = True, host_out: bool = True, held: int = 0,
                lazy_ring: bool = False) -> MemoryRequest:
        """What the memory strategy must provide for this plan and the run's settings. ``lazy_ring``: the host
        rings fill as frames need their slots (a file), not all before the first frame (a live source)."""
        in_bytes = self.specs[self.input].nbytes if host_in and self.input is not None else 0
        out_bytes = self.specs[self.output].nbytes if host_out else 0
        cap = settings.pinned_cap_mib * 2**20 if getattr(settings, "pinned_cap_mib", None) else None
        return MemoryRequest(in_bytes, out_bytes, self.frame_bytes, self.state_bytes, settings.ring_size,
                             settings.in_flight, settings.arena_headroom, held, cap,
                             bool(getattr(settings, "write_combined", False)), lazy_ring)


@contextlib.contextmanager
def _blaming_plugins(filters, item: WorkItem):
    """A failure inside a plugin's filter is reported as the plugin's (its name and file), not as a bug."""
    try:
        yield
    except BaseException as e:
        from .filters.plugins import plugin_failure

        error = plugin_failure(filters, e, f"at frame {item.meta.index}") if filters else None
        if error is None:
            raise
        raise error from e


def _foldable_ends(chain: tuple, stage: bool) -> tuple[tuple, tuple]:
    """Pointwise filters at the ends of the chain, to run inside the conversion kernels. With a user's
    stage the last filter must run before the stage, so nothing is folded into the conversion back."""
    from .filters.fuse import FusedPointwise, is_pointwise, members_of

    def foldable(f) -> bool:
        return isinstance(f, FusedPointwise) or is_pointwise(f)

    head = tuple(members_of(chain[0])) if chain and foldable(chain[0]) else ()
    tail = ()
    if len(chain) > 1 and not stage and foldable(chain[-1]):
        tail = tuple(members_of(chain[-1]))
    return head, tail


def prepare_kernels(chain, in_layout: str, out_layout: str, *, stage: bool = False) -> None:
    """Compile (or load from the on-disk cache) every CUDA kernel a run of ``chain`` will launch, before
    its frames exist: the conversions (with the chain's pointwise ends folded in, as the run will) and
    each remaining filter's kernels. Kernels are cached by source, so the run binds these same ones."""
    head, tail = _foldable_ends(tuple(chain), stage)
    fmt = VideoFormat(2, 2)  # the conversion kernels take the size and colour as arguments
    converter("to_rgb", in_layout, fmt, "cuda", head)
    converter("from_rgb", out_layout, fmt, "cuda", tail)
    for f in chain[1 if head else 0:len(chain) - (1 if tail else 0)]:
        f.prepare()


def _said(error: Exception) -> str:
    """``str(error)``, or where even that raises, a note saying so (the message names its type already)."""
    try:
        return str(error)
    except Exception:
        return "(its message could not be read)"


@dataclass
class StageFrame:
    """What a user's stage sees: the working frame, writable in place, on the frame's own stream.

    ``planes`` is (3, H, W) float32 RGB in [0, 1] (CuPy on CUDA, NumPy on the CPU); ``stream`` the CUDA
    stream the frame's work is queued on (None on the CPU): queue work on it, or synchronise with it,
    before returning. ``index``, ``pts`` and ``time`` (seconds) identify the frame, ``source`` the input it
    came from (one stage may serve several streams at once: ``run_many``).
    """

    planes: Any
    stream: Any
    index: int
    pts: int | None
    time: float | None
    source: str = ""


class Processor:
    def __init__(self, ops, memory, plan: FramePlan, in_flight: int, abort: threading.Event | None = None,
                 stage: Callable[[StageFrame], None] | None = None, source: str = ""):
        self.ops, self.memory, self.plan, self.chain = ops, memory, plan, list(plan.chain)
        self.abort = abort or threading.Event()
        self.stage, self.source = stage, source
        self._contexts: queue.Queue = queue.Queue()
        for i in range(in_flight):
            self._contexts.put(ops.context(i))
        self._bind_state()
        if ops.name == "cuda":
            for f, *_ in plan.steps:  # folded filters run inside the conversions, bound just below
                f.prepare()
        # Bound once: kernels compiled and launch geometry computed before the first frame.
        self._to_rgb = converter("to_rgb", plan.in_layout, plan.in_format, ops.name, plan.head)
        self._from_rgb = converter("from_rgb", plan.out_layout, plan.out_format, ops.name, plan.tail)
        # Temporal filters read what the previous frame wrote, possibly on another stream: order them.
        self._stateful = any(plan.state)
        self._previous = None
        self.waiting: int | None = None  # the frame whose done event a thread waits on (the engine's watchdog)

    def _bind_state(self) -> None:
        """Reserve every filter's cross-frame state once, from the same device memory as the frames."""
        self._state_buffers = []
        for f, specs in zip(self.chain, self.plan.state):
            if specs:
                buffers = self.memory.device.alloc_frame(list(specs))
                self._state_buffers.append(buffers)
                f.bind_state(buffers.arrays)

    def submit(self, item: WorkItem, *, keep_device: bool = False) -> None:
        """Issue the frame's work asynchronously; the host slot goes back once the upload has completed.

        ``keep_device``: the output stays in its device buffer for the consumer, which gives the frame's
        buffers back with :meth:`release`; otherwise it is downloaded into a host slot.
        """
        ops, mem, plan = self.ops, self.memory, self.plan
        ctx = item.ctx = wait_for(lambda: self._contexts.get(timeout=0.05), self.abort)  # bounds frames in flight
        if not keep_device:
            item.out_slot = wait_for(lambda: mem.out_host.acquire(timeout=0.05), self.abort)
        item.out_format = plan.out_format
        with ops.scope(ctx):
            # Allocated under the frame's stream: stream-ordered allocators (CuPy's pools) key reuse on it.
            bufs = item.device = mem.device.alloc_frame(plan.specs)
            a = bufs.arrays
            ops.mark(ctx, "start")
            if plan.input is not None:
                ops.upload(ctx, a[plan.input], item.in_slot.array)
                source = a[plan.input]
            else:  # decoded into device memory: read the decoder's surface in place, once its copy is done
                source = item.surface_planes = ops.surface(ctx, item.surface)
            ops.mark(ctx, "uploaded")
            if self._stateful and self._previous is not None:
                ops.after(ctx, self._previous)
            self._kernels(source, a, item, ctx)
            ops.mark(ctx, "filtered")
            self._previous = ctx
            if not keep_device:
                ops.download(ctx, item.out_slot.array, a[plan.output])
            ops.mark(ctx, "done")
        # The events belong to the context, which a later frame re-records once this one is complete; a
        # waiter holding them then waits for that later frame instead, later but never too early, since
        # contexts come back in frame order.
        if item.in_slot is not None:
            mem.in_host.release(item.in_slot, after=ctx.uploaded)
            item.in_slot = None
        if not keep_device:
            mem.device.free_frame(bufs, after=ctx.done)
            item.device = None

    def _kernels(self, source, a: list, item: WorkItem, ctx) -> None:
        """Conversion (with the head filters folded in), the chain, the user's stage, conversion back."""
        plan, run_filter = self.plan, self.ops.run_filter
        with _blaming_plugins(plan.head, item):
            self._to_rgb(source, a[plan.rgb])
        for f, src, dst, scratch in plan.steps:
            with _blaming_plugins((f,), item):
                run_filter(f, a[src], a[dst], [a[i] for i in scratch])
        if self.stage is not None:
            self._run_stage(a[plan.last_rgb], item, ctx)
        with _blaming_plugins(plan.tail, item):
            self._from_rgb(a[plan.last_rgb], a[plan.output])

    def _run_stage(self, planes, item: WorkItem, ctx) -> None:
        meta = item.meta
        frame = StageFrame(planes, getattr(ctx, "stream", None), meta.index, meta.pts, meta.seconds, self.source)
        shape, dtype = planes.shape, planes.dtype
        try:
            self.stage(frame)
        except KeyboardInterrupt:
            raise  # a stop, not the stage's failure
        except BaseException as e:  # SystemExit too: a stage does not decide how the caller's program ends
            name = self._stage_name()
            raise StageError(f"stage {name!r} failed at frame {meta.index}: {type(e).__name__}: "
                             f"{_said(e)}", stage=name) from e
        # What the frame goes on with is the array the stage was given, written in place: a new one bound to
        # frame.planes would be dropped unseen, and a view changed to another shape or dtype misread.
        if getattr(frame, "planes", None) is not planes or planes.shape != shape or planes.dtype != dtype:
            name = self._stage_name()
            raise StageError(f"stage {name!r} at frame {meta.index}: frame.planes must be written in place "
                             f"({shape} {dtype}: frame.planes[...] = ...), not replaced or reshaped", stage=name)

    def _stage_name(self) -> str:
        return getattr(self.stage, "__qualname__", None) or type(self.stage).__name__

    def output_array(self, item: WorkItem):
        """The frame's converted output in device memory (``keep_device`` items)."""
        return item.device.arrays[self.plan.output]

    def hand_back(self, item: WorkItem) -> dict[str, float]:
        """A completed frame's stage times in ms; its context (streams and events) goes back for reuse."""
        timings = item.ctx.timings_ms()
        self._contexts.put(item.ctx)
        item.ctx = None
        item.give_back_surface()  # the decoder may reuse the surface: its reader is done
        return timings

    def wait_done(self, item: WorkItem, watch: Callable[[], None] | None = None) -> None:
        """Wait for the frame's ``done`` event, marked in ``waiting`` meanwhile: the only wait on the GPU that
        has no time limit, the one a stuck CUDA call shows in. Another thread's watchdog reads ``waiting``;
        with ``watch`` (a caller's own thread, where no other thread watches: frames()) the event is polled
        instead, ``watch`` called between the polls (it raises to give up)."""
        self.waiting = item.meta.index
        try:
            done = item.ctx.done
            if watch is None:
                done.synchronize()
                return
            pause = 0.0
            while not done.done:  # cudaEventQuery: a poll that never blocks
                watch()
                time.sleep(pause)  # 0 at first (a frame is usually milliseconds away), then up to 1 ms
                pause = min(2 * pause or 1e-5, 1e-3)
        finally:
            self.waiting = None

    def abandon(self, item: WorkItem) -> None:
        """A frame left unfinished (its work failed part-way, or the run stopped): once whatever it issued has
        completed (its ``done`` event marked after that work), its context goes back, without its timings
        (some of its events may never have been recorded: on its first frame, reading them fails)."""
        ctx = item.ctx
        if ctx is None:
            return
        with self.ops.scope(ctx):
            self.ops.mark(ctx, "done")
        self.wait_done(item)
        self._contexts.put(ctx)
        item.ctx = None
        item.give_back_surface()

    def release(self, item: WorkItem, after=None) -> None:
        """Give back the device buffers a ``keep_device`` frame was holding (once ``after`` completes)."""
        if item.device is not None:
            self.memory.device.free_frame(item.device, after=after)
            item.device = None

    def close(self) -> None:
        """Wait for the frames still in flight, then give every buffer back."""
        self.ops.synchronize_all()
        for buffers in self._state_buffers:
            self.memory.device.free_frame(buffers, after=None)
        self._state_buffers.clear()
