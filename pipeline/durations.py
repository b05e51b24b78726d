"""Each frame's own duration, onto the packet the encoder makes of it.

Encoders give their packets no duration, so a muxer holds the last frame for one frame period of the
stream's rate, which for variable-rate video is the average's: a screen recording whose last frame came 30 s
after three quick ones was written 7.5 s longer than its input. ffmpeg passes each frame's duration on;
so does this. Packets are matched to frames by their timestamp (B-frames come out reordered).
"""

from __future__ import annotations

from fractions import Fraction

LIMIT = 512  # frames an encoder holds is far fewer (x264's lookahead: 60); an unmatched timestamp ages out


class FrameDurations:
    def __init__(self):
        self._by_pts: dict[int, tuple[int, Fraction]] = {}

    def note(self, pts: int, duration: int | None, time_base: Fraction | None) -> None:
        """The frame given to the encoder at ``pts`` lasts ``duration`` ticks of ``time_base`` (None: unknown)."""
        if not duration or duration < 0 or not time_base:
            return
        if len(self._by_pts) >= LIMIT:
            del self._by_pts[next(iter(self._by_pts))]
        self._by_pts[pts] = (duration, time_base)

    def apply(self, packets) -> None:
        """Give each packet its frame's duration, in the packet's own time base."""
        for packet in packets:
            known = self._by_pts.pop(packet.pts, None) if packet.pts is not None else None
            if known is None or not packet.time_base:
                continue
            duration, time_base = known
            if time_base != packet.time_base:
                duration = max(1, round(duration * Fraction(time_base) / Fraction(packet.time_base)))
            packet.duration = duration
