"""Measured baselines for ``pipeline bench``: what plain PyAV/FFmpeg does with the same clip on this machine.

These are deliberately plain PyAV code with no project machinery (no Source, Sink, ring, engine or
filter kernels), so that they measure the libraries and not us:

* :func:`decode_fps`: demux + decode only (codec frame threads), the input ceiling;
* :func:`load_frames` + :func:`encode_fps`: encode only, from frames decoded beforehand, the output ceiling;
* :func:`transcode_fps`: decode thread -> bounded queue -> encode thread, no processing; the end-to-end
  ceiling the GPU pipeline is compared against (PyAV releases the GIL in the codecs, so the two overlap);
* :func:`ffmpeg_chain` + :func:`ffmpeg_filters_fps`: the same transcode with FFmpeg's own filters in
  between (``av.filter.Graph``), the CPU peer for a filter chain.

The encoder is configured as the pipeline's sink configures it: ``thread_type = "AUTO"``, ``pix_fmt``
yuv420p, the caller's options dict, the input's time base. Output goes to FFmpeg's ``null`` muxer
(``av.open(os.devnull, "w", format="null")``: no file, no I/O), or to a temporary Matroska file where a
build lacks that muxer. Decoded frames have their ``pict_type`` cleared before encoding, as the ffmpeg
CLI does: libx264 otherwise copies the input's I/P/B decisions, which the pipeline's fresh frames never
carry.

FFmpeg's filters work on YUV (luma and 4:2:0 chroma), ours on planar float RGB: the filter peer is about
cost, not identical pixels. Some equivalents are approximations by construction: FFmpeg's gblur and
bilateral are recursive approximations whose cost does not grow with sigma; its unsharp mask is at most
13x13; temporal filters (tdenoise, motion) have no counterpart and skip the peer; the
PyAV wheels are built without FFmpeg's GPL filters (no ``eq``, no ``boxblur``), so :func:`ffmpeg_chain`
falls back to ``lutyuv`` and ``avgblur`` (same kind of work: a per-plane lookup table, a running-sum box
filter) when those are missing.

Filter threading: FFmpeg slice-threads the filters that support it (gblur, unsharp, lut*, ...) with
``AVFilterGraph.nb_threads`` threads, 0 (the default) meaning automatic (cores + 1: 3 on a 2-core machine);
PyAV exposes it as ``Graph.threads`` (settable only before the first filter is added), which
``ffmpeg_filters_fps(threads=...)`` sets; the result reports the count FFmpeg settled on.

Errors: a bad input raises :class:`~pipeline.errors.InputError`; a bad graph description, an unknown
filter, bad filter options or an encoder that refuses its settings raise
:class:`~pipeline.errors.ConfigError`, each with a one-line message.
"""

from __future__ import annotations

import functools
import math
import os
import queue
import tempfile
import threading
import time
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import av

from ..errors import ConfigError, InputError

QUEUE_DEPTH = 8  # frames between the decode and the encode thread
FALLBACK_RATE = Fraction(30)  # when a stream declares no frame rate (as the pipeline's sink)
_NO_PICT_TYPE = av.video.frame.PictureType.NONE

__all__ = [
    "FFMPEG_EQUIVALENTS",
    "decode_fps",
    "encode_fps",
    "ffmpeg_chain",
    "ffmpeg_filters_fps",
    "load_frames",
    "parse_graph",
    "transcode_fps",
    "video_info",
]


# --------------------------------------------------------------------------
# Ceilings
# --------------------------------------------------------------------------


def video_info(path: str | os.PathLike) -> dict:
    """Size, rate, time base and declared frame count of the first video stream (for :func:`encode_fps`)."""
    container, stream = _open_input(path)
    try:
        cc = stream.codec_context
        return {
            "width": cc.width,
            "height": cc.height,
            "rate": _rate(stream),
            "time_base": stream.time_base,
            "frames": stream.frames or None,
            "codec": cc.name,
            "pix_fmt": cc.format.name if cc.format is not None else None,
        }
    finally:
        container.close()


