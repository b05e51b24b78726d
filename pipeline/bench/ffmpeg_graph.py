"""Our filter chain as an FFmpeg filter graph, for the CPU peer of ``pipeline bench``
(:func:`~.peers.ffmpeg_filters_fps`).

* :data:`FFMPEG_EQUIVALENTS` + :func:`ffmpeg_chain`: translate a parsed chain into a graph description;
* :func:`parse_graph`: split a linear description back into (filter, options) pairs;
* ``_build_graph`` and friends: build and run that graph with ``av.filter.Graph``.

FFmpeg's filters work on YUV (luma and 4:2:0 chroma), ours on planar float RGB: the filter peer is about
cost, not identical pixels. Some equivalents are approximations by construction: FFmpeg's gblur and
bilateral are recursive approximations whose cost does not grow with sigma; its unsharp mask is at most
13x13; temporal filters (tdenoise, motion) have no counterpart and skip the peer; the
PyAV wheels are built without FFmpeg's GPL filters (no ``eq``, no ``boxblur``), so :func:`ffmpeg_chain`
falls back to ``lutyuv`` and ``avgblur`` (same kind of work: a per-plane lookup table, a running-sum box
filter) when those are missing.

Errors: a bad graph description, an unknown filter or bad filter options raise
:class:`~pipeline.errors.ConfigError`, each with a one-line message.
"""

from __future__ import annotations

import functools
import math
from contextlib import contextmanager
from fractions import Fraction
from typing import Any, Callable, Iterable

import av

from ..errors import ConfigError
from .peer_plumbing import _NO_PICT_TYPE, _ffmpeg_errors, _Named

__all__ = [
    "FFMPEG_EQUIVALENTS",
    "ffmpeg_chain",
    "parse_graph",
]


# --------------------------------------------------------------------------
# Translation
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


# --------------------------------------------------------------------------
# Graph building
# --------------------------------------------------------------------------


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
