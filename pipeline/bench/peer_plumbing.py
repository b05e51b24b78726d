"""Plumbing shared by the PyAV baselines of ``pipeline bench`` (:mod:`.peers`, :mod:`.ffmpeg_graph`).

The throw-away encoder with the pipeline sink's settings, the decode thread -> bounded queue -> encode
thread pipe, input opening and decoding (a bad input raises a one-line
:class:`~pipeline.errors.InputError`), and the capture of FFmpeg's own error messages for setup steps.
"""

from __future__ import annotations

import os
import queue
import tempfile
import threading
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Iterator

import av

from ..avlib import READ_TAGS, drain_decoder
from ..errors import ConfigError, InputError
from ..opening import check_local

QUEUE_DEPTH = 8  # frames between the decode and the encode thread
FALLBACK_RATE = Fraction(30)  # when a stream declares no frame rate (as the pipeline's sink)
_NO_PICT_TYPE = av.video.frame.PictureType.NONE

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


class _Named(Exception):
    """A filter's error, tagged with the filter's name (raised by ``ffmpeg_graph._build_graph``)."""

    def __init__(self, name, error):
        super().__init__(f"{name}: {error}")
        self.name, self.error = name, error


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
    check_local(str(path))
    try:
        container = av.open(str(path), "r", **READ_TAGS)
    except (av.error.FFmpegError, OSError, ValueError) as e:
        raise InputError(f"{path}: cannot open as video: {' '.join(str(e).split())}") from e
    if not container.streams.video:
        container.close()
        raise InputError(f"{path}: no video stream")
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"
    return container, stream


@contextmanager
def _input(path) -> Iterator[tuple[Any, Any]]:
    """The input's container and first video stream (frame threads); closed at the end, its decoder drained
    first: PyAV frees a decoder holding the GIL and joins its frame threads, and one logging meanwhile would
    wait for the GIL for ever (avlib.drain_decoder)."""
    container, stream = _open_input(path)
    try:
        yield container, stream
    finally:
        drain_decoder(stream)
        container.close()


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
