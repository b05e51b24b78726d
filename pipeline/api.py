"""The Python API: ``frames`` to iterate processed frames, ``run`` to process into an output.

Both run the same engine as ``pipeline run`` (host ring, streams, pooled buffers; zero allocations per
frame on the pooled path) and take the same options. A source is a file or URL, an iterable of
H x W x 3 uint8 RGB arrays (your own generator, a camera SDK), or a built source
(:class:`~pipeline.adapters.ArraySource`, or anything following :class:`~pipeline.interfaces.FrameSource`).
"""

from __future__ import annotations

import atexit
import inspect
import os
import sys
import threading
import weakref
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

from .config import RunConfig, file_url_as_path, path_text, safe_repr
from .errors import ConfigError, Interrupted
from .processor import StageFrame

if TYPE_CHECKING:
    from .nvdec import DecoderPool

# Named arguments of frames() and run(); every other RunConfig field is an option.
_NAMED = {"input", "output", "filters", "device", "alloc"}
OPTIONS = tuple(f.name for f in fields(RunConfig) if f.name not in _NAMED)


@dataclass(frozen=True)
class Frame:
    """One processed frame, handed over by :func:`frames`.

    ``array`` is H x W x 3 uint8 RGB: a NumPy array on the CPU backend, a CuPy array on CUDA (both
    DLPack-able, and so is the frame itself: ``torch.from_dlpack(frame)``). It is a view into a pooled
    buffer, valid until the next frame is requested: keep it with :meth:`copy`. ``index`` counts frames
    from 0, ``pts`` is the timestamp in the stream's time base, ``time`` the same in seconds, both counted
    from the input's start (or -ss's), as the output's are.
    """

    array: Any
    index: int
    pts: int | None
    time: float | None

    def copy(self) -> Frame:
        """The frame with an array of its own, valid after the iteration moves on."""
        return Frame(self.array.copy(), self.index, self.pts, self.time)

    def __dlpack__(self, *args, **kwargs):
        return self.array.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


# Iterators still open when the program ends (never run out nor closed, or held by a traceback): closed by
# atexit, while the worker threads can still be joined. Left to __del__ at the interpreter's finalisation, the
# decoder's drain waited forever.
_OPEN: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_open_iterators() -> None:
    for iterator in list(_OPEN):
        try:
            iterator.close()
        except Exception:
            pass


class FrameIterator:
    """What :func:`frames` returns: an iterator of :class:`Frame`, and a context manager that stops the
    decoder and gives every buffer back on exit (also on ``break`` or an exception)."""

    def __init__(self, pipeline):
        self._pipeline = pipeline
        self._frames: Iterator | None = None
        self._closed = self._ended = False
        self._running = threading.Lock()  # held while next() runs the run's generator
        _OPEN.add(self)

    def __iter__(self) -> FrameIterator:
        return self

    def __next__(self) -> Frame:
        with self._running:
            if self._closed:  # closed from another thread while a next() ran: the run ends here, in this one
                self._end()
                raise StopIteration
            if self._frames is None:
                self._frames = self._pipeline.frames()
            try:
                item = next(self._frames)
            except Interrupted:
                if not self._closed:  # the application's own Pipeline.stop()
                    raise
                self._end()  # the close() that stopped it: the end of the frames, as for a close in this thread
                raise StopIteration from None
            meta = item.meta
            return Frame(self._pipeline.processor.output_array(item), meta.index, meta.pts, meta.seconds)

    def __enter__(self) -> FrameIterator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the run early; the frames already handed over become invalid. From another thread while
        a ``next()`` waits for a frame: the run is asked to stop, and that thread's next call ends it."""
        self._closed = True
        if not self._running.acquire(blocking=False):  # a generator runs in one thread at a time
            self._pipeline.stop()
            return
        try:
            self._end()
        finally:
            self._running.release()

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        if self._frames is not None:
            self._frames.close()
        else:
            self._pipeline.close()

    def __del__(self) -> None:
        if sys.is_finalizing():  # too late to join threads (atexit closed it, unless it was made there)
            return
        try:
            self.close()
        except Exception:
            pass

    @property
    def stats(self):
        """The run's statistics so far (:class:`~pipeline.stats.RunStats`)."""
        return self._pipeline.stats


