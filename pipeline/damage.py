"""What FFmpeg says about an input while it is read: the signs of damage that raise no exception.

A truncated MKV or MPEG-TS file ends like a complete one: the demuxer logs "File ended prematurely"
(or flags a corrupt packet) and returns end of file. A decoder conceals a damaged slice and logs
"error while decoding MB ..." without failing the packet, and with slice threads the frame is not even
flagged corrupt. These are read from FFmpeg's log (:func:`pipeline.avlib.watch`) and from the packets'
flags, so that a damaged input always gets a warning, and ``--strict`` fails on it.
"""

from __future__ import annotations

import os
import threading

from .avlib import watch

ERROR = 40  # logging.ERROR: what FFmpeg logged at AV_LOG_ERROR or worse
TS_PACKET_SIZES = (188, 192, 204)  # MPEG-TS, M2TS (timecode prefix), DVB with Reed-Solomon parity


class DamageLog:
    """The demuxer's and the video decoder's error lines, and corrupt packets, for one input."""

    def __init__(self, path: str, demuxer: str, decoder: str):
        self.path, self.demuxer, self.decoder = path, demuxer, decoder
        self._watch = watch({demuxer, decoder})
        self.demuxer_errors: list[str] = []
        self.corrupt_packets = 0
        self._reader: int | None = None  # the thread that demuxes: a muxer of the same name logs elsewhere

    def packet(self, packet) -> None:
        self._reader = threading.get_ident()
        if getattr(packet, "is_corrupt", False):
            self.corrupt_packets += 1

    def decoder_errors(self) -> list[str]:
        """The decoder's error lines since the last call (the demuxer's are kept for :meth:`ended_early`).
        A demuxer line counts only from the thread that reads the input: an MPEG-TS output's muxer is
        named "mpegts" too, and writes from the encode thread."""
        found = []
        for context, level, message, thread in self._watch.take_with_threads():
            if level < ERROR:
                continue
            if context == self.decoder:
                found.append(message)
            elif thread is None or self._reader is None or thread == self._reader:
                self.demuxer_errors.append(message)
        return found

    def ended_early(self) -> str | None:
        """Why the input looks damaged or cut short, once it has been read to its end; None if it does not."""
        self.decoder_errors()  # moves the demuxer's last lines over
        if self.demuxer_errors:
            more = f" (and {len(self.demuxer_errors) - 1} more)" if len(self.demuxer_errors) > 1 else ""
            return f"the {self.demuxer} demuxer reported: {self.demuxer_errors[0]}{more}"
        if self.corrupt_packets:
            return f"the {self.demuxer} demuxer flagged {self.corrupt_packets} packets as corrupt"
        return self._partial_ts_packet()

    def _partial_ts_packet(self) -> str | None:
        # MPEG-TS has no length: a cut file is only told by its last packet being incomplete.
        if self.demuxer != "mpegts" or "://" in self.path:
            return None
        try:
            size = os.path.getsize(self.path)
        except OSError:
            return None
        if size and all(size % n for n in TS_PACKET_SIZES):
            return f"its size ({size} bytes) is not a whole number of transport packets"
        return None

    def close(self) -> None:
        self._watch.close()