def decode_fps(path: str | os.PathLike, *, frames: int | None = None) -> dict:
    """Demux and decode the first video stream (codec frame threads), touching each frame, converting nothing."""
    _check_limit(frames)
    container, stream = _open_input(path)
    try:
        count = 0
        t0 = time.perf_counter()
        for _frame in _decoded(container, stream, path, frames):
            count += 1  # the frame object is all we touch: no plane access, no conversion
        seconds = time.perf_counter() - t0
        threads = stream.codec_context.thread_count
    finally:
        container.close()
    _require_frames(count, path)
    return _result(count, seconds, decoder_threads=threads)


def load_frames(path: str | os.PathLike, *, frames: int | None = None) -> list[av.VideoFrame]:
    """Decode into memory for :func:`encode_fps`: yuv420p frames of even size (reformatted where needed).

    Memory is the caller's business: 600 frames of 1080p are about 1.9 GB.
    """
    _check_limit(frames)
    container, stream = _open_input(path)
    out = []
    try:
        for frame in _decoded(container, stream, path, frames):
            w, h = frame.width & ~1, frame.height & ~1
            if frame.format.name != "yuv420p" or (w, h) != (frame.width, frame.height):
                frame = frame.reformat(width=w, height=h, format="yuv420p")
            out.append(frame)
    finally:
        container.close()
    _require_frames(len(out), path)
    return out


def encode_fps(
    frames: Iterable[av.VideoFrame],
    *,
    width: int,
    height: int,
    rate: Fraction | int | float,
    codec: str = "libx264",
    options: dict[str, str] | None = None,
) -> dict:
    """Encode pre-decoded frames into a throw-away output; timed from the first send to the flushed encoder.

    The encoder is opened before the clock starts. Each frame gets ``pts = i`` in time base ``1/rate``
    and no picture type (the frames are modified in place). Frames of another size or format than the
    encoder's are converted by PyAV on the way (swscale), and that cost is counted.
    """
    frames = list(frames)
    if not frames:
        raise ConfigError("encode_fps: no frames to encode")
    rate = _as_rate(rate)
    time_base = 1 / rate
    with _Encoder(codec, options, rate=rate, time_base=time_base) as enc:
        enc.open(width, height, colour_from=frames[0])
        t0 = time.perf_counter()
        for i, frame in enumerate(frames):
            frame.pts, frame.time_base = i, time_base
            enc.send(frame)
        enc.flush()
        seconds = time.perf_counter() - t0
        return _result(enc.frames, seconds, **enc.describe())


def transcode_fps(
    path: str | os.PathLike,
    *,
    codec: str = "libx264",
    options: dict[str, str] | None = None,
    frames: int | None = None,
) -> dict:
    """Plain PyAV transcode: decode thread -> bounded queue -> encode thread, no processing.

    Timed from the first demux to the flushed encoder (the encoder opens on the first frame, inside the
    clock, as in the pipeline). The end-to-end ceiling the GPU pipeline is compared against.
    """
    _check_limit(frames)
    container, stream = _open_input(path)
    try:
        rate, time_base = _rate(stream), stream.time_base

        def produce(put):
            for frame in _decoded(container, stream, path, frames):
                if not put(frame):
                    return

        with _Encoder(codec, options, rate=rate, time_base=time_base) as enc:
            t0 = time.perf_counter()
            _pipe(produce, enc.consume)
            seconds = time.perf_counter() - t0
            _require_frames(enc.frames, path)
            return _result(enc.frames, seconds, **enc.describe())
    finally:
        container.close()


# --------------------------------------------------------------------------
# FFmpeg filter peer
# --------------------------------------------------------------------------


def _attr(f, *names):
    for name in names:
        value = getattr(f, name, None)
        if value is not None:
            return value
    raise _NoEquivalent(f"{f.name}: none of {', '.join(names)}")


class _NoEquivalent(Exception):
    pass


def _num(value) -> str:
    """A number as FFmpeg option text: integers plainly, negatives in parentheses (safe inside expressions)."""
    v = float(value)
    text = str(int(v)) if v.is_integer() else format(v, ".10g")
    return f"({text})" if v < 0 else text


def _int(value) -> str:
    return str(int(round(float(value))))


def _gblur(f) -> list[str]:
    return [f"gblur=sigma={_num(_attr(f, 'sigma'))}"]