# RunConfig fields that only an output uses: given to frames(), they would be silently unused.
OUTPUT_ONLY = ("codec", "encoder_opts", "pix_fmt", "output_format", "output_opts", "audio", "overwrite", "preview")


def frames(source, *, filters: str | None = None, device: str = "auto", alloc: str = "pool",
           decoders: DecoderPool | None = None, **options: Any) -> FrameIterator:
    """Decode ``source``, run ``filters`` on ``device``, and yield each frame as RGB (:class:`Frame`).

    ``filters`` is a chain in FFmpeg's syntax (``"gblur=sigma=2,eq=contrast=1.2"``; None: no filter).
    ``options`` are :class:`~pipeline.config.RunConfig` fields (ring_size, streams, in_flight, frames,
    ...); an unknown one raises :class:`~pipeline.errors.ConfigError`. ``decoders``: as for :func:`run`;
    the iterator's decoders go back to the pool when it ends or is closed (one whose frame is still held
    is not kept: see :class:`~pipeline.nvdec.DecoderPool`).
    """
    from .build import make_chain, timed_backend
    from .engine import Pipeline
    from .startup import Phases

    phases = Phases()  # the iterator's figures start here, set-up included, as run()'s do
    source = _as_location(source)
    cfg = settings(source, None, filters, device, alloc, options)
    if cfg.stats_json:
        raise ConfigError("frames() writes no statistics file (stats_json): its iterator's .stats are the run's")
    if given := [name for name in OUTPUT_ONLY if name in options]:
        raise ConfigError(f"{', '.join(given)}: {'options' if len(given) > 1 else 'an option'} of an output; "
                          "frames() writes none (run() does)")
    check_decoders(decoders)
    chain = make_chain(cfg.filters, cfg.plugins)
    backend = timed_backend(cfg, phases)
    with phases("decoder_open"):
        opened = open_source(source, cfg, backend, decoders)
    return FrameIterator(Pipeline(opened, None, chain, backend, cfg, phases=phases))


def run(source, output, *, filters: str | None = None, stage: Callable[[StageFrame], None] | None = None,
        device: str = "auto", alloc: str = "pool", decoders: DecoderPool | None = None,
        **options: Any) -> dict[str, Any]:
    """Process ``source`` into ``output`` (a file; for a file or URL source, a directory, which gets
    ``<stem>_processed<ext>`` as on the command line; a stream URL; or ``"null"`` to discard); return the
    run's statistics (what ``--stats-json`` holds).

    ``stage(frame)`` is your own processing, called once per frame after the filter chain and before the
    conversion back, on the frame's CUDA stream: ``frame.planes`` is the working (3, H, W) float32 RGB in
    [0, 1], writable in place (CuPy on CUDA, NumPy on the CPU); queue work on ``frame.stream``. If it
    raises, the run ends as for a failing filter: :class:`~pipeline.errors.StageError`, no output.

    ``decoders``: a :class:`~pipeline.nvdec.DecoderPool` you keep across runs. A file decoded with NVDEC
    whose codec and parameter sets are those of the run before takes the decoders that run left (making
    and freeing them costs about 0.3 s a run); runs with one session (``nvdec_sessions=1``, a live or
    paced input, ``strict``) make their own. They hold device memory until ``decoders.close()``.

    ``stats_json``: the statistics are also written to this file, as ``--stats-json`` writes them.
    """
    from .engine import Pipeline

    source, output = _as_location(source), _as_location(output)
    if output is None and not _is_location(source):  # no name to make <input>_processed.mp4 from
        raise ConfigError("frames from your own source need an output: a file, a URL, or \"null\"")
    cfg = settings(source, output, filters, device, alloc, options)
    if _is_location(source):  # as the command line: a directory takes <stem>_processed<ext>
        from .many import into_directory

        cfg = into_directory(cfg)
    check_decoders(decoders)
    _check_stage(stage)
    given = None if _is_location(source) else open_source(source, cfg, None)
    pipeline = Pipeline.from_config(cfg, stage=stage, source=given, decoders=decoders)
    stats = pipeline.run()
    _write_stats(stats, cfg)
    return stats.to_dict(per_frame=False)


