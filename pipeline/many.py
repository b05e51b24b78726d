"""Many streams in one process: one CUDA context, one device arena and one pinned pool for all of them.

Each stream is a whole pipeline of its own (its CUDA streams, decode, encode, statistics and output),
run by a thread; what they share is memory. With the pooled strategy every stream borrows its frames
from one :class:`~pipeline.memory.shared.SharedArena` (size classes over chunks reserved as streams of
new sizes appear, reused after their events, never freed while the process runs) and its host slots
from one :class:`~pipeline.memory.shared.PinnedPool` (capped: by default half of the machine's RAM).
A stream that stops gives its blocks and slots back for the next one, of any size.

Why threads: a stream's stages spend their time where the GIL is released (FFmpeg's decode and
encode, NVDEC, CUDA copies and launches return at once), so one process drives dozens of streams on
one GPU; separate processes would each need their own context, arena and pinned pool, which is what
this module exists to avoid. A slow, stalled or failing stream never blocks the others: each has its
own bounded queues and drop policy, and its error ends only its own run. The exit code of the whole
is the worst stream's.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .channels import Worker, start_all, wait_for_all
from .config import RunConfig
from .errors import EXIT_INTERNAL, EXIT_SIGINT, ConfigError, GPUStalled, PipelineError
from .log import log


class SharedMemory:
    """The device arena and pinned pool every stream of a process (on one GPU) borrows from."""

    def __init__(self, device: str, *, pinned_cap: int | None = None, granularity: int | None = None):
        from .memory.shared import DEFAULT_GRANULARITY, PinnedPool, SharedArena, default_pinned_cap

        if device == "cuda":
            from .gpu.memory import CudaBacking, pinned_array

            backing, allocate = CudaBacking, pinned_array
        else:
            import numpy as np

            from .memory.device_pool import NumpyBacking

            backing, allocate = NumpyBacking, (lambda n: np.empty(n, np.uint8))
        self.device = device
        self.arena = SharedArena(backing, granularity=granularity or DEFAULT_GRANULARITY)
        # The cap is on page-locked memory: the CPU backend's host buffers are ordinary memory, as in one run.
        cap = None if device != "cuda" else pinned_cap if pinned_cap is not None else default_pinned_cap()
        self.pinned = PinnedPool(allocate, max_bytes=cap)
        self._count = 0
        self._lock = threading.Lock()

    def memory(self, request) -> Any:
        """One stream's memory: a lease on the arena and rings from the pinned pool (given back by
        ``Memory.close`` at the end of its run)."""
        from .memory.registry import write_combined_ignored
        from .memory.strategies import Memory

        write_combined_ignored(request, "streams sharing one pinned pool (several inputs, a batch)"
                               if self.device == "cuda" else "the CPU backend")
        with self._lock:
            self._count += 1
            name = f"stream {self._count}"
        self.pinned.check_room(request.ring_size, request.in_bytes, request.out_bytes)
        lease = self.arena.lease(name)
        rings = []
        try:
            for nbytes in (request.in_bytes, request.out_bytes):
                rings.append(self.pinned.ring(request.ring_size, nbytes) if nbytes else None)
        except BaseException:
            for ring in rings:
                if ring is not None:
                    ring.close()
            lease.close()
            raise
        return Memory("pool", rings[0], rings[1], lease, pinned=self.device == "cuda")

    def counters(self) -> dict[str, Any]:
        arena = self.arena.counters()
        pinned = self.pinned.counters()
        return {**{f"arena_{k}": v for k, v in arena.items()}, **{f"pinned_{k}": v for k, v in pinned.items()}}

    def close(self) -> None:
        self.arena.close()
        self.pinned.close()


class SharedBackend:
    """A backend whose pooled runs take their memory from a :class:`SharedMemory` (other strategies,
    the comparison, keep memory of their own)."""

    def __init__(self, inner, shared: SharedMemory):
        self._inner, self._shared = inner, shared

    def memory(self, request):
        if self._inner.strategy.name == "pool":
            return self._shared.memory(request)
        return self._inner.memory(request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@dataclass
class StreamResult:
    input: str
    output: str
    exit_code: int = 0
    error: str = ""
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class ManyResult:
    streams: list[StreamResult]
    wall_s: float
    shared: dict[str, Any]

    @property
    def exit_code(self) -> int:
        """The worst stream's (an interrupted run's 130/143 ranks above the others' codes)."""
        return max((s.exit_code for s in self.streams), default=0)

    @property
    def frames(self) -> int:
        return sum(s.stats.get("frames_out", 0) for s in self.streams)

    def write_json(self, path: str | Path, exclusive: bool = False) -> None:
        """What ``--stats-json`` holds for many streams; ``exclusive``: fail (FileExistsError) rather than
        replace a file that exists by now (a FIFO or a device is written into)."""
        import json

        from .reportfile import report_file

        body = {"schema_version": 1, "totals": self.totals(),
                "streams": [{"input": s.input, "output": s.output, "exit_code": s.exit_code, "error": s.error,
                             "stats": s.stats} for s in self.streams]}
        with report_file(path, exclusive) as f:
            f.write(json.dumps(body, indent=2) + "\n")

    def totals(self) -> dict[str, Any]:
        return {"streams": len(self.streams), "failed": sum(1 for s in self.streams if s.exit_code),
                "frames_out": self.frames, "wall_s": round(self.wall_s, 3),
                "fps": round(self.frames / self.wall_s, 2) if self.wall_s else 0.0,
                "dropped": sum(s.stats.get("drops", {}).get("total", 0) for s in self.streams),
                "exit_code": self.exit_code, "shared": self.shared}