def _boxblur(f) -> list[str]:
    r = int(round(float(_attr(f, "radius", "r"))))
    cr = max(1, math.ceil(r / 2)) if r else 0  # same extent on half-resolution chroma
    return [
        f"boxblur=luma_radius={r}:luma_power=1:chroma_radius={cr}:chroma_power=1",
        f"avgblur=sizeX={max(1, r)}:sizeY={max(1, r)}",  # LGPL running-sum box filter (all planes)
    ]


UNSHARP_MAX_SIZE = 13  # FFmpeg: (msize_x/2 + msize_y/2) * 2 <= 25, so square masks stop at 13x13


def _unsharp(f) -> list[str]:
    sigma = float(_attr(f, "sigma"))
    amount = min(5.0, max(-2.0, float(_attr(f, "amount"))))  # FFmpeg's luma_amount range
    n = min(UNSHARP_MAX_SIZE, max(3, 2 * math.ceil(3 * sigma) + 1))  # 2k+1 with odd bounds: always odd
    return [f"unsharp=luma_msize_x={n}:luma_msize_y={n}:luma_amount={_num(amount)}"]


def _eq(f) -> list[str]:
    c, b = float(_attr(f, "contrast")), float(_attr(f, "brightness"))
    s, g = float(_attr(f, "saturation")), float(_attr(f, "gamma"))
    eq = f"eq=contrast={_num(c)}:brightness={_num(b)}:saturation={_num(s)}:gamma={_num(g)}"
    # Without the GPL eq: the same tables through lutyuv. No commas in the expressions (no clip/pow/max):
    # (v+abs(v))/2 is max(v, 0), exp(log(v)/g) is v**(1/g); lut clips its results to the legal range.
    y = f"(val-127.5)*{_num(c)}+127.5+{_num(b)}*255"
    if g != 1.0:
        v = f"(({y})/255)"
        y = f"255*exp(log(({v}+abs({v}))/2)/{_num(g)})"
    uv = f"(val-128)*{_num(s)}+128"
    return [eq, f"lutyuv=y={y}:u={uv}:v={uv}"]


def _transpose(f) -> list[str]:
    direction = getattr(f, "dir", None) or getattr(f, "direction", None) or "clock"
    if direction not in ("clock", "cclock", "clock_flip", "cclock_flip"):
        raise _NoEquivalent(f"transpose direction {direction!r}")
    return [f"transpose={direction}"]


def _scale(f) -> list[str]:
    # Ours: -1 keeps the aspect ratio, rounded to even; FFmpeg spells that -2.
    w, h = (int(round(float(v))) for v in (_attr(f, "w", "width"), _attr(f, "h", "height")))
    return [f"scale={-2 if w == -1 else w}:{-2 if h == -1 else h}"]


def _crop(f) -> list[str]:
    # Ours: w/h -1 is the input's, x/y -1 centres; FFmpeg's defaults are the same, as expressions.
    w, h = (int(round(float(v))) for v in (_attr(f, "w", "width"), _attr(f, "h", "height")))
    x, y = (getattr(f, k, -1) for k in ("x", "y"))
    x, y = (-1 if v is None else int(round(float(v))) for v in (x, y))
    return [
        f"crop=w={'iw' if w == -1 else w}:h={'ih' if h == -1 else h}"
        f":x={'(iw-ow)/2' if x == -1 else x}:y={'(ih-oh)/2' if y == -1 else y}"
    ]


def _hue(f) -> list[str]:
    desc = f"hue=h={_num(_attr(f, 'h', 'hue', 'degrees', 'deg', 'angle'))}"
    s = getattr(f, "s", None)
    if s is None:
        s = getattr(f, "saturation", None)
    return [desc + (f":s={_num(s)}" if s is not None else "")]


def _sobel(f) -> list[str]:
    return [f"sobel=planes=1:scale={_num(_attr(f, 'scale'))}"]  # ours: luma only


def _bilateral(f) -> list[str]:
    # FFmpeg's bilateral filters only luma by default; ours all three channels: planes=7.
    return [f"bilateral=sigmaS={_num(_attr(f, 'sigma_s'))}:sigmaR={_num(_attr(f, 'sigma_r'))}:planes=7"]