def run_many(sources: Sequence[str | os.PathLike], output: str | os.PathLike = "null", *, filters: str | None = None,
             stage: Callable[[StageFrame], None] | None = None, device: str = "auto", alloc: str = "pool",
             **options: Any):
    """Process several files or URLs at once in this process, one pipeline each, sharing one GPU's memory
    (one CUDA context, one device arena, one pinned pool); the same options as :func:`run`.

    ``output``: a directory (each input writes ``<stem>_processed<ext>`` there) or ``"null"``. A failing
    stream ends only itself. ``stage`` is as for :func:`run`, shared by every stream and called from each
    stream's own thread: ``frame.source`` says which input a frame came from. Returns a :class:`~pipeline.many.ManyResult`: ``.streams`` (each with
    ``input``, ``output``, ``exit_code``, ``error`` and ``stats``), ``.totals()`` and ``.exit_code``, the
    worst stream's.
    """
    from .many import configs_for, run_many as run_streams

    sources = check_list(sources, "run_many", "sources", "for one, use run() or pass [source]")
    if not sources:
        raise ConfigError("run_many needs at least one source")
    locations, output = [_as_location(s) for s in sources], _as_location(output)
    if not all(map(_is_location, [*locations, output])):
        raise ConfigError("run_many takes files or URLs (str or os.PathLike) and an output directory or \"null\"")
    locations = [path_text(s) for s in locations]
    base = settings(locations[0], None, filters, device, alloc, options)
    configs = configs_for(base, locations, file_url_as_path(path_text(output)))
    if base.stats_json:
        from .checks import check_streams_stats

        check_streams_stats(base.stats_json, [(c.input, c.output) for c in configs], base.overwrite)
    _check_stage(stage)
    result = run_streams(configs, stage=stage)
    _write_stats(result, base)
    return result


def _write_stats(stats, cfg: RunConfig) -> None:
    """``stats_json``, as the command line writes it (a file that appeared during the run is kept)."""
    if cfg.stats_json:
        from .reportfile import save_json

        save_json(stats, cfg.stats_json, "stats_json", cfg.overwrite, "run")


def settings(source, output, filters: str | None, device: str, alloc: str, options: dict[str, Any]) -> RunConfig:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ConfigError(f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                          f"valid options: {', '.join(OPTIONS)}")
    name = path_text(source) if _is_location(source) else getattr(getattr(source, "info", None), "name", "<frames>")
    output = _as_location(output)
    for field, value in (("output", output), ("stats_json", options.get("stats_json"))):
        if isinstance(value, (str, os.PathLike)) and not os.fspath(value):
            raise ConfigError(f"{field} is an empty name (None means {'the default' if field == 'output' else 'none'})")
    if output is not None and not _is_location(output):
        raise ConfigError(f"Invalid output ({type(output).__name__}). Supported values are a path (str, bytes or "
                          "os.PathLike), a URL, or \"null\".")
    out = None if output is None else path_text(output)
    if filters is not None and not isinstance(filters, str):
        raise ConfigError(f"Invalid filters ({safe_repr(filters)}). Supported values are a chain as text "
                          "(\"gblur=sigma=2,hflip\") or None.")
    cfg = RunConfig(input=name, output=out, filters=filters or "", device=device, alloc=alloc, **options)
    if not _is_location(source):
        _check_for_frames(cfg)
    return cfg


