"""Sources and sinks that need no codec: frames from your own arrays, and a sink that discards.

:class:`ArraySource` feeds any iterable of frames (a camera SDK's callback queue, a generator, frames
decoded elsewhere) through the same pipeline as a file: host slots, streams, pooled buffers. Frames are
packed H x W x 3 uint8 RGB (``layout="rgb24"``) or flat I420 (``layout="i420"``, the size given).

:class:`NullSink` processes and discards, like FFmpeg's ``-f null -``: every frame is still downloaded
into a host slot, so a run measures the whole memory path without an encoder setting the pace.
"""

from __future__ import annotations

import functools
import itertools
import numbers
import queue
import sys
import threading
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from .config import is_int, safe_repr
from .errors import ConfigError, InputError
from .log import log
from .video import Colour, FrameMeta, StreamInfo, VideoFormat, check_frame_size

MIN_FPS, MAX_FPS = 0.001, 1000  # frames a second of an array source's timestamps


class ArrayFrame:
    """One frame of an :class:`ArraySource` (the engine's decode stage copies it into a host slot)."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray):
        self.array = array


class ArraySource:
    """Frames from Python: ``frames`` yields NumPy arrays; timestamps count frames at ``fps``.

    The first frame fixes the size; an odd width or height loses its last column or row (4:2:0 output).
    ``colour`` tags I420 input (and the output); RGB input is encoded with BT.709 limited range.
    ``repeat``: cycle through ``frames`` (a list) until this many frames were given (benchmarks).
    A source gives its frames to one run. With ``copy_threads`` above 1 several frames are copied at once:
    yield a new array for each frame, not one buffer refilled.
    """

    audio = None
    decode_errors = corrupt_frames = retimed_frames = 0
    live = False

    def __init__(self, frames: Iterable[np.ndarray], *, fps: float = 30.0, layout: str = "rgb24",
                 size: tuple[int, int] | None = None, colour: Colour | None = None, name: str = "<frames>",
                 repeat: int | None = None):
        if layout not in ("rgb24", "i420"):
            raise ConfigError(f"Invalid layout ({layout!r}). Supported values are rgb24, i420.")
        if isinstance(fps, (bool, np.bool_)) or not isinstance(fps, numbers.Real) or not MIN_FPS <= fps <= MAX_FPS:
            raise ConfigError(f"Invalid fps ({safe_repr(fps)}). Supported values are numbers from {MIN_FPS} to {MAX_FPS}.")
        if repeat is not None and (not is_int(repeat) or not 1 <= repeat <= sys.maxsize):  # islice's limit
            raise ConfigError(f"Invalid repeat ({safe_repr(repeat)}). Supported values are None and integers "
                              f"from 1 to {sys.maxsize}.")
        self.layout, self.path = layout, name
        rate = (fps if isinstance(fps, Fraction) else Fraction(float(fps))).limit_denominator(1001000)
        self._time_base = 1 / rate
        self._taken = False
        self._asked: _Asked | None = None  # the thread asking for the frames, where they are read apart
        refusal = ConfigError(f"Invalid frames ({type(frames).__name__}). Supported values are an iterable of "
                              "arrays (a list, a generator); a single frame is [array].")
        if not isinstance(frames, Iterable) or isinstance(frames, (str, bytes)):
            raise refusal
        try:
            source = itertools.cycle(frames) if repeat is not None else iter(frames)
        except TypeError:  # iterable by its type, not in fact: a 0-d NumPy array
            raise refusal from None
        # Frames from the application's code (a generator: a camera, a queue) may be waited for, and that
        # wait cannot be interrupted: each is asked for on a thread of its own (:class:`_Asked`), so that a
        # stop, a break out of frames() or a Ctrl-C never waits on it. A list or an array is there already:
        # read in the decode stage itself, without the hop (the bench's gpu scope measures with one).
        self.read_apart = not isinstance(frames, (Sequence, np.ndarray))
        self._frames = itertools.islice(source, repeat) if repeat is not None else source
        empty = object()  # a None frame is a wrong frame, not the end
        try:
            self._first = next(self._frames, empty)
        except (Exception, SystemExit) as e:  # SystemExit too, as a stage's: the run's error, not the process's end
            raise InputError(f"{name}: the frame source raised at frame 0: {type(e).__name__}: {e}") from e
        if self._first is empty:
            raise InputError(f"{name}: no frames")
        width, height = self._size(self._first, size)
        fmt = VideoFormat(width - width % 2, height - height % 2, colour or Colour("bt709", False, 1, 1, 1, 1))
        self.info = StreamInfo(fmt, rate, self._time_base, repeat, None,
                               False, name)
        self._source_size = (width, height)

    def _size(self, first: np.ndarray, size: tuple[int, int] | None) -> tuple[int, int]:
        _check_array(self.path, first)
        if self.layout == "i420":
            if not (isinstance(size, tuple) and len(size) == 2 and all(is_int(v) for v in size)):
                raise ConfigError(f"an I420 array source needs size=(width, height), not {size!r}")
            width, height = size
            if width % 2 or height % 2:  # its planes would be read with the even size's strides: a sheared picture
                raise ConfigError(f"an I420 array source needs an even width and height (4:2:0), not {width}x{height}")
        else:
            if first.ndim != 3 or first.shape[2] != 3 or first.dtype != np.uint8:
                raise InputError(f"{self.path}: frames must be H x W x 3 uint8 RGB arrays, got {first.shape} "
                                 f"{first.dtype}")
            width, height = first.shape[1], first.shape[0]
        check_frame_size(self.path, width, height)
        return width, height

    def items(self, limit: int | None = None, stop=None, on_thread: Callable[[], None] | None = None) -> Iterator[Any]:
        """The frames as the engine's entries. ``stop`` (a flag), for a source :attr:`read_apart`: frames are
        asked for on a thread of their own (``on_thread`` runs first there: the run's GPU made current) and a
        stop ends the entries while the application's code still waits."""
        from .source import DecodedFrame  # the entry type the engine expects (no codec involved)

        if self._taken:  # its iterator is spent: a second run would get the first frame alone
            raise ConfigError(f"{self.path}: an ArraySource gives its frames to one run; make another for the next")
        self._taken = True
        frames = itertools.islice(itertools.chain([self._first], self._frames), limit)
        if self.read_apart and stop is not None:
            self._asked = _Asked(frames, stop, on_thread, self._close_frames)
            take = self._asked
        else:
            take = functools.partial(next, frames)
        index = 0
        while True:
            try:
                array = take()
            except (StopIteration, _Stopped):  # the end, or a stop while the application's code waits
                return
            except (Exception, SystemExit) as e:  # the application's generator's failure, and where it stopped
                raise InputError(f"{self.path}: the frame source raised at frame {index}: "
                                 f"{type(e).__name__}: {e}") from e
            yield DecodedFrame(ArrayFrame(array), FrameMeta(index, index, self._time_base))
            index += 1

    def copy_into(self, frame: ArrayFrame, dst: np.ndarray) -> None:
        array, fmt = frame.array, self.info.format
        _check_array(self.path, array)
        if self.layout == "i420":
            if array.dtype != np.uint8 or array.size < dst.size:
                raise InputError(f"{self.path}: an I420 frame of {fmt.width}x{fmt.height} is {dst.size} uint8 "
                                 f"bytes, got {array.size} {array.dtype}")
            np.copyto(dst, array.reshape(-1)[: dst.size])
            return
        if array.shape != (self._source_size[1], self._source_size[0], 3) or array.dtype != np.uint8:
            # Another dtype would be cast on the copy: uint16 wrapped modulo 256, silently.
            raise InputError(f"{self.path}: frame of shape {array.shape} {array.dtype} after frames of "
                             f"{(self._source_size[1], self._source_size[0], 3)} uint8")
        np.copyto(dst.reshape(fmt.height, fmt.width, 3), array[: fmt.height, : fmt.width])

    def close(self) -> None:
        if self._asked is not None:
            self._asked.close()  # the thread asking closes the iterator, once the application's code returns
        else:
            self._close_frames()

    def _close_frames(self) -> None:
        close = getattr(self._frames, "close", None)
        if close is not None:
            close()


class _Stopped(Exception):
    """The run stopped while a frame was asked for."""


class _Asked:
    """The application's iterator advanced on a thread of its own, one frame when the decode stage asks
    for one: its code may wait (a camera, a queue) while a stop is not kept waiting. Nothing is read ahead,
    so a generator that refills one buffer still has each frame copied before it is asked for the next, and
    no frame is taken that the run does not use (but the one asked for when a stop came)."""

    def __init__(self, frames: Iterator, stop, on_thread: Callable[[], None] | None, close: Callable[[], None]):
        self._frames, self._stop, self._on_thread, self._close = frames, stop, on_thread, close
        self._asks: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._answers: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
        self._waiting = threading.Event()  # set while the application's code has the thread
        self._thread = threading.Thread(target=self._run, name="pipeline-frames", daemon=True)
        self._thread.start()

    def __call__(self) -> Any:
        """The next frame; raises StopIteration at the end, _Stopped on a stop, or the iterator's error."""
        self._asks.put(True)
        while True:
            try:
                ok, value = self._answers.get(timeout=0.05)
            except queue.Empty:
                if self._stop.is_set():
                    raise _Stopped from None
                continue
            if ok:
                return value
            raise value

    def close(self) -> None:
        """The thread ends, closing the iterator: at once where it waits for an ask (joined, so a run leaves
        no thread), else once the application's code returns."""
        self._asks.put(False)
        if not self._waiting.is_set():
            self._thread.join(1.0)

    def _run(self) -> None:
        try:
            if self._on_thread is not None:
                self._on_thread()
            while self._asks.get():
                self._waiting.set()
                try:
                    value = next(self._frames)
                except BaseException as e:  # the end (StopIteration) too: raised where the frame was asked for
                    self._answers.put((False, e))
                    return
                finally:
                    self._waiting.clear()
                self._answers.put((True, value))
        except BaseException as e:  # on_thread failing (the GPU gone): said where the next frame is asked for
            self._answers.put((False, e))
        finally:
            try:
                self._close()  # here, where the iterator runs: a generator cannot be closed while it runs
            except Exception as e:  # its own clean-up failing: the run is over, so a line in the log
                log.warning(f"the frame source's clean-up raised {type(e).__name__}: {e}")


def _check_array(name: str, array: Any) -> None:
    if not isinstance(array, np.ndarray):  # copied with NumPy into a host slot
        kind = type(array)
        where = "" if kind.__module__ == "builtins" else f"{kind.__module__.partition('.')[0]}."
        hint = " (.get() gives a CuPy array's NumPy copy)" if where == "cupy." else ""
        raise InputError(f"{name}: frames must be NumPy arrays, got {where}{kind.__name__}{hint}")


class NullSink:
    """Processes and discards (``-o null``): frames are downloaded, then dropped; nothing is written."""

    residence = "host"

    def __init__(self, layout: str = "i420"):
        self.layout = layout
        self.target = "null"
        self.staged = None
        self.zero_copy = True
        self.audio_dropped = 0
        self.on_packets = None
        self.frames = 0

    def write_video(self, frame: Any, meta: FrameMeta) -> None:
        self.frames += 1
        if self.on_packets is not None:
            self.on_packets([meta.seconds])  # "packet out" at once: there is no encoder

    def write_audio(self, packet: Any) -> bool:
        return True

    def finish(self) -> None:
        pass

    def abort(self) -> None:
        pass
