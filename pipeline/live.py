"""Live and paced input: a reader thread that owns the source, paces it, reconnects it, and never waits.

A live source (network stream, camera) delivers frames at its own pace and cannot be asked to wait:
a reader that blocked would lose packets in the socket or the driver instead, without counting them.
So the reader thread demuxes and decodes continuously into a small channel with a drop policy, and the
engine's decode stage takes frames from it (:meth:`Feed.entries`). ``--realtime`` turns a file into
such a source by releasing each frame at its presentation time.

Why a thread of its own: a PyAV read cannot be interrupted from Python (its interrupt callback only
checks the read timeout), so a stalled read holds its thread for up to ``timeout`` seconds. Keeping
that thread apart lets Ctrl-C, the watchdog and the rest of the pipeline go on at once; the reader
closes the source itself whenever its read returns (see :meth:`Feed.close`).

Stalls: every read is bounded by the open/read timeout (PyAV's ``timeout=``); a read that times out or
fails ends the connection with ``SourceStalled`` (the decoder's frames are kept). A source whose audio
flows while its video has stopped is stalled too. With ``--reconnect N`` the reader reopens it up to
N times per outage, with back-off; then it gives up and the run ends with the frames done kept. The
watchdog in :meth:`Feed.entries` is the backstop for a reader stuck where no timeout reaches (a
capture device's driver): no sign of life for ``2 * timeout + 2`` seconds ends the run the same way.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Iterator

from .channels import END, Aborted, AnyOf, Channel, Flag
from .errors import InputError, Interrupted, SourceStalled
from .log import log
from .source import AudioPacket, DecodedFrame, Source

BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0)  # wait before reconnect attempt 1, 2, ...; the last one repeats
WATCHDOG_GRACE_S = 2.0
# A live or paced stream's queues hold this much of its video before the oldest frame is dropped. The
# whole GPU can stall for 100-210 ms while other processes open their decoders (48 streams in 8 processes
# on an H200: every stream's decode, upload and kernels at once); a quarter of a second rides that out,
# and costs latency only while the stall lasts.
JITTER_S = 0.25
MAX_QUEUE = 16  # frames: a stream that claims thousands of frames a second does not get thousands of buffers


def queue_depth(in_flight: int, rate) -> int:
    """Frames a live or paced stream's queues hold: ``JITTER_S`` of video at its ``rate`` (frames per
    second; 30 when unknown), at least ``in_flight`` and 2, at most ``MAX_QUEUE``."""
    try:
        fps = float(rate) if rate else 30.0
    except (TypeError, ValueError, ZeroDivisionError):
        fps = 30.0
    fps = fps if math.isfinite(fps) and fps > 0 else 30.0
    return max(2, in_flight, min(MAX_QUEUE, math.ceil(fps * JITTER_S)))


class _Stopped(Exception):
    """The feed was closed while the reader waited (pacing or back-off)."""


@dataclass
class _Failure:
    """An error of the reader thread, delivered in order after the frames read before it."""

    error: BaseException


class Pacer:
    """Releases frames at their presentation times, as a camera delivers them.

    A frame the decoder could not produce in time goes out at once, and the schedule moves with it
    (no burst to catch up): a source that cannot decode in real time is slowed, not sped up.
    """

    def __init__(self, wait: Callable[[float], bool], clock: Callable[[], float] = time.perf_counter):
        self._wait, self._clock = wait, clock
        self._origin: tuple[float, Fraction] | None = None  # (host time, stream time) of the schedule

    def release(self, pts: int | None, time_base: Fraction | None) -> float:
        """Wait until the frame is due; return its release time. Raises _Stopped if the wait is cut short."""
        now = self._clock()
        if pts is None or not time_base:
            return now
        t = Fraction(pts) * time_base
        if self._origin is None:
            self._origin = (now, t)
            return now
        due = self._origin[0] + float(t - self._origin[1])
        if due > now:
            if self._wait(due - now):
                raise _Stopped
            return due
        self._origin = (now, t)  # late: the schedule starts again from this frame
        return now


class Feed:
    """The reader thread and the channel it fills; the decode stage iterates :meth:`entries`."""

    def __init__(self, source: Source, *, size: int, policy: str, abort: Flag, paced: bool,
                 limit: int | None, reconnect: int, timeout: float,
                 on_drop: Callable[[DecodedFrame], None], nvtx=None):
        self.source = source
        self._stop = threading.Event()
        self._cancel = AnyOf(self._stop, abort)
        self.channel = Channel(size, self._cancel, policy=policy, on_drop=on_drop,
                               droppable=lambda item: isinstance(item, DecodedFrame))
        self._wait = functools.partial(_wait, self._cancel, self._stop)  # not a bound method: no cycle
        self._pacer = Pacer(self._wait) if paced else None
        self._limit, self._reconnect, self._timeout = limit, reconnect, timeout
        self._nvtx = nvtx or (lambda name: contextlib.nullcontext())
        self.heartbeat = time.monotonic()  # the reader's last sign of life: a packet, a reconnect step
        self.reconnects = 0
        self._lock = threading.Lock()
        self._finished = self._orphaned = False
        self._thread = threading.Thread(target=self._run, name="pipeline-read", daemon=True)
        self._started = time.perf_counter()

    def start(self) -> None:
        self._started = time.perf_counter()
        self._thread.start()

    # -- the consumer side (the engine's decode stage) ----------------------------------------------

    def entries(self, stop: Flag) -> Iterator[DecodedFrame | AudioPacket]:
        """Frames and audio packets in order; returns at the end or once ``stop`` is set; raises the
        reader's error (SourceStalled after the reconnects) after the frames read before it."""
        limit = 2 * self._timeout + WATCHDOG_GRACE_S if self.source.live else None
        while not stop.is_set():
            item = self.channel.poll(0.05)
            if item is None:
                if limit is not None and time.monotonic() - self.heartbeat > limit:
                    raise SourceStalled(f"{self.source.path}: no data for {limit:g} s and the read did not "
                                        "time out (stuck device or driver)")
                continue
            if item is END:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield item

    def stop(self) -> None:
        """Ask the reader to stop at its next packet (the decode stage is done with it)."""
        self._stop.set()

    def close(self, wait_s: float = 0.2) -> bool:
        """Stop the reader; True if it has ended and the caller may close the source. A reader still
        inside a blocking read (for up to the read timeout) closes the source itself when it returns."""
        self._stop.set()
        leftovers = self.channel.clear()  # unblocks a reader waiting to put (block policy)
        returns = getattr(self.source, "returns", None)
        if returns is not None:  # decoder surfaces: a reader still decoding must be the one to free them
            for entry in leftovers:
                if isinstance(entry, DecodedFrame):
                    returns.hand_in(entry.frame)
                    entry.frame = None
        del leftovers
        if self._thread.ident is not None:
            self._thread.join(wait_s)
        with self._lock:
            if self._thread.ident is None or self._finished:
                return True
            self._orphaned = True
            return False

    # -- the reader thread --------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._read_all()
            self.channel.put(END)
        except (_Stopped, Aborted):
            pass
        except BaseException as e:  # handed to the decode stage, which raises it in the engine's terms
            try:
                self.channel.put(_Failure(e))
            except Aborted:
                pass
        finally:
            with self._lock:
                self._finished = True
                orphaned = self._orphaned
            if orphaned:
                self.source.close()

    def _read_all(self) -> None:
        count = 0
        while True:
            try:
                for entry in self._watched(self.source.entries()):
                    if self._stop.is_set():
                        return
                    if isinstance(entry, DecodedFrame):
                        self._stamp(entry)
                        count += 1
                    self.channel.put(entry)
                    if self._limit is not None and count >= self._limit:
                        return  # at once: waiting for one more frame could meet a stall
                return  # the end of the stream: a live source that closed, or the end of the file
            except SourceStalled as e:
                if not self.source.live:
                    raise
                self._reopen(e)

    def _watched(self, entries: Iterator) -> Iterator:
        """Entries, with the heartbeat kept and a source whose video stopped while audio flows caught."""
        last_video = time.monotonic()
        while True:
            with self._nvtx("read"):
                entry = next(entries, None)
            if entry is None:
                return
            now = self.heartbeat = time.monotonic()
            if isinstance(entry, DecodedFrame):
                last_video = now
            elif self.source.live and now - last_video > self._timeout:
                raise SourceStalled(f"{self.source.path}: no video for {self._timeout:g} s while audio flows")
            yield entry

    def _stamp(self, entry: DecodedFrame) -> None:
        meta = entry.meta
        if self._pacer is not None:
            meta.decoded_at = self._pacer.release(meta.pts, meta.time_base)
        else:
            # A frame decoded while the pipeline was being set up (the probe) counts from now:
            # set-up time is not frame latency.
            meta.decoded_at = max(meta.decoded_at, self._started)

    def _reopen(self, error: SourceStalled) -> None:
        """Reopen with back-off, up to --reconnect times; each outage gets the full count."""
        for attempt in range(1, self._reconnect + 1):
            delay = BACKOFF_S[min(attempt, len(BACKOFF_S)) - 1]
            log.warning(f"{error}; reconnecting in {delay:g} s (attempt {attempt} of {self._reconnect})")
            # The next sign of life is due after the wait, not before: a back-off longer than the watchdog's
            # limit (8 s against a 1 s --timeout's 4) is not a stuck read.
            self.heartbeat = time.monotonic() + delay
            if self._wait(delay):
                raise _Stopped
            self.heartbeat = time.monotonic()
            try:
                self.source.reopen()  # bounded by the timeout (connecting, then reading the stream's headers)
            except InputError as e:  # refused, or nothing within the open timeout: try again
                error = SourceStalled(str(e))
                continue
            finally:
                self.heartbeat = time.monotonic()  # the first read after it gets the watchdog's whole limit
            self.reconnects += 1
            log.info(f"{self.source.path}: reconnected")
            return
        tried = (f"gave up after {self._reconnect} reconnect attempt{'s' * (self._reconnect > 1)}" if self._reconnect
                 else "not reconnecting (--reconnect N retries)")
        raise SourceStalled(f"{error}; {tried}") from error