def output_for(source: str, output: str | None, index: int, taken: set[str], muxer: str | None = None) -> str:
    """``DIR/<stem>_processed<ext>`` for a directory (``-o DIR/``), ``null`` as it is; ``muxer`` (``-f``)
    decides the extension where given."""
    if output in (None, "null"):
        return "null"
    from .outfile import fit_name, name_max

    stem, suffix = _name_of(source, index)
    if muxer:
        suffix = muxer_suffix(muxer, suffix)
    limit = name_max(Path(output))  # a name chosen here must fit, however long the input's

    def named(tail: str) -> str:
        return fit_name(stem, limit - len(os.fsencode(f"{tail}{suffix}"))) + tail + suffix

    name, n = named("_processed"), index
    while name in taken:  # two inputs of one name in different folders (and a_2.mp4 beside a second a.mp4)
        name, n = named(f"_{n}_processed"), n + 1
    taken.add(name)
    # Joined as typed: Path('.') / name drops the './' that keeps a name like pipe:x_processed.mp4 a file.
    return os.path.join(output, name)


# Muxers whose extensions in alphabetical order start with an odd one (image2: .avif; rawvideo: .rgb).
_USUAL = {".png": "image2", ".yuv": "rawvideo"}


def muxer_suffix(muxer: str, suffix: str) -> str:
    """The extension of a file ``muxer`` writes: the input's where it is one of the muxer's (a .m2ts input
    with -f mpegts), else the usual one (-f mpegts into a folder wrote a.mp4 holding MPEG-TS): the common
    one, else the muxer's name where it is an extension of its own (``ismv``), else the first in order."""
    from .avlib import extensions_of
    from .muxers import COMMON

    extensions = extensions_of(muxer)
    if suffix[1:].lower() in extensions:
        return suffix
    usual = [ext for ext, name in {**COMMON, **_USUAL}.items() if name == muxer]
    if usual:
        return usual[0]
    if muxer in extensions:
        return f".{muxer}"
    return f".{min(extensions)}" if extensions else suffix


def into_directory(cfg: RunConfig) -> RunConfig:
    """One input into a directory (``-o DIR/``, an existing directory, a config's ``output = "DIR/"``) writes
    ``DIR/<stem>_processed<ext>`` as several do: ``run *.mp4 -o out/`` may match one file."""
    from .ffmpeg_args import is_output_dir

    if cfg.output == "null" or not is_output_dir(cfg.output):
        return cfg
    return cfg.replace(output=output_for(cfg.input, cfg.output, 0, set(), cfg.output_format))