def check_decoders(decoders) -> None:
    """``decoders`` is None or a :class:`~pipeline.nvdec.DecoderPool` (else ConfigError)."""
    if decoders is None:
        return
    from .nvdec import DecoderPool

    if not isinstance(decoders, DecoderPool):
        raise ConfigError(f"decoders must be a pipeline.DecoderPool, not {type(decoders).__name__}")


def open_source(source, cfg: RunConfig, backend, decoders: DecoderPool | None = None):
    """A source object for ``source``: a path or URL is opened with PyAV (``cfg.decode``, taking NVDEC's
    decoders from ``decoders`` where it can), arrays are wrapped."""
    from .adapters import ArraySource
    from .interfaces import FrameSource

    if _is_location(source):
        from .build import open_source as open_av

        return open_av(cfg, backend=backend, decoders=decoders)
    if isinstance(source, FrameSource):
        return source
    if isinstance(source, Iterable):
        return ArraySource(source)
    raise ConfigError(f"Invalid source ({type(source).__name__}). Supported values are a path or URL, an "
                      "iterable of H x W x 3 uint8 arrays, or a FrameSource.")


# Options that read a file or a stream: given with frames from code, they would be ignored without a word.
_DEMUX_OPTIONS = ("start", "duration", "end", "realtime", "input_format", "input_opts", "reconnect")


def _check_for_frames(cfg: RunConfig) -> None:
    """Refuse the demuxing options with a source of frames (arrays, a FrameSource): it yields what it is
    given, in order, at the pace of the code behind it; ``frames`` limits it."""
    defaults = RunConfig()
    given = [name for name in _DEMUX_OPTIONS if getattr(cfg, name) != getattr(defaults, name)]
    if given:
        kind = "options" if len(given) > 1 else "an option"
        raise ConfigError(f"{', '.join(given)}: {kind} of a file or stream input; a source of frames yields "
                          "what its code gives, at its pace (frames=N limits it)")


def _check_stage(stage) -> None:
    """Before the run: called on the first frame, anything else failed there as a StageError; a coroutine or
    generator function would be called, never run, and the frames go on unchanged."""
    if stage is not None and not callable(stage):
        raise ConfigError(f"Invalid stage ({type(stage).__name__}). Supported values are None and a function "
                          "taking each frame.")
    if inspect.iscoroutinefunction(stage) or inspect.isasyncgenfunction(stage) or inspect.isgeneratorfunction(stage):
        kind = "a generator function" if inspect.isgeneratorfunction(stage) else "an async function"
        raise ConfigError(f"Invalid stage ({getattr(stage, '__qualname__', stage)}): {kind}, whose body a call "
                          "does not run; a stage is a plain function that works on each frame before it returns")


def check_list(items, caller: str, what: str, hint: str) -> list:
    """``items`` as a list of locations (str, bytes or os.PathLike); a single one is refused (a str would be
    taken a character at a time), and so is anything else that is not a list or tuple of them."""
    if isinstance(items, (str, bytes, bytearray, os.PathLike)):
        raise ConfigError(f"{caller} takes a list of {what}, not one ({os.fspath(_as_location(items))!r}); {hint}")
    if not isinstance(items, (list, tuple)):
        raise ConfigError(f"{caller} takes a list of {what}, not {safe_repr(items)}; {hint}")
    odd = [item for item in items if not _is_location(_as_location(item))]
    if odd:
        raise ConfigError(f"{caller}: {safe_repr(odd[0])} among the {what} is not a path (str, bytes or "
                          "os.PathLike)")
    return [_as_location(item) for item in items]


def _is_location(source) -> bool:
    return isinstance(source, (str, os.PathLike))


def _as_location(source):
    """A path given as bytes (``os.fsencode``) as the str Python gives it; anything else as it is."""
    return os.fsdecode(bytes(source)) if isinstance(source, (bytes, bytearray)) else source  # fsdecode: no bytearray
