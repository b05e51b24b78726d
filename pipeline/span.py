"""A span of the input (ffmpeg's ``-ss``, ``-t``, ``-to``): which frames and audio packets are kept, and
where their timestamps go. Plain Python: the source asks it about each frame and packet.

Times are counted from the input's start (its first timestamp, as ffmpeg counts ``-ss`` before ``-i``)
in microseconds, ffmpeg's own resolution. A frame is kept when its time is at or after the start and
before the end: the source seeks to the keyframe before the start where the input can seek, decodes
from there and drops the frames before the start, so the first frame kept is exact, not the keyframe.

With a start (``-ss``), the output's timestamps begin at 0 at the start, as ``ffmpeg -ss X -i IN``
writes them: a frame at the input's start + X + d is written at d. Without one, they begin at 0 at the
input's start (:func:`zero_shift`), as ffmpeg writes them without ``-copyts``.

Audio is copied packet by packet, so it is cut to the packet: a packet is kept when it starts within
the span (an AAC packet is 21 ms at 48 kHz).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

KEEP, SKIP, STOP = "keep", "skip", "stop"

# What ffmpeg seeks before the start when the demuxer seeks by decoding time and the video has B-frames
# (ffmpeg_demux.c): the keyframe found must come before the first frame shown, not merely decode first.
SEEK_MARGIN = Fraction(3, 23)

_US = 1_000_000


def _us(seconds: float) -> int:
    return round(seconds * _US)


@dataclass(frozen=True)
class Span:
    """Microseconds from the input's start; ``start`` None: from the beginning, timestamps kept."""

    start_us: int | None = None
    end_us: int | None = None

    @classmethod
    def from_seconds(cls, start: float | None = None, duration: float | None = None,
                     end: float | None = None) -> Span | None:
        """``-ss``, ``-t`` (a duration from the start) and ``-to`` (a position); None when none is given."""
        if start is None and duration is None and end is None:
            return None
        first = _us(start) if start is not None else None
        if duration is not None:
            last = (first or 0) + _us(duration)
        else:
            last = _us(end) if end is not None else None
        return cls(first, last)

    def bind(self, origin: Fraction) -> Trim:
        """The span on an opened input whose first timestamp is ``origin`` seconds."""
        begin = None if self.start_us is None else origin + Fraction(self.start_us, _US)
        stop = None if self.end_us is None else origin + Fraction(self.end_us, _US)
        return Trim(begin, stop)


@dataclass(frozen=True)
class Trim:
    """A span in the input's own seconds: ``begin`` (None: no start given) to ``stop`` (None: the end)."""

    begin: Fraction | None
    stop: Fraction | None

    def frame(self, pts: int | None, time_base: Fraction | None) -> str:
        """KEEP, SKIP (before the start) or STOP (at or after the end: nothing later is kept)."""
        t = _seconds(pts, time_base)
        if t is None:
            return KEEP  # no timestamp to judge by: the source gives it one in sequence
        if self.past_end(pts, time_base):
            return STOP
        if self.begin is not None and t < self.begin:
            return SKIP
        return KEEP

    def past_end(self, pts: int | None, time_base: Fraction | None, margin: int = 0) -> bool:
        """Whether ``pts`` is at or after the end, plus ``margin`` seconds (False without either)."""
        t = _seconds(pts, time_base)
        return t is not None and self.stop is not None and t >= self.stop + margin

    def packet(self, pts: int | None, time_base: Fraction | None) -> bool:
        """Whether an audio packet starting at ``pts`` is kept."""
        t = _seconds(pts, time_base)
        if t is None:
            return True
        return (self.begin is None or t >= self.begin) and (self.stop is None or t < self.stop)

    def seek_target(self, origin: Fraction) -> Fraction | None:
        """Where to seek (seconds), or None when decoding from the beginning is as quick."""
        if self.begin is None or self.begin - SEEK_MARGIN <= origin:
            return None
        return self.begin - SEEK_MARGIN

    def expected_frames(self, frames: int, rate: Fraction | None, origin: Fraction) -> int | None:
        """About how many of the input's ``frames`` fall in the span (for a progress bar's total)."""
        if not rate:
            return None
        first = 0 if self.begin is None else math.ceil((self.begin - origin) * rate)
        last = frames if self.stop is None else min(frames, math.ceil((self.stop - origin) * rate))
        return max(0, last - first) or None


def zero_shift(zero: Fraction, time_base: Fraction | None) -> int:
    """Ticks of ``time_base`` subtracted from every timestamp kept, so that the output starts at 0 at ``zero``
    seconds of the input: its start (its first timestamp), or ``-ss``'s. A recording whose clock read 10 h
    when it began is not written 10 h late (an MP4 would open with 10 h of nothing), and one whose clock
    wraps (MPEG-TS's 33 bits), whose first part FFmpeg gives negative times, is not cut (an MP4's edit
    list hid that part)."""
    if not zero or not time_base:
        return 0
    return math.floor(zero / time_base)


def _seconds(pts: int | None, time_base: Fraction | None) -> Fraction | None:
    if pts is None or not time_base:
        return None
    return pts * Fraction(time_base)