def _name_of(source: str, index: int) -> tuple[str, str]:
    """(stem, extension) of the file a stream writes into a directory: the input file's, or for a stream URL
    its host and path (``rtsp://cam1/main`` -> ``cam1_main``) in Matroska, which takes any codec. So is an
    input whose extension names no format FFmpeg writes (a FIFO named ``cam.fifo``)."""
    from .config import is_url, local_path, pipe_fd

    if pipe_fd(source) is not None:
        return "stdin", ".mkv"
    if source.lower().startswith("file:") and (path := local_path(source)) is not None:
        source = str(path)  # a file:// URL names a file
    if is_url(source):
        where = source.split("://", 1)[1].split("?")[0].split("#")[0].rsplit("@", 1)[-1]
        stem = re.sub(r"[^\w.-]+", "_", where).strip("._") or f"stream{index}"
        return stem, ".mkv"
    path = Path(source)
    return path.stem or f"stream{index}", output_extension(path)


def output_extension(path: Path) -> str:
    """The extension of an output named after the input ``path`` (several inputs, a batch): the input's
    own where FFmpeg writes that format, else Matroska's, which takes any codec (no extension, ``.fifo``)."""
    from .avlib import muxer_extensions

    return path.suffix if path.suffix[1:].lower() in muxer_extensions() else ".mkv"


def shared_memory_for(cfg: RunConfig, pinned_cap: int | None = None) -> SharedMemory:
    """The shared memory of a run of ``cfg``'s device (CUDA, else the CPU backend's host memory)."""
    from .build import make_backend

    device = "cpu" if cfg.device == "cpu" else make_backend(cfg.device, cfg.alloc, cfg.streams, cfg.decode).name
    if pinned_cap is None and cfg.pinned_cap_mib:
        pinned_cap = cfg.pinned_cap_mib * 2**20
    return SharedMemory(device, pinned_cap=pinned_cap)


def run_many(configs: list[RunConfig], *, control=None, pinned_cap: int | None = None,
             shared: SharedMemory | None = None, on_start: Callable[[list], None] | None = None,
             per_frame: bool = False, stage: Callable[[Any], None] | None = None) -> ManyResult:
    """Run one pipeline per config at once, sharing one GPU's memory; ``control`` stops them all.

    ``shared``: memory that outlives this call (a worker running batch after batch keeps its arena
    warm); by default it is made here and given back at the end. ``per_frame``: each stream's statistics
    keep their per-frame series (as ``--stats-json`` writes them). ``stage``: the user's stage of every
    stream (called from each stream's own thread; ``frame.source`` tells them apart). A stream that would
    write another's input or output is a ConfigError before any starts."""
    from .checks import check_streams
    from .engine import Pipeline, RunControl

    check_streams([(c.input, c.output) for c in configs])  # before any stream starts: a ConfigError for all
    control = control or RunControl()
    owned = shared is None
    shared = shared or shared_memory_for(configs[0], pinned_cap)
    results = [StreamResult(c.input, c.output or "") for c in configs]
    pipelines: list = []
    interrupts: list[KeyboardInterrupt] = []  # a stage's own: the call raises it once every stream has ended

    def one(index: int, cfg: RunConfig) -> None:
        result, pipeline = results[index], None
        try:
            # Built as `pipeline run` builds a run (its checks first, the backend beside the decoder's open),
            # its memory borrowed from the shared arena and pool.
            pipeline = Pipeline.from_config(cfg, stage=stage, control=control,
                                            wrap_backend=lambda inner: SharedBackend(inner, shared))
            pipelines.append(pipeline)
            stats = pipeline.run()
            result.stats = stats.to_dict(per_frame=per_frame)
        except PipelineError as e:
            result.exit_code, result.error = e.exit_code, str(e)
        except Exception as e:  # a bug in one stream: reported for it, the others go on
            result.exit_code, result.error = EXIT_INTERNAL, f"{type(e).__name__}: {e}"
        except KeyboardInterrupt as e:  # raised by the stage (run() raises it too): the others stop as for a Ctrl-C
            result.exit_code, result.error = EXIT_SIGINT, "interrupted: the stage raised KeyboardInterrupt"
            interrupts.append(e)
            control.stop(signal.SIGINT)
        if not result.stats and pipeline is not None and pipeline.stats.frames_out:
            # Stopped early (a signal, a source gone) with its output kept: what it did, as one run reports.
            result.stats = pipeline.stats.to_dict(per_frame=per_frame)
        if result.error and control.failure is None:  # failed with the whole call: the caller's error says why
            named = result.error.startswith(cfg.input)
            log.error(result.error if named else f"{cfg.input}: {result.error}")  # the stream failed

    from .avlib import silence_ffmpeg_log

    t0 = time.perf_counter()
    threads = [Worker(one, (i, c), name=f"pipeline-stream-{i}") for i, c in enumerate(configs)]
    with silence_ffmpeg_log():
        try:
            start_all(threads)
            if on_start is not None:
                on_start(pipelines)
            wait_for_all(threads)
        except BaseException as e:  # the API caller's Ctrl-C (the command line's handlers set events instead),
            # no thread to be had, on_start raising: the streams started end before the shared memory closes
            _stop_then_join(threads, control, pipelines, e)
            raise
        finally:
            counters = shared.counters()
            if owned and not GPUStalled.happened:  # a stream's frames stuck on the GPU: closing would wait on them
                shared.close()
    if interrupts:
        raise interrupts[0]
    return ManyResult(results, time.perf_counter() - t0, counters)


