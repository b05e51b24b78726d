"""The pipeline: three threads joined by bounded channels (four with a live or paced source).

    [read thread --feed-->]  decode thread  --q_decoded-->  GPU submit thread  --q_submitted-->  encode thread

The decode thread copies each frame into a host slot; the submit thread issues upload, kernels and
download on the frame's stream without waiting; the encode thread waits on that frame's ``done``
event only, then encodes. Audio packets ride along the same channels so order is kept. Bounded
channels, the host ring and the pool of in-flight contexts give back-pressure end to end.

:class:`Pipeline` takes built parts: a source, a sink, a filter chain, a backend and the settings
(:mod:`pipeline.interfaces` has their protocols); :meth:`Pipeline.from_config` builds them for the
command line. :meth:`Pipeline.frames` runs the same stages but hands each frame to the caller instead
of an encode thread (``pipeline.frames``).

A file is read as fast as the pipeline takes it and every frame comes out (drop policy ``block``).
A live source, or a file paced with ``--realtime``, is read by its own thread (:mod:`pipeline.live`)
and cannot wait: with ``drop-oldest`` (their default) or ``drop-newest``, a frame that finds the
feed or ``q_decoded`` full is dropped there and counted, per stage (``stats.drops``). ``q_submitted``
always blocks: frames there hold GPU work, and the wait reaches ``q_decoded`` within a few frames.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
import time
import weakref
from collections import deque
from typing import Any, Callable, Iterator

from .channels import END as _END, Aborted, Channel, Worker, start_all, wait_for_all
from .checks import as_pipeline_error
from .config import RunConfig, pipe_fd
from .control import RunControl
from .convert import DEVICE_LAYOUTS
from .errors import ConfigError, GPUStalled, Interrupted, PipelineError, SourceStalled
from .gpu.nvtx import ranges as nvtx_ranges
from .latency import LatencyLog
from .processor import FramePlan, Processor
from .startup import Phases
from .stages import Stages
from .stats import RunStats
from .tally import Tally
from .teardown import Teardown, release_in_slot
from .video import StreamInfo, WorkItem

# A frame's GPU work takes milliseconds; waiting this long for one means a CUDA call that never returns.
GPU_STALL_S = 60.0
WATCH_GAP_S = 5.0  # polls further apart than this: the process was not running, the wait is not counted


_SIGNALS = frozenset(int(s) for s in signal.Signals)


class Pipeline(Stages, Tally, Teardown):
    """One run: ``source`` -> ``chain`` on ``backend`` -> ``stage`` -> ``sink``, with ``settings``.

    ``memory``: the run's memory, built by the caller (to share it across runs); by default the run
    builds it from the backend's strategy and gives it back at the end. The pipeline owns the source
    and the sink from here on: it closes the one and finishes or aborts the other.

    The stage threads' bodies are :class:`~pipeline.stages.Stages`; the statistics they fill in,
    :class:`~pipeline.tally.Tally`; how a run ends, :class:`~pipeline.teardown.Teardown`. Here: the parts,
    the threads and channels, and set-up.
    """

    def __init__(self, source, sink, chain, backend, settings: RunConfig | None = None, *,
                 stage: Callable[[Any], None] | None = None, memory=None, control: RunControl | None = None,
                 owns_memory: bool | None = None, phases: Phases | None = None):
        self.source, self.sink, self.backend = source, sink, backend
        self.chain = list(chain)
        self.cfg = settings or RunConfig()
        self.stage = stage
        self._memory = memory
        self._owns_memory = memory is None if owns_memory is None else owns_memory
        self.phases = phases or Phases()
        self.control = control or RunControl()
        self.control.pipelines.append(weakref.ref(self))
        self.stop_event = self.control.stop_event
        self.abort = threading.Event()  # a stage failed: everyone stops
        # The run starts where its set-up started: whole-run figures include it.
        self.stats = RunStats(strategy=self.cfg.alloc, input=source.info.name, filters=self.cfg.filters,
                              started=self.phases.t0)
        self.stats.device = backend.name
        self.stats.decode = "nvdec" if source.layout in DEVICE_LAYOUTS else "cpu"
        self.stats.decode_sessions = getattr(source, "decode_sessions", 1)
        self.stats.decoders_reused = getattr(source, "decoders_reused", 0)
        self.latency = self.stats.latency = LatencyLog(self.stats.started, budget_ms=self.cfg.latency_budget)
        self._error: BaseException | None = None
        self._error_lock = threading.Lock()
        self._started = self._closed = False
        self._input_error: SourceStalled | None = None  # a live source lost: the frames done are kept
        self._stalled: GPUStalled | None = None  # the watchdog found a frame stuck on the GPU
        self._watch: tuple[int | None, float, float] = (None, 0.0, 0.0)  # frame awaited, since, last poll
        self.on_frame: Callable[[RunStats], None] | None = None
        self._feed = None
        self._copiers = None
        self._lent: deque = deque()  # output slots the encoder may still hold (its frames wrap them)
        self.preview = None
        self.processor: Processor | None = None
        self.nvtx = nvtx_ranges(self.cfg.nvtx)
        self.plan = plan_for(source, self.chain, backend, sink.layout if sink is not None else "rgb24", stage)
        self._describe()

    @classmethod
    def from_config(cls, cfg: RunConfig, *, stage: Callable[[Any], None] | None = None,
                    control: RunControl | None = None, **build: Any) -> Pipeline:
        """Build every part from a config, as ``pipeline run`` does. Everything that can be refused
        (options, GPU, output path, input) is checked before any output file exists. ``build``: what
        :func:`~pipeline.build.build_parts` takes besides (``source``, ``wrap_backend``, ``decoders``)."""
        from .build import build_parts

        if not isinstance(cfg, RunConfig):
            raise ConfigError(f"Invalid config ({type(cfg).__name__}). Supported values are RunConfig objects "
                              "(pipeline.RunConfig(input=..., output=...)).")
        control = control or RunControl()
        parts = build_parts(cfg, stage, control, **build)
        return cls(parts.source, parts.sink, parts.chain, parts.backend, cfg, stage=stage, control=control,
                   memory=parts.memory, owns_memory=True, phases=parts.phases)

    # -- control ----------------------------------------------------------------------------------

    def stop(self, signum: int | None = None) -> None:
        """Ask for a graceful stop: in-flight frames are drained and the output finalised.

        Safe from a signal handler: it only sets an event the decode stage polls. ``signum``: the signal it
        stands for (the run's error and exit code say it), a number of :class:`signal.Signals`.
        """
        if signum is not None and (not isinstance(signum, int) or isinstance(signum, bool) or signum not in _SIGNALS):
            raise ConfigError(f"Pipeline.stop: signum must be a signal number (signal.SIGTERM) or None, "
                              f"got {signum!r}")
        self.control.stop(signum)

    @property
    def signum(self) -> int | None:
        return self.control.signum

    def discard_output(self) -> None:
        """Before an immediate exit (a second signal): drop the partial output; the target is untouched
        (:meth:`RunControl.discard_output` first makes sure no image sequence is being placed).

        Removes the temporary file (and closes the directory held for it) or an image sequence's staging
        directory while the encode thread may still be writing: the process exits right after, so what
        that thread does next cannot reach the target.
        """
        staging = getattr(self.sink, "staged", None)
        if staging is not None:
            try:
                staging.discard()
            except OSError:
                pass

    def staged_sequence(self):
        """The output's staged image sequence, if it is one (:class:`pipeline.sequence.StagedSequence`)."""
        staged = getattr(self.sink, "staged", None)
        return staged if hasattr(staged, "hold") else None

    def placing(self) -> bool:
        """Whether the output's frames (an image sequence) are being moved into place."""
        sequence = self.staged_sequence()
        return sequence is not None and sequence.placing

    @property
    def total_frames(self) -> int | None:
        limit, expected = self.cfg.frames, self.source.info.expected_frames
        return min(limit, expected) if limit and expected else (limit or expected)

    # -- running ----------------------------------------------------------------------------------

    def run(self) -> RunStats:
        """Process every frame into the sink; the statistics of the run. On failure the sink is aborted
        (nothing is left behind) and the error raised, except where the frames done are kept (a stop on
        request, a GPU failure mid-run, a live source lost): then the output is finalised first."""
        try:
            self._prepare()
            self._run_threads(self._encode_stage)
        finally:
            self._close_source()
        return self.stats

    def frames(self) -> Iterator[WorkItem]:
        """Frames as they complete, each finished on the device (its ``done`` event), in the caller's
        thread. The previous frame's buffers go back when the next one is asked for; closing the
        generator (``break``) stops the run and gives everything back. A pipeline with an output runs with
        :meth:`run`: its frames go to the output, not to a caller."""
        if self.sink is not None:  # refused here, not at the first frame asked for
            raise ConfigError("this Pipeline writes an output: run() it (frames() is for a pipeline built "
                              "without one)")
        return self._frames()

    def _frames(self) -> Iterator[WorkItem]:
        try:
            self._prepare()
            yield from self._pull()
        finally:
            self._close_source()

    def close(self) -> None:
        """Give the parts back without running (a run closes them itself)."""
        self._closed = True
        self._close_source()
        if self.sink is not None:
            self.sink.abort()
        self._give_memory_back()

    def _prepare(self) -> None:
        if self._closed:  # its source closed: the run would have found no frames, a bad input's error
            raise ConfigError("this Pipeline is closed; build another to run")
        if self._started:  # its source is spent and its memory given back: a second run would hang or lie
            raise ConfigError("a Pipeline runs once (run() or frames()); build another for the next run")
        self._started = True
        try:
            if self._memory is None:
                with self.phases("memory"):
                    self._memory = self.backend.memory(self.plan.request(
                        self.cfg, host_in=self.source.layout not in DEVICE_LAYOUTS, host_out=self.sink is not None
                        and self.sink.residence == "host", held=0 if self.sink is not None else 1,
                        lazy_ring=not (self.source.info.live or self.cfg.realtime)))
            if self.backend.name == "cuda":
                from .warmup import notice_if_cold

                notice_if_cold()
            with self.phases("kernels"):
                self.processor = Processor(self.backend.ops, self._memory, self.plan, self.cfg.in_flight,
                                           self.abort, self.stage, self.stats.input)
            self.stats.startup_ms = self.phases.ms
        except BaseException as e:  # CuPy's own errors (pinned or device memory) become GPUError
            self._give_memory_back()
            if self.sink is not None:
                self.sink.abort()
            error = as_pipeline_error(e)
            if error is e:
                raise
            raise error from e

    def _channels(self) -> None:
        # The callbacks handed to channels, feed and sink close over what they need, never over self:
        # a reference cycle back to the pipeline would keep each run's buffers alive until a full GC.
        flight, policy, stats = max(2, self.cfg.in_flight), self.stats.drop_policy, self.stats
        in_host = self.processor.memory.in_host
        depth = slotted = flight
        if stats.mode != "file":  # frames arrive on their own clock: room to ride out a stall of the GPU
            from .live import queue_depth

            depth = slotted = queue_depth(self.cfg.in_flight, getattr(self.source, "frame_rate", None))
            # A frame decoded on the CPU waits for a host slot before q_decoded, which so never holds more
            # than the ring has (the reader's queue before it still holds the quarter second). The naive
            # side allocates per frame: no slots.
            if (size := getattr(in_host, "size", None)) is not None:
                slotted = max(2, min(depth, size))
        self.q_decoded = Channel(slotted, self.abort, policy=policy, droppable=lambda i: isinstance(i, WorkItem),
                                 on_drop=_slot_dropper(in_host, stats))
        self.q_submitted = Channel(flight, self.abort)
        # A pipe is read on a thread of its own too: a read waiting on a silent writer cannot be interrupted,
        # and the decode stage must still see a stop (SIGTERM drains and finalises the frames read so far).
        if stats.mode != "file" or pipe_fd(self.cfg.input) is not None:
            from .live import Feed

            self._feed = Feed(self.source, size=depth, policy=policy, abort=self.abort,
                              paced=stats.mode == "paced", limit=self.cfg.frames, reconnect=self.cfg.reconnect,
                              timeout=self.cfg.timeout, on_drop=lambda entry: stats.drop("decode", received=True),
                              nvtx=self.nvtx)

    def _run_threads(self, consume: Callable[[], None]) -> None:
        self._channels()
        stages = [("decode", self._decode_stage, self.q_decoded), ("submit", self._submit_stage, self.q_submitted),
                  ("encode", consume, None)]
        threads = [Worker(self._guard, s, name=f"pipeline-{s[0]}") for s in stages]
        interrupted = False
        try:  # from before the first thread starts: a Ctrl-C meanwhile still ends the run through _finish
            self._start_preview()
            self._start(threads)
            self._wait_for(threads)
        except KeyboardInterrupt:
            interrupted = True
            self._stop_on_interrupt(threads)
            raise
        except GPUStalled:
            raise  # its threads are stuck in CUDA calls: the tear-down waits for none of them
        except BaseException as e:  # the main thread's own part failed: the run fails as for a stage's error,
            self._fail(e)  # its threads stopped and joined before anything closes under them
            self._join(threads, self._watch_gpu)
        finally:
            if self.preview is not None:
                self.preview.close()
            if not interrupted:
                self._finish()
            else:
                with contextlib.suppress(Interrupted):  # the frames done are kept; the caller gets its Ctrl-C
                    self._finish()

    def _pull(self) -> Iterator[WorkItem]:
        """The encode stage's place taken by the caller: decode and submit run in threads."""
        self._channels()
        stages = [("decode", self._decode_stage, self.q_decoded), ("submit", self._submit_stage, self.q_submitted)]
        threads = [Worker(self._guard, s, name=f"pipeline-{s[0]}") for s in stages]
        held: WorkItem | None = None
        finished = False
        try:
            self._start(threads)
            while (item := self._next_output()) is not None:
                if held is not None:
                    self._release_held(held)
                held = item
                yield item
            finished = True
        finally:
            if held is not None and self._stalled is None:
                self._release_held(held)
            if not finished:  # the caller stopped early (break, an exception): stop every stage
                self.stop_event.set()
                self.abort.set()
            # After a stall the threads may be stuck in CUDA calls too: none is waited for (the tear-down
            # waits on nothing on the device either, and raises the stall).
            interrupted = self._join(threads) if self._stalled is None else None
            self._finish(consumer_left=not finished)
            if interrupted is not None:
                raise interrupted

    def _next_output(self) -> WorkItem | None:
        """The next finished frame, counted as handed over; None at the end or once the run aborted."""
        while True:
            try:
                item = self.q_submitted.get()
            except Aborted:
                return None
            if item is _END:
                return None
            if isinstance(item, WorkItem):  # the caller's thread: no other one watches this wait
                timings, t0 = self._complete(item, self._watch_gpu)
                self._count_out(item.meta, timings, t0)
                return item

    def _release_held(self, item: WorkItem) -> None:
        # After the work the caller may have queued on its current stream that reads the frame.
        self.processor.release(item, after=self.backend.ops.record_current())

    def _start(self, threads: list[Worker]) -> None:
        """The reader (live sources) and the stages started. With no thread to be had the run fails as a
        failing stage fails it: the threads started see the abort and end, and no output is kept."""
        try:
            start_all([self._feed, *threads] if self._feed is not None else threads)
        except PipelineError as e:
            self._fail(e)

    def _wait_for(self, threads: list[Worker]) -> None:
        # The preview window (GUI calls belong on the main thread) is refreshed between the waits.
        wait_for_all(threads, 0.01 if self.preview is not None else 0.1, self._tick)

    def _tick(self) -> None:
        if self.preview is not None:
            self.preview.pump()
        self._watch_gpu()

    def _stop_on_interrupt(self, threads: list[Worker]) -> None:
        """A Ctrl-C in the caller's thread (KeyboardInterrupt: the API's caller; the command line's handlers
        set events instead) stops the run as the command line's first one does, the frames in flight
        drained; another one meanwhile stops it at once. The threads are joined before anything closes. One
        that came while the stages were being started may have left a later stage unstarted: with nobody to
        drain into, the others stop at once (they waited forever on a full channel)."""
        self.stop_event.set()
        if any(t.never_ran() for t in threads):
            self.abort.set()
        self._join(threads, self._tick)

    def _join(self, threads: list[Worker], tick: Callable[[], None] | None = None) -> KeyboardInterrupt | None:
        """Wait for the threads to end whatever comes: a Ctrl-C meanwhile (the API caller's) stops them at once
        and is handed back, to be raised once the run is torn down; nothing closes under a running thread."""
        interrupted = None
        while True:
            try:
                wait_for_all(threads, 0.01 if self.preview is not None else 0.1, tick)
                return interrupted
            except KeyboardInterrupt as e:
                interrupted = e
                self.abort.set()

    def _watch_gpu(self) -> None:
        """Stop the run when one frame's device work has not completed for GPU_STALL_S: the thread waiting on
        it will never return, and neither would a graceful stop, which waits for it. Only time the watchdog
        itself saw counts: after a gap between its polls (the process was stopped, Ctrl-Z) it starts over."""
        now = time.monotonic()
        frame = self.processor.waiting if self.processor is not None else None
        watched, since, polled = self._watch
        if frame is None or frame != watched or now - polled > WATCH_GAP_S:
            since = now
        self._watch = (frame, since, now)
        if frame is None or now - since <= GPU_STALL_S:
            return
        GPUStalled.happened = True
        self._stalled = GPUStalled(f"the GPU made no progress for {GPU_STALL_S:g} s (frame {frame}'s work never "
                                   "completed); stopped")
        self.abort.set()
        raise self._stalled

    def _start_preview(self) -> None:
        if self.cfg.preview:
            from .preview import Preview

            # 'q': a graceful stop, as Ctrl-C, and said as Ctrl-C (exit 130)
            self.preview = Preview(on_quit=functools.partial(self.control.stop, signal.SIGINT))

    def _guard(self, name: str, body: Callable[[], None], downstream: Channel | None) -> None:
        try:
            make_current = getattr(self.backend, "make_current", None)
            if make_current is not None:
                make_current()  # a new thread starts on device 0: every stage works on the run's GPU
            body()
        except Aborted:
            pass
        except BaseException as e:
            self._fail(e)
        finally:
            if downstream is not None:
                try:
                    downstream.put(_END)
                except Aborted:
                    pass

    def _fail(self, error: BaseException) -> None:
        with self._error_lock:
            if self._error is None:
                self._error = error
        self.abort.set()

def plan_for(source, chain, backend, out_layout: str, stage) -> FramePlan:
    """The frame plan of a run: the source's layout in, the sink's out, ends folded where the backend can."""
    from .filters.plugins import plugin_errors_are_config_errors

    with plugin_errors_are_config_errors():  # a plugin's output_size or scratch_shapes may fail here
        return FramePlan.build(source.info.format, chain, in_layout=source.layout, out_layout=out_layout,
                               fold=backend.ops.folds_pointwise, stage=stage is not None)


def output_info(source, plan: FramePlan) -> StreamInfo:
    """What the sink writes: the plan's output format, and the input's pixel aspect ratio through the chain."""
    from .filters.plugins import plugin_errors_are_config_errors

    with plugin_errors_are_config_errors():  # a plugin's output_sar may fail
        return source.info.processed(plan.out_format, plan.output_sar(source.info.sar))


def _slot_dropper(ring, stats: RunStats) -> Callable[[WorkItem], None]:
    def drop(item: WorkItem) -> None:
        """A frame dropped from q_decoded, never submitted: its host slot goes back unused, its decoder
        surface to the thread that decodes."""
        release_in_slot(ring, item)
        item.give_back_surface()
        stats.drop("submit")

    return drop