def _wait(cancel: Flag, wake: threading.Event, seconds: float) -> bool:
    """Sleep unless cancelled; True if cancelled (the pipeline stopping or failing)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if cancel.is_set():
            return True
        wake.wait(min(left, 0.05))
    return cancel.is_set()


def open_in_background(factory: Callable[[], Source], stop: threading.Event,
                       signum: Callable[[], int | None], deadline: float | None = None, name: str = "") -> Source:
    """Open a live source in a helper thread, so that Ctrl-C during a long open (up to twice the
    timeout: connecting, then analysing the stream) stops the run at once; the helper closes
    whatever it opens after that. ``deadline``: seconds after which an open that has not returned
    (a FIFO with no writer, which no FFmpeg timeout reaches) is given up, as an input error."""
    result: dict[str, object] = {}
    lock = threading.Lock()

    def run() -> None:
        try:
            source = factory()
        except BaseException as e:
            with lock:
                result["error"] = e
            return
        with lock:
            if result.get("abandoned"):
                source.close()
            else:
                result["source"] = source

    thread = threading.Thread(target=run, name="pipeline-open", daemon=True)
    thread.start()
    started = time.monotonic()
    try:
        while thread.is_alive():
            thread.join(0.05)
            if deadline is not None and time.monotonic() - started > deadline:
                with lock:
                    if "source" not in result and "error" not in result:
                        raise InputError(f"{name}: could not be opened within {deadline:g} s (a FIFO or device "
                                         "with no writer, or too little data yet?); --timeout sets the limit")
            if stop.is_set():
                with lock:
                    if "source" not in result and "error" not in result:
                        raise Interrupted(signum() or 2, "no output written")
                break
    except BaseException:  # also an Interrupted raised by a signal handler while waiting here
        with lock:
            result["abandoned"] = True
            source = result.pop("source", None)
        if source is not None:
            source.close()
        raise
    with lock:
        if "error" in result:
            raise result["error"]  # type: ignore[misc]
        return result["source"]  # type: ignore[return-value]