def _stop_then_join(threads: list[Worker], control, pipelines: list, cause: BaseException) -> None:
    """Every stream stopped, and joined before the shared memory closes. A Ctrl-C stops them as the command
    line's first one does (the frames in flight drained, the frames done kept), another one meanwhile stops
    them at once. Any other ``cause`` (the call fails: it is what the caller gets) stops every stream still
    running with no output kept (:meth:`RunControl.fail`); one already finished keeps its output."""
    if isinstance(cause, KeyboardInterrupt):
        control.stop(signal.SIGINT)
    else:
        control.fail(cause)
    while True:
        try:
            wait_for_all(threads)
            return
        except KeyboardInterrupt:
            for pipeline in pipelines:
                pipeline.abort.set()


def configs_for(base: RunConfig, inputs: list[str], output: str | None,
                per_stream: list[dict[str, Any]] | None = None, config: str | None = None) -> list[RunConfig]:
    """One config per input: the base settings, each stream's own overrides, its output. ``config``: the
    file the [[streams]] entries come from, named with the entry in a refusal of one's values."""
    from .ffmpeg_args import is_output_dir

    # Names chosen for the others step aside from the outputs given explicitly.
    taken = {os.path.basename(o) for o in (s.get("output") for s in per_stream or []) if o}
    in_folder: dict[str, set[str]] = {}  # the names chosen in each entry's own folder
    configs = []
    for i, source in enumerate(inputs):
        overrides = dict((per_stream or [{}] * len(inputs))[i])
        out = overrides.pop("output", None)
        if out is None and output is None:
            raise ConfigError(f"stream {i + 1} ({source}) has no output: give it output = \"...\" in its "
                              "[[streams]] entry, or -o DIR/ or -o null for every stream")
        muxer = overrides.get("output_format", base.output_format)
        if out is not None and out != "null" and is_output_dir(out):  # an entry's own folder, as -o DIR/
            out = output_for(source, out, i, in_folder.setdefault(os.path.abspath(out), set()), muxer)
        out = out or output_for(source, output, i, taken, muxer)
        try:
            configs.append(base.replace(input=source, output=out, stats_json=None, **overrides))
        except ConfigError as e:
            if per_stream is None or config is None:
                raise
            raise ConfigError(f"{config}: [[streams]] entry {i + 1}: {e}") from None
    if output not in (None, "null") and not os.path.isdir(output):
        from .errors import OutputError

        there = os.path.lexists(output.rstrip("/") or "/")
        what = "not a directory" if there else "no such directory (create it first)"
        raise OutputError(f"{output}: {what}; several inputs write DIR/<stem>_processed<ext>")
    return configs
