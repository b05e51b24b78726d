"""The pipeline: three threads joined by bounded channels.

    decode thread  --q_decoded-->  GPU submit thread  --q_submitted-->  encode thread

The decode thread copies each frame into a host slot; the submit thread issues upload, kernels and
download on the frame's stream without waiting; the encode thread waits on that frame's ``done``
event only, then encodes. Audio packets ride along the same channels so order is kept. Bounded
channels, the host ring and the pool of in-flight contexts give back-pressure end to end.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable

from .channels import END as _END, Aborted, Channel, wait_for
from .config import RunConfig
from .errors import ConfigError, GPUError, InputError, Interrupted, OutputError, PipelineError
from .filters import fuse_pointwise, load_plugin, parse_chain
from .frames import WorkItem
from .memory.arena import align_up
from .processor import FramePlan, Processor
from .sink import Sink
from .source import AudioPacket, DecodedFrame, Source
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
        self._error: BaseException | None = None
        self._error_lock = threading.Lock()
        self.on_frame: Callable[[RunStats], None] | None = None
        self.total_frames: int | None = None
        self.signum: int | None = None
        self._sink: Sink | None = None

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
        if sink is not None:
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
        ops, memory_for = self._backend()
        target = cfg.output_path()
        check_output(Path(cfg.input), target, cfg.overwrite)
        source = Source(cfg.input, notice=self.notice, strict=cfg.strict)
        try:
            plan = FramePlan.build(source.format, chain)
            if self.stats.device == "cpu":
                check_host_memory(cfg, plan)
            try:
                memory = memory_for(cfg.alloc, source.format.nbytes, plan.out_format.nbytes, plan.frame_bytes,
                                    cfg, plan.state_bytes)
                self.processor = Processor(ops, memory, plan, chain, cfg.in_flight, self.abort)
            except Exception as e:  # CuPy's own errors (pinned or device memory) become GPUError
                error = _as_pipeline_error(e)
                if error is e:
                    raise
                raise error from e
            self._describe(source, plan, target)
            try:
                self._sink = Sink(target, plan.out_format, codec=cfg.codec, options=cfg.encoder_opts,
                                  rate=source.frame_rate, time_base=source.video.time_base,
                                  audio_streams=source.audio, display_matrix=source.display_matrix)
            except BaseException:
                self.processor.close()  # give the device arena back: the caller may run again in-process
                raise
            self._run_threads(source, self._sink)
        finally:
            source.close()
        return self.stats

    def _backend(self):
        from .gpu.cuda import gpu_status

        device = self.cfg.device
        if device in ("auto", "cuda"):
            ok, reason = gpu_status()
            if ok:
                from .gpu.memory import cuda_memory
                from .gpu.streams import CudaOps

                self.stats.device = "cuda"
                return CudaOps(self.cfg.streams, default_stream=self.cfg.alloc == "naive"), cuda_memory
            if device == "cuda":
                raise GPUError(f"--device cuda: {reason}")
            self.notice(f"no usable CUDA GPU ({reason}); running on the CPU")
        if self.cfg.alloc not in ("pool", "naive"):
            raise ConfigError(f"--alloc {self.cfg.alloc} needs a CUDA GPU; the CPU backend has pool and naive")
        from .cpu import CpuOps, cpu_memory

        self.stats.device = "cpu"
        return CpuOps(), cpu_memory

    def _describe(self, source: Source, plan: FramePlan, target: Path) -> None:
        s = self.stats
        s.output, s.width, s.height = str(target), plan.out_format.width, plan.out_format.height
        limit = self.cfg.frames
        expected = source.expected_frames
        self.total_frames = min(limit, expected) if limit and expected else (limit or expected)

    # -- the three stages -----------------------------------------------------------------------

    def _run_threads(self, source: Source, sink: Sink) -> None:
        depth = max(2, self.cfg.in_flight)
        self.q_decoded = Channel(depth, self.abort)
        self.q_submitted = Channel(depth, self.abort)
        stages = [
            ("decode", lambda: self._decode_stage(source), self.q_decoded),
            ("submit", self._submit_stage, self.q_submitted),
            ("encode", lambda: self._encode_stage(sink), None),
        ]
        threads = [threading.Thread(target=self._guard, args=s, name=f"pipeline-{s[0]}", daemon=True) for s in stages]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.1)  # short waits: signal handlers run only when the main thread wakes
        finally:
            self.stats.finish()
            self._count_damage(source, sink)
            self._close(sink)

    def _count_damage(self, source: Source, sink: Sink) -> None:
        s = self.stats
        s.decode_errors, s.corrupt_frames = source.decode_errors, source.corrupt_frames
        s.retimed_frames = source.retimed_frames
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
        ring = self.processor.memory.in_host
        for entry in source.items(self.cfg.frames):
            if self.stop_event.is_set():
                break
            if isinstance(entry, AudioPacket):
                self.q_decoded.put(entry)
                continue
            assert isinstance(entry, DecodedFrame)
            slot = wait_for(lambda: ring.acquire(timeout=0.05), self.abort)
            t0 = time.perf_counter()
            source.copy_into(entry.frame, slot.array)
            entry.meta.decode_s += time.perf_counter() - t0
            self.stats.frames_in += 1
            self.q_decoded.put(WorkItem(entry.meta, in_slot=slot))

    def _submit_stage(self) -> None:
        while (item := self.q_decoded.get()) is not _END:
            if isinstance(item, WorkItem):
                self.processor.submit(item)
            self.q_submitted.put(item)

    def _encode_stage(self, sink: Sink) -> None:
        out_ring = self.processor.memory.out_host
        lent: deque = deque()
        while (item := self.q_submitted.get()) is not _END:
            if isinstance(item, AudioPacket):
                if sink.write_audio(item.packet):
                    self.stats.audio_packets += 1
                elif self.cfg.strict and sink.audio_dropped:
                    raise InputError(f"{self.cfg.input}: damaged audio packet at dts {item.packet.dts} (--strict)")
                continue
            timings = self.processor.complete(item)
            t0 = time.perf_counter()
            slot = item.out_slot
            sink.write_video(slot.lend(item.out_format.shape), item.meta)
            lent.append(slot)
            if slot.in_use_elsewhere:
                sink.zero_copy = False  # this encoder keeps frames: copy from now on, never wait on it
            while lent and not lent[0].in_use_elsewhere:
                out_ring.release(lent.popleft())
            now = time.perf_counter()
            timings.update(decode=item.meta.decode_s * 1e3, encode=(now - t0) * 1e3)
            self.stats.add_frame(timings, (now - item.meta.decoded_at) * 1e3)
            if self.stats.frames_out == WARMUP_FRAMES:
                self.stats.memory_warm = {**self.processor.memory.counters(), "frames": WARMUP_FRAMES}
            if self.on_frame is not None:
                self.on_frame(self.stats)

    # -- tear-down --------------------------------------------------------------------------------

    def _close(self, sink: Sink) -> None:
        error = self._error
        try:
            self.processor.close()
        except Exception as e:  # a CUDA error surfacing at the final sync
            error = error or GPUError(f"CUDA error while draining: {e}")
        self.stats.memory = self.processor.memory.counters()
        error = _as_pipeline_error(error) if error is not None else None
        done = self.stats.frames_out
        # Keep a playable file of the frames done when stopped on purpose or by the GPU mid-run;
        # any other failure (bad input, write error, a bug) leaves no output at all.
        keep = done > 0 and (error is None or isinstance(error, GPUError))
        if not keep:
            sink.abort()
        else:
            sink.finish()
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
    arena = align_up(int(plan.frame_bytes * cfg.in_flight * cfg.arena_headroom)) + align_up(plan.state_bytes)
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


def _as_pipeline_error(error: BaseException) -> BaseException:
    if isinstance(error, PipelineError):
        return error
    if isinstance(error, MemoryError) and "cupy" in type(error).__module__:
        return GPUError(f"out of device memory: {error}")
    if type(error).__module__.startswith(("cupy", "cupy_backends")):
        return GPUError(f"CUDA error: {error}")
    return error


def check_output(source: Path, target: Path, overwrite: bool) -> None:
    """Refuse, before decoding anything, an output that would destroy the input or cannot be written."""
    if target.exists() and source.exists() and target.resolve().samefile(source.resolve()):
        raise ConfigError(f"{target}: output is the input; choose another -o")
    if target.exists() and target.is_dir():
        raise OutputError(f"{target}: is a directory")
    if target.exists() and not overwrite:
        raise ConfigError(f"{target}: already exists (use -y/--overwrite to replace it)")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"{target}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"{target}: directory {parent} is not writable")