def _vignette(f) -> list[str]:
    return [f"vignette=angle={_num(_attr(f, 'angle'))}"]  # no strength in FFmpeg's: the same work


def _lut3d(f) -> list[str]:
    path = str(_attr(f, "file"))
    if not path or any(c in path for c in ":\\'"):
        raise _NoEquivalent(f"lut3d file {path!r}")
    # RGB in FFmpeg as in ours: the graph converts YUV -> RGB -> YUV around it, as our pipeline does.
    return [f"lut3d=file={_escape(path)}:interp=trilinear"]


def _fixed(desc: str) -> Callable[[Any], list[str]]:
    return lambda f: [desc]


# Our filter name -> translator returning FFmpeg descriptions, best first; the first whose filters this
# FFmpeg build has is used. A translator raises _NoEquivalent when the filter lacks what it needs.
FFMPEG_EQUIVALENTS: dict[str, Callable[[Any], list[str]]] = {
    "gblur": _gblur,
    "boxblur": _boxblur,
    "unsharp": _unsharp,
    "eq": _eq,
    "hflip": _fixed("hflip"),
    "vflip": _fixed("vflip"),
    "transpose": _transpose,
    "scale": _scale,
    "crop": _crop,
    "hue": _hue,
    "invert": _fixed("negate"),
    "negate": _fixed("negate"),
    "grayscale": _fixed("format=gray,format=yuv420p"),
    "greyscale": _fixed("format=gray,format=yuv420p"),
    "gray": _fixed("format=gray,format=yuv420p"),
    "sobel": _sobel,
    "bilateral": _bilateral,
    "vignette": _vignette,
    "lut3d": _lut3d,
}


def ffmpeg_chain(chain: Iterable[Any], *, available: Iterable[str] | None = None) -> str | None:
    """FFmpeg filter-graph description for a parsed chain, or None when a filter has no FFmpeg equivalent.

    ``available`` is the set of FFmpeg filter names to choose from (default: this PyAV build's
    ``av.filter.filters_available``). An empty chain is FFmpeg's ``null`` (pass-through).
    """
    have = set(av.filter.filters_available if available is None else available)
    parts = []
    for f in chain:
        translate = FFMPEG_EQUIVALENTS.get(getattr(f, "name", ""))
        if translate is None:
            return None
        try:
            candidates = translate(f)
        except (_NoEquivalent, TypeError, ValueError):
            return None
        for desc in candidates:
            if all(name in have for name, _ in parse_graph(desc)):
                parts.append(desc)
                break
        else:
            return None
    return ",".join(parts) or "null"


def parse_graph(desc: str) -> list[tuple[str, str | None]]:
    """Split a linear filter-graph description (``a=k=v:k=v,b``) into (name, args) pairs.

    Follows FFmpeg's first level of escaping: ``'...'`` quotes and backslash escapes protect commas
    and are removed; the args keep their ``:`` separators for the filter's own option parser. Pad
    labels (``[in]``) and several chains (``;``) are not supported: this peer runs one linear chain.
    """
    if not isinstance(desc, str):
        raise ConfigError(f"filter graph must be a string, got {type(desc).__name__}")
    segments, buf, quoted, i = [], [], False, 0
    while i < len(desc):
        c = desc[i]
        if quoted:
            if c == "'":
                quoted = False
            else:
                buf.append(c)
        elif c == "\\":
            if i + 1 == len(desc):
                raise ConfigError(f"bad filter graph {desc!r}: trailing backslash")
            i += 1
            buf.append(desc[i])
        elif c == "'":
            quoted = True
        elif c == ",":
            segments.append("".join(buf))
            buf = []
        elif c in "[];":
            raise ConfigError(
                f"bad filter graph {desc!r}: {c!r} at column {i + 1}: only a linear chain without labels is supported"
            )
        else:
            buf.append(c)
        i += 1
    if quoted:
        raise ConfigError(f"bad filter graph {desc!r}: unterminated quote")
    segments.append("".join(buf))
    out = []
    for seg in segments:
        name, eq, args = seg.strip().partition("=")
        name = name.strip()
        if not name:
            raise ConfigError(f"bad filter graph {desc!r}: empty filter")
        out.append((name, args.strip() if eq and args.strip() else None))
    return out


