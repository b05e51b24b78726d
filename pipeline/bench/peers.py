"""Measured baselines for ``pipeline bench``: what plain PyAV/FFmpeg does with the same clip on this machine.

These are deliberately plain PyAV code with no project machinery (no Source, Sink, ring, engine or
filter kernels), so that they measure the libraries and not us:

* :func:`decode_fps`: demux + decode only (codec frame threads), the input ceiling;
* :func:`load_frames` + :func:`encode_fps`: encode only, from frames decoded beforehand, the output ceiling;
* :func:`transcode_fps`: decode thread -> bounded queue -> encode thread, no processing; the end-to-end
  ceiling the GPU pipeline is compared against (PyAV releases the GIL in the codecs, so the two overlap);
* :func:`~.ffmpeg_graph.ffmpeg_chain` + :func:`ffmpeg_filters_fps`: the same transcode with FFmpeg's own
  filters in between (``av.filter.Graph``), the CPU peer for a filter chain.

The translation of our filter chain into an FFmpeg graph, and the building of that graph, live in
:mod:`.ffmpeg_graph`; the encoder, the decode/encode thread pipe and input opening in :mod:`.peer_plumbing`.

The encoder is configured as the pipeline's sink configures it: ``thread_type = "AUTO"``, ``pix_fmt``
yuv420p, the caller's options dict, the input's time base. Output goes to FFmpeg's ``null`` muxer
(``av.open(os.devnull, "w", format="null")``: no file, no I/O), or to a temporary Matroska file where a
build lacks that muxer. Decoded frames have their ``pict_type`` cleared before encoding, as the ffmpeg
CLI does: libx264 otherwise copies the input's I/P/B decisions, which the pipeline's fresh frames never
carry.

Filter threading: FFmpeg slice-threads the filters that support it (gblur, unsharp, lut*, ...) with
``AVFilterGraph.nb_threads`` threads, 0 (the default) meaning automatic (cores + 1: 3 on a 2-core machine);
PyAV exposes it as ``Graph.threads`` (settable only before the first filter is added), which
``ffmpeg_filters_fps(threads=...)`` sets; the result reports the count FFmpeg settled on.

Errors: a bad input raises :class:`~pipeline.errors.InputError`; a bad graph description, an unknown
filter, bad filter options or an encoder that refuses its settings raise
:class:`~pipeline.errors.ConfigError`, each with a one-line message.
"""

from __future__ import annotations

import os
import time
from fractions import Fraction
from typing import Iterable

import av

from ..errors import ConfigError
from .ffmpeg_graph import _build_graph, _drain, _escape, _filter_errors, parse_graph
from .peer_plumbing import (
    _as_rate,
    _check_limit,
    _decoded,
    _Encoder,
    _input,
    _pipe,
    _rate,
    _require_frames,
    _result,
)

__all__ = [
    "decode_fps",
    "encode_fps",
    "ffmpeg_filters_fps",
    "load_frames",
    "transcode_fps",
    "video_info",
]


# --------------------------------------------------------------------------
# Ceilings
# --------------------------------------------------------------------------


def video_info(path: str | os.PathLike) -> dict:
    """Size, rate, time base and declared frame count of the first video stream (for :func:`encode_fps`)."""
    with _input(path) as (container, stream):
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


def decode_fps(path: str | os.PathLike, *, frames: int | None = None) -> dict:
    """Demux and decode the first video stream (codec frame threads), touching each frame, converting nothing."""
    _check_limit(frames)
    with _input(path) as (container, stream):
        count = 0
        t0 = time.perf_counter()
        for _frame in _decoded(container, stream, path, frames):
            count += 1  # the frame object is all we touch: no plane access, no conversion
        seconds = time.perf_counter() - t0
        threads = stream.codec_context.thread_count
    _require_frames(count, path)
    return _result(count, seconds, decoder_threads=threads)


def load_frames(path: str | os.PathLike, *, frames: int | None = None) -> list[av.VideoFrame]:
    """Decode into memory for :func:`encode_fps`: yuv420p frames of even size (reformatted where needed).

    Memory is the caller's business: 600 frames of 1080p are about 1.9 GB.
    """
    _check_limit(frames)
    out = []
    with _input(path) as (container, stream):
        for frame in _decoded(container, stream, path, frames):
            w, h = frame.width & ~1, frame.height & ~1
            if frame.format.name != "yuv420p" or (w, h) != (frame.width, frame.height):
                frame = frame.reformat(width=w, height=h, format="yuv420p")
            out.append(frame)
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
    with _input(path) as (container, stream):
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


# --------------------------------------------------------------------------
# FFmpeg filter peer
# --------------------------------------------------------------------------


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

    stats = {"input_frames": 0, "filter_threads": None}
    with _input(path) as (container, stream):
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
