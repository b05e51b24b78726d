"""The pipeline: three threads joined by bounded channels (four with a live or paced source).

    [read thread --feed-->]  decode thread  --q_decoded-->  GPU submit thread  --q_submitted-->  encode thread

The decode thread copies each frame into a host slot; the submit thread issues upload, kernels and
download on the frame's stream without waiting; the encode thread waits on that frame's ``done``
event only, then encodes. Audio packets ride along the same channels so order is kept. Bounded
channels, the host ring and the pool of in-flight contexts give back-pressure end to end.

A file is read as fast as the pipeline takes it and every frame comes out (drop policy ``block``).
A live source, or a file paced with ``--realtime``, is read by its own thread (:mod:`pipeline.live`)
and cannot wait: with ``drop-oldest`` (their default) or ``drop-newest``, a frame that finds the
feed or ``q_decoded`` full is dropped there and counted, per stage (``stats.drops``). ``q_submitted``
always blocks: frames there hold GPU work, and the wait reaches ``q_decoded`` within a few frames.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from fractions import Fraction
from typing import Callable

from .channels import END as _END, Aborted, Channel, wait_for
from .checks import as_pipeline_error, check_output, check_stats_path
from .config import RunConfig
from .errors import ConfigError, GPUError, InputError, Interrupted, SourceStalled
from .filters import fuse_pointwise, load_plugin, parse_chain
from .frames import FrameMeta, WorkItem
from .gpu.nvtx import ranges as nvtx_ranges
from .latency import HostClock, LatencyLog
from .live import Feed, open_in_background
from .memory.device_pool import arena_capacity
from .processor import FramePlan, Processor
from .sink import Sink
from .source import AudioPacket, DecodedFrame, Source, is_live_input
from .stats import RunStats

WARMUP_FRAMES = 2


def stderr_notice(message: str) -> None:
    print(f"pipeline: {message}", file=sys.stderr)


class Pipeline:
    def __init__(self, cfg: RunConfig, *, notice: Callable[[str], None] = stderr_notice):
        self.cfg = cfg
        self.notice = notice
        self.stop_event = threading.Event()  # graceful: drain and finalise
        self.abort = threading.Event()  # a stage failed: everyone stops
        self.stats = RunStats(strategy=cfg.alloc, input=cfg.input, filters=cfg.filters)
        self.latency = self.stats.latency = LatencyLog(self.stats.started, budget_ms=cfg.latency_budget,
                                                       notice=notice)
        self._error: BaseException | None = None
        self._error_lock = threading.Lock()
        self._input_error: SourceStalled | None = None  # a live source lost: the frames done are kept
        self.on_frame: Callable[[RunStats], None] | None = None
        self.total_frames: int | None = None
        self.signum: int | None = None
        self._sink: Sink | None = None
        self._feed: Feed | None = None
        self.preview = None
        self.nvtx = nvtx_ranges(False, notice)

    def stop(self, signum: int | None = None) -> None:
        """Ask for a graceful stop: in-flight frames are drained and the output finalised.

        Safe from a signal handler: it only sets an event the decode stage polls.
        """
        if signum is not None and self.signum is None:
            self.signum = signum
        self.stop_event.set()

    def discard_output(self) -> None:
        """Before an immediate exit (a second signal): drop the partial file; the target is untouched.

        Only unlinks a path, so it is safe while the encode thread is still writing.
        """
        sink = self._sink
        if sink is not None and sink.tmp is not None:
            try:
                sink.tmp.unlink(missing_ok=True)
            except OSError:
                pass

    # -- set-up ---------------------------------------------------------------------------------

    def run(self) -> RunStats:
        """Everything that can be refused (options, GPU, output path, input) is checked before any
        output file exists; after that, a failure removes the partial file."""
        cfg = self.cfg
        for plugin in cfg.plugins:
            load_plugin(plugin)
        chain = fuse_pointwise(parse_chain(cfg.filters))
        if cfg.preview:
            from .preview import check_display

            check_display()
        ops, memory_for = self._backend()
        target = cfg.output_target()
        check_output(cfg.input, target, cfg.overwrite)
        check_stats_path(cfg.stats_json)
        self.nvtx = nvtx_ranges(cfg.nvtx, self.notice)
        source = self._open_source()
        try:
            plan = FramePlan.build(source.format, chain)
            if self.stats.device == "cpu":
                check_host_memory(cfg, plan)
            memory = None
            try:
                memory = memory_for(cfg.alloc, source.format.nbytes, plan.out_format.nbytes, plan.frame_bytes,
                                    cfg, plan.state_bytes)
                self.processor = Processor(ops, memory, plan, chain, cfg.in_flight, self.abort)
            except Exception as e:  # CuPy's own errors (pinned or device memory) become GPUError
                if memory is not None:
                    memory.close()  # the arena is given back even when the run never starts
                error = as_pipeline_error(e)
                if error is e:
                    raise
                raise error from e
            self._describe(source, plan, target)
            try:
                self._sink = self._open_sink(source, plan, target)
            except BaseException:
                self.processor.close()  # give the device arena back: the caller may run again in-process
                raise
            self._run_threads(source, self._sink)
        finally:
            if self._feed is None or self._feed.close():
                source.close()  # else the reader, still in a read, closes it when that returns
        return self.stats

    def _open_source(self) -> Source:
        cfg = self.cfg
        live = is_live_input(cfg.input, cfg.input_format)

        def open_source() -> Source:
            return Source(cfg.input, notice=self.notice, strict=cfg.strict, input_format=cfg.input_format,
                          options=cfg.input_opts, timeout=cfg.timeout, live=live)

        if not live:
            return open_source()
        return open_in_background(open_source, self.stop_event, lambda: self.signum)

    def _open_sink(self, source: Source, plan: FramePlan, target) -> Sink:
        cfg = self.cfg
        return Sink(target, plan.out_format, codec=cfg.codec, options=cfg.encoder_opts, rate=source.frame_rate,
                    time_base=source.video.time_base, audio_streams=source.audio,
                    display_matrix=source.display_matrix, output_format=cfg.output_format,
                    output_opts=cfg.output_opts, timeout=cfg.timeout, low_latency=self.stats.mode != "file")

    def _backend(self):
        from .gpu.cuda import gpu_status

        device = self.cfg.device
        if device in ("auto", "cuda"):
            ok, reason = gpu_status()
            if ok:
                from .gpu.clock import GpuClock
                from .gpu.memory import cuda_memory
                from .gpu.streams import CudaOps

                self.stats.device = "cuda"
                self.clock = GpuClock()
                return CudaOps(self.cfg.streams, default_stream=self.cfg.alloc == "naive"), cuda_memory
            if device == "cuda":
                raise GPUError(f"--device cuda: {reason}")
            self.notice(f"no usable CUDA GPU ({reason}); running on the CPU")
        if self.cfg.alloc not in ("pool", "naive"):
            raise ConfigError(f"--alloc {self.cfg.alloc} needs a CUDA GPU; the CPU backend has pool and naive")
        from .cpu import CpuOps, cpu_memory

        self.stats.device = "cpu"
        self.clock = HostClock()
        return CpuOps(), cpu_memory

    def _describe(self, source: Source, plan: FramePlan, target) -> None:
        s = self.stats
        s.output, s.width, s.height = str(target), plan.out_format.width, plan.out_format.height
        s.mode = "live" if source.live else "paced" if self.cfg.realtime else "file"
        policy = self.cfg.drop_policy
        if s.mode == "file" and policy not in ("auto", "block"):
            # Nothing upstream of a plain file can overflow: dropping would only lose frames.
            self.notice(f"--drop-policy {policy} applies to live or --realtime sources; this file is read with block")
            policy = "block"
        s.drop_policy = policy if policy != "auto" else ("block" if s.mode == "file" else "drop-oldest")
        limit = self.cfg.frames
        expected = None if source.live else source.expected_frames
        self.total_frames = min(limit, expected) if limit and expected else (limit or expected)

    # -- the stages -----------------------------------------------------------------------------

    def _run_threads(self, source: Source, sink: Sink) -> None:
        # The callbacks handed to channels, feed and sink close over what they need, never over self:
        # a reference cycle back to the pipeline would keep each run's buffers alive until a full GC.
        depth, policy, stats = max(2, self.cfg.in_flight), self.stats.drop_policy, self.stats
        self.q_decoded = Channel(depth, self.abort, policy=policy, droppable=lambda i: isinstance(i, WorkItem),
                                 on_drop=_slot_dropper(self.processor.memory.in_host, stats))
        self.q_submitted = Channel(depth, self.abort)
        if stats.mode != "file":
            self._feed = Feed(source, size=depth, policy=policy, abort=self.abort, paced=stats.mode == "paced",
                              limit=self.cfg.frames, reconnect=self.cfg.reconnect, timeout=self.cfg.timeout,
                              notice=self.notice, on_drop=lambda entry: stats.drop("decode", received=True),
                              nvtx=self.nvtx)
        self._start_preview()
        stages = [
            ("decode", lambda: self._decode_stage(source), self.q_decoded),
            ("submit", self._submit_stage, self.q_submitted),
            ("encode", lambda: self._encode_stage(sink), None),
        ]
        threads = [threading.Thread(target=self._guard, args=s, name=f"pipeline-{s[0]}", daemon=True) for s in stages]
        if self._feed is not None:
            self._feed.start()
        for t in threads:
            t.start()
        try:
            self._wait_for(threads)
        finally:
            self.stats.finish()
            self._count_damage(source, sink)
            self._close(sink)

    def _wait_for(self, threads: list[threading.Thread]) -> None:
        # Short waits: signal handlers run only when the main thread wakes; the preview window
        # (GUI calls belong on the main thread) is refreshed between them.
        poll = 0.01 if self.preview is not None else 0.1
        try:
            for t in threads:
                while t.is_alive():
                    t.join(poll)
                    if self.preview is not None:
                        self.preview.pump()
        finally:
            if self.preview is not None:
                self.preview.close()

    def _start_preview(self) -> None:
        if self.cfg.preview:
            from .preview import Preview

            self.preview = Preview(on_quit=self.stop_event.set)  # 'q': a graceful stop, as Ctrl-C

    def _count_damage(self, source: Source, sink: Sink) -> None:
        s = self.stats
        s.decode_errors, s.corrupt_frames = source.decode_errors, source.corrupt_frames
        s.retimed_frames = source.retimed_frames
        channels = {"submit": self.q_decoded, "encode": self.q_submitted}
        if self._feed is not None:
            channels = {"decode": self._feed.channel, **channels}
            s.reconnects = self._feed.reconnects
        s.queues = {name: {"size": c.size, "peak": c.peak, "dropped": c.dropped} for name, c in channels.items()}
        if sink.audio_dropped:
            self.notice(f"warning: {source.path}: {sink.audio_dropped} damaged audio packets dropped "
                        "(timestamps going backwards, or refused by the muxer)")

    def _guard(self, name: str, body: Callable[[], None], downstream: Channel | None) -> None:
        try:
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

    def _decode_stage(self, source: Source) -> None:
        feed = self._feed
        entries = feed.entries(self.stop_event) if feed is not None else source.items(self.cfg.frames)
        try:
            for entry in entries:
                if self.stop_event.is_set():
                    break
                if isinstance(entry, AudioPacket):
                    self.q_decoded.put(entry)
                    continue
                assert isinstance(entry, DecodedFrame)
                with self.nvtx(f"decode {entry.meta.index}"):
                    item = self._into_slot(source, entry)
                self.q_decoded.put(item)
        except SourceStalled as e:
            self._input_error = e  # the frames before the stall still go through; reported at the end
        finally:
            if feed is not None:
                feed.stop()

    def _into_slot(self, source: Source, entry: DecodedFrame) -> WorkItem:
        slot = wait_for(lambda: self.processor.memory.in_host.acquire(timeout=0.05), self.abort)
        t0 = time.perf_counter()
        source.copy_into(entry.frame, slot.array)
        t1 = time.perf_counter()
        entry.meta.decode_s += t1 - t0
        entry.meta.stamps["slotted"] = t1
        self.stats.count_in()
        return WorkItem(entry.meta, in_slot=slot)

    def _submit_stage(self) -> None:
        while (item := self.q_decoded.get()) is not _END:
            if isinstance(item, WorkItem):
                with self.nvtx(f"submit {item.meta.index}"):
                    self.processor.submit(item)
            self.q_submitted.put(item)

    def _encode_stage(self, sink: Sink) -> None:
        lent: deque = deque()
        latency = self.latency
        sink.on_packets = lambda times: latency.packets(times, time.perf_counter())
        while (item := self.q_submitted.get()) is not _END:
            if isinstance(item, AudioPacket):
                if sink.write_audio(item.packet):
                    self.stats.audio_packets += 1
                elif self.cfg.strict and sink.audio_dropped:
                    raise InputError(f"{self.cfg.input}: damaged audio packet at dts {item.packet.dts} (--strict)")
                continue
            with self.nvtx(f"encode {item.meta.index}"):
                self._encode_frame(item, sink, lent)

    def _encode_frame(self, item: WorkItem, sink: Sink, lent: deque) -> None:
        meta = item.meta
        gpu_stamps = self.clock.stamps(item.ctx)  # waits for this frame's done event only
        timings = self.processor.complete(item)
        t0 = time.perf_counter()
        self.latency.handed(meta.index, _seconds(meta),
                            {"decoded": meta.decoded_at, **meta.stamps, **gpu_stamps, "encoder": t0})
        slot = item.out_slot
        sink.write_video(slot.lend(item.out_format.shape), meta)
        if self.preview is not None and self.preview.wants_frame():
            fmt = item.out_format
            self.preview.offer(slot.array[:fmt.nbytes].reshape(fmt.shape), self._caption(meta, t0))
        lent.append(slot)
        if slot.in_use_elsewhere:
            sink.zero_copy = False  # this encoder keeps frames: copy from now on, never wait on it
        while lent and not lent[0].in_use_elsewhere:
            self.processor.memory.out_host.release(lent.popleft())
        now = time.perf_counter()
        timings.update(decode=meta.decode_s * 1e3, encode=(now - t0) * 1e3)
        self.stats.add_frame(timings, (now - meta.decoded_at) * 1e3)
        if self.stats.frames_out == WARMUP_FRAMES:
            self.stats.memory_warm = {**self.processor.memory.counters(), "frames": WARMUP_FRAMES}
        if self.on_frame is not None:
            self.on_frame(self.stats)

    def _caption(self, meta: FrameMeta, handed: float) -> str:
        elapsed = handed - self.stats.started
        fps = self.stats.frames_out / elapsed if elapsed > 0 else 0.0
        return f"{fps:5.1f} fps  {(handed - meta.decoded_at) * 1e3:6.1f} ms  dropped {self.stats.dropped}"

    # -- tear-down --------------------------------------------------------------------------------

    def _close(self, sink: Sink) -> None:
        error = self._error
        try:
            self.processor.close()
        except Exception as e:  # a CUDA error surfacing at the final sync
            error = error or GPUError(f"CUDA error while draining: {e}")
        self.stats.memory = self.processor.memory.counters()
        error = as_pipeline_error(error) if error is not None else self._input_error
        done = self.stats.frames_out
        # Keep a playable file of the frames done when stopped on purpose, by the GPU mid-run or by a
        # live source that stalled; any other failure (bad input, write error, a bug) leaves no output.
        keep = done > 0 and (error is None or isinstance(error, (GPUError, SourceStalled)))
        if not keep:
            sink.abort()
        else:
            sink.finish()
        self.latency.finish()
        if error is not None:
            if keep:
                error.args = (f"{error}; {sink.target} holds the {done} frames done",)
            raise error
        if self.stop_event.is_set():
            kept = f"{sink.target} holds the {done} frames done" if keep else "no output written"
            raise Interrupted(self.signum or 2, kept)
        if not keep:
            raise InputError(f"{self.cfg.input}: no frames decoded; no output written")


def check_host_memory(cfg: RunConfig, plan: FramePlan) -> None:
    """Refuse, before allocating, a run whose frames cannot fit in this machine's memory (CPU backend:
    the "device" arena is host memory too). CUDA reports its own shortfall, with sizes, at reservation."""
    needed = memory_needed(cfg, plan)
    available = _available_memory()
    if available is not None and needed > available:
        f = plan.in_format
        raise GPUError(
            f"{cfg.input}: out of memory: {f.width}x{f.height} frames need {_gib(needed)} "
            f"({needed} bytes: {cfg.in_flight} in flight, {cfg.ring_size} ring slots each way), "
            f"{_gib(available)} is available; lower --in-flight/--ring-size or the resolution"
        )


def memory_needed(cfg: RunConfig, plan: FramePlan) -> int:
    """The arena and host rings the run reserves: the same sums the memory strategies make."""
    arena = arena_capacity(plan.frame_bytes, cfg.in_flight, cfg.arena_headroom, plan.state_bytes)
    rings = cfg.ring_size * (plan.in_format.nbytes + plan.out_format.nbytes)
    return arena + rings


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None  # not Linux: no check, the allocation itself reports


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def _slot_dropper(ring, stats: RunStats) -> Callable[[WorkItem], None]:
    def drop(item: WorkItem) -> None:
        """A frame dropped from q_decoded: its host slot goes back unused (it was never uploaded)."""
        ring.release(item.in_slot)
        item.in_slot = None
        stats.drop("submit")

    return drop


def _seconds(meta: FrameMeta) -> float | None:
    """The frame's timestamp in seconds: how its packet is recognised when the encoder returns it."""
    if meta.pts is None or not meta.time_base:
        return None
    return float(meta.pts * Fraction(meta.time_base))