def ffmpeg_filters_fps(
    path: str | os.PathLike,
    graph_desc: str,
    *,
    codec: str = "libx264",
    options: dict[str, str] | None = None,
    frames: int | None = None,
    threads: int | None = None,
) -> dict:
    """Decode -> FFmpeg filter graph -> encode, like :func:`transcode_fps` (decode+filter in one thread,
    encode in the other), same encoder settings.

    The graph is ``buffer -> graph_desc -> format=yuv420p -> buffersink``, built from the first decoded
    frame; the encoder takes its size from the first filtered frame (scale and crop change it).
    ``threads`` sets the graph's filter threads (``AVFilterGraph.nb_threads``; None keeps FFmpeg's
    default, 0 = automatic). ``frames`` limits the input frames; the result counts encoded frames.
    """
    _check_limit(frames)
    nodes = parse_graph(graph_desc)
    if nodes[-1] != ("format", "yuv420p"):
        nodes.append(("format", "yuv420p"))  # the conversion the encoder needs happens in the filter thread
    full_desc = ",".join(name if args is None else f"{name}={_escape(args)}" for name, args in nodes)
    _build_graph(nodes, None, threads, graph_desc)  # fails fast on unknown filters and bad options

    container, stream = _open_input(path)
    stats = {"input_frames": 0, "filter_threads": None}
    try:
        rate = _rate(stream)

        def produce(put):
            graph = None
            for frame in _decoded(container, stream, path, frames):
                stats["input_frames"] += 1
                if graph is None:
                    graph = _build_graph(nodes, frame, threads, graph_desc)
                    stats["filter_threads"] = getattr(graph, "threads", None)
                with _filter_errors(graph_desc):
                    graph.push(frame)
                if not _drain(graph, put, graph_desc):
                    return
            if graph is not None:
                with _filter_errors(graph_desc):
                    graph.push(None)
                _drain(graph, put, graph_desc)

        with _Encoder(codec, options, rate=rate, time_base=None) as enc:
            t0 = time.perf_counter()
            _pipe(produce, enc.consume)
            seconds = time.perf_counter() - t0
            _require_frames(stats["input_frames"], path)
            if not enc.frames:
                raise ConfigError(f"filter graph {graph_desc!r} produced no frames")
            return _result(enc.frames, seconds, graph=full_desc, **stats, **enc.describe())
    finally:
        container.close()


def _escape(args: str) -> str:
    return "".join("\\" + c if c in "\\',;[]" else c for c in args)


def _build_graph(nodes, frame, threads, desc):
    """A configured graph fed by ``frame``'s size and format; with ``frame`` None, only the filters are
    created (which checks names and options) and nothing is configured."""
    with _ffmpeg_errors(ConfigError, f"bad filter graph {desc!r}"):
        graph = av.filter.Graph()
        if threads is not None:
            if not hasattr(graph, "threads"):
                raise ConfigError("this PyAV version cannot set filter threads (no Graph.threads)")
            graph.threads = int(threads)
        contexts = []
        for name, args in nodes:
            if name not in av.filter.filters_available:
                raise ConfigError(f"bad filter graph {desc!r}: FFmpeg has no filter {name!r} in this build")
            try:
                contexts.append(graph.add(name, args))
            except (ValueError, av.error.FFmpegError) as e:
                raise _Named(name, e) from e
        if frame is None:
            return graph
        src = _add_source(graph, frame)
        graph.link_nodes(src, *contexts, graph.add("buffersink"))
        graph.configure()
        return graph


def _add_source(graph, frame):
    """The buffer source, tagged with the frame's colorspace and range where this FFmpeg's buffer source
    has those options (recent libavfilter): otherwise it warns "Changing video frame properties on the
    fly" at the first tagged frame, the tags not matching the untagged link it was configured with."""
    args = {
        "video_size": f"{frame.width}x{frame.height}",
        "pix_fmt": frame.format.name,
        "time_base": str(frame.time_base or Fraction(1, 1000)),
        "pixel_aspect": "1/1",
    }
    if _buffer_takes_colour():
        args.update(colorspace=str(int(frame.colorspace)), range=str(int(frame.color_range)))
    return graph.add("buffer", **args)


@functools.lru_cache(maxsize=1)
def _buffer_takes_colour() -> bool:
    """Whether the buffer source has colorspace/range options (PyAV lists no filter options: try it)."""
    try:
        av.filter.Graph().add(
            "buffer", video_size="2x2", pix_fmt="yuv420p", time_base="1/25", colorspace="2", range="0"
        )
    except (ValueError, av.error.FFmpegError):
        return False
    return True


class _Named(Exception):
    def __init__(self, name, error):
        super().__init__(f"{name}: {error}")
        self.name, self.error = name, error


def _drain(graph, put, desc) -> bool:
    """Pull every frame the graph has ready; False when the consumer has stopped."""
    while True:
        try:
            with _filter_errors(desc):
                out = graph.pull()
        except (av.error.BlockingIOError, av.error.EOFError):
            return True
        out.pict_type = _NO_PICT_TYPE
        if not put(out):
            return False


@contextmanager
def _filter_errors(desc):
    try:
        yield
    except (av.error.BlockingIOError, av.error.EOFError):
        raise
    except (ValueError, av.error.FFmpegError) as e:
        raise ConfigError(f"filter graph {desc!r} failed: {e}") from e


# --------------------------------------------------------------------------
# Plumbing
# --------------------------------------------------------------------------

_LOG_LOCK = threading.RLock()  # av.logging's level is global: one capture at a time


@contextmanager
def _ffmpeg_errors(exc_type, prefix):
    """Turn PyAV errors raised inside into ``exc_type(prefix: FFmpeg's own message)``, on one line.

    PyAV's logging is off by default, which leaves errors as bare errno texts ("Invalid argument");
    errors are captured for the duration (setup steps only, never a hot loop) to say what went wrong.
    """
    with _LOG_LOCK:
        level = av.logging.get_level()
        if level is None or level < av.logging.ERROR:
            av.logging.set_level(av.logging.ERROR)
        try:
            with av.logging.Capture() as logs:
                try:
                    yield
                except (ConfigError, InputError):
                    raise
                except _Named as e:
                    raise exc_type(f"{prefix}: {e.name}: {_message(e.error, logs)}") from e.error
                except (ValueError, av.error.FFmpegError) as e:
                    raise exc_type(f"{prefix}: {_message(e, logs)}") from e
        finally:
            av.logging.set_level(level)


def _message(error: Exception, logs) -> str:
    lines = []
    for _, _, text in logs:
        text = " ".join(text.split())
        if text and text not in lines:
            lines.append(text)
    return "; ".join(lines[:3]) if lines else " ".join(str(error).split())


class _Encoder:
    """The pipeline sink's encoder settings, muxing into a throw-away output. Use as a context manager."""

    def __init__(self, codec, options, *, rate, time_base):
        self.codec, self.options = codec, {k: str(v) for k, v in (options or {}).items()}
        self.rate, self.time_base = rate, time_base
        self.frames = 0
        self.stream = None
        self._tmp = None
        try:
            self.container = av.open(os.devnull, "w", format="null")
            self.muxer = "null"
        except (ValueError, OSError, av.error.FFmpegError):  # a build without the null muxer
            self._tmp = tempfile.TemporaryDirectory(prefix="pipeline-peer-")
            self.container = av.open(str(Path(self._tmp.name) / "peer.mkv"), "w")
            self.muxer = "matroska"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.container.close()
        except Exception:
            pass  # the output is thrown away; a close error after a failure adds nothing
        if self._tmp is not None:
            self._tmp.cleanup()

    def open(self, width, height, colour_from=None):
        with _ffmpeg_errors(ConfigError, f"encoder {self.codec!r}"):
            try:
                stream = self.container.add_stream(self.codec, rate=self.rate)
            except (ValueError, av.error.FFmpegError) as e:
                raise ConfigError(f"unknown or unavailable encoder {self.codec!r}: {e}") from e
            stream.width, stream.height = width, height
            stream.pix_fmt = "yuv420p"
            stream.options = dict(self.options)
            stream.thread_type = "AUTO"
            if self.time_base:
                stream.time_base = self.time_base
                stream.codec_context.time_base = self.time_base
            if colour_from is not None:
                cc = stream.codec_context
                cc.colorspace, cc.color_range = colour_from.colorspace, colour_from.color_range
                cc.color_primaries, cc.color_trc = colour_from.color_primaries, colour_from.color_trc
            self.stream = stream
            self.container.start_encoding()  # opens the codec: refused settings fail here, with x264's reason

    def send(self, frame):
        frame.pict_type = _NO_PICT_TYPE  # let the encoder choose frame types, as for the pipeline's fresh frames
        with _encode_errors(self.codec):
            self.container.mux(self.stream.encode(frame))
        self.frames += 1

    def flush(self):
        with _encode_errors(self.codec):
            self.container.mux(self.stream.encode(None))

    def consume(self, frames: Iterator[av.VideoFrame]) -> None:
        """Encode everything ``frames`` yields; the encoder opens on the first one, at its size and clock."""
        for frame in frames:
            if self.stream is None:
                if self.time_base is None:
                    self.time_base = frame.time_base
                self.open(frame.width & ~1, frame.height & ~1, colour_from=frame)
            self.send(frame)
        if self.stream is not None:
            self.flush()

    def describe(self) -> dict:
        cc = self.stream.codec_context if self.stream is not None else None
        return {
            "codec": self.codec,
            "width": cc.width if cc else None,
            "height": cc.height if cc else None,
            "muxer": self.muxer,
        }


@contextmanager
def _encode_errors(codec):
    try:
        yield
    except (ValueError, av.error.FFmpegError) as e:
        raise ConfigError(f"encoder {codec!r} failed: {' '.join(str(e).split())}") from e


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


_DONE = object()


def _pipe(produce: Callable[[Callable[[Any], bool]], None], consume: Callable[[Iterator], Any]) -> Any:
    """Run ``produce(put)`` in a worker thread and ``consume(items)`` in this one, through a bounded queue.

    ``put`` returns False once the consumer has stopped (error or early exit): the producer must return.
    An exception in the producer is raised in the consumer, in order after the items before it.
    """
    q: queue.Queue = queue.Queue(maxsize=QUEUE_DEPTH)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def worker():
        try:
            produce(put)
        except BaseException as e:  # handed to the consumer, which re-raises it
            put(_Failed(e))
        else:
            put(_DONE)

    def items():
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item

    thread = threading.Thread(target=worker, name="peer-decode", daemon=True)
    thread.start()
    try:
        return consume(items())
    finally:
        stop.set()
        thread.join()


def _open_input(path):
    p = Path(path)
    if not p.exists():
        raise InputError(f"{path}: no such file")
    if p.is_dir():
        raise InputError(f"{path}: is a directory")
    try:
        container = av.open(str(p), "r")
    except (av.error.FFmpegError, OSError, ValueError) as e:
        raise InputError(f"{path}: cannot open as video: {' '.join(str(e).split())}") from e
    if not container.streams.video:
        container.close()
        raise InputError(f"{path}: no video stream")
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"
    return container, stream


def _decoded(container, stream, path, limit) -> Iterator[av.VideoFrame]:
    count = 0
    if limit is not None and limit <= 0:
        return
    try:
        for frame in container.decode(stream):
            yield frame
            count += 1
            if limit is not None and count >= limit:
                return
    except av.error.FFmpegError as e:
        raise InputError(f"{path}: decoding failed: {' '.join(str(e).split())}") from e


def _rate(stream) -> Fraction:
    rate = stream.average_rate or stream.guessed_rate
    return Fraction(rate) if rate else FALLBACK_RATE


def _as_rate(rate) -> Fraction:
    r = Fraction(rate).limit_denominator(1001 * 1000) if isinstance(rate, float) else Fraction(rate)
    if r <= 0:
        raise ConfigError(f"rate must be positive, got {rate}")
    return r


def _check_limit(frames):
    if frames is not None and frames <= 0:
        raise ConfigError(f"frames must be positive, got {frames}")


def _require_frames(count, path):
    if not count:
        raise InputError(f"{path}: no decodable video frames")


def _result(frames: int, seconds: float, **extra) -> dict:
    return {"fps": frames / seconds if seconds > 0 else 0.0, "frames": frames, "seconds": seconds, **extra}
