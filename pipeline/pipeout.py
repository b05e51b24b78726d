"""A pipe output (``-o -``, ``pipe:N``): the muxer options a stream that cannot seek needs, what it cannot
carry, and the writer that hands the muxer's bytes to the descriptor without losing a write error."""

from __future__ import annotations

import os
import select
from fractions import Fraction

from .errors import ConfigError

# Muxers that go back to the start to finish the file (the index, moov): on a pipe, which cannot seek, they
# write fragmented MP4 instead (an empty moov first, then a fragment per keyframe), which players read.
# delay_moov holds the moov until the first fragment is cut, so that its edit list can say where the
# picture starts (B-frames start decoding before 0): without it the timestamps would move by that delay.
SEEKING_MUXERS = {"mp4", "mov", "ipod", "3gp", "3g2", "psp", "f4v"}


def pipe_muxer_options(muxer: str, time_base: Fraction | None) -> dict[str, str]:
    if muxer not in SEEKING_MUXERS:
        return {}
    options = {"movflags": "frag_keyframe+empty_moov+delay_moov"}
    if time_base and time_base.denominator < 2**31:  # as for files: keep the video's clock (sinkopts.muxer_options)
        options["movie_timescale"] = str(time_base.denominator)
    return options


def check_pipe_audio(target, muxer: str, templates) -> None:
    """AAC without its header (ADTS, as MPEG-TS carries it) gets one from the first packet, which MP4 and
    Matroska then write back at the start of the file: a pipe cannot go back, so refuse it before the run."""
    if muxer.split(",")[0] not in SEEKING_MUXERS | {"matroska", "webm"}:
        return
    for s in templates:
        if s.codec_context.name == "aac" and not s.codec_context.extradata_size:
            raise ConfigError(f"{target}: the input's AAC audio (ADTS, as in MPEG-TS) cannot be copied into "
                              f"{muxer} on a pipe (the header it needs comes with the first packet); "
                              "use -f mpegts, or a file output")


class PipeWriter:
    """A pipe output's bytes, written to its descriptor here rather than by FFmpeg's pipe protocol, whose
    write errors the fragmented MP4 muxer drops: into a reader that left (EPIPE) or a full device the
    run went on and ended with exit 0 and a cut stream.

    The first error is kept and everything after it dropped, so that FFmpeg never takes its own error
    paths (closing the MP4 muxer after failed writes can crash with movflags=frag_keyframe+empty_moov):
    the sink raises the error once the mux or close that met it returns."""

    def __init__(self, fd: int):
        self.fd = fd
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        if self.error is None:
            try:
                self._write_all(memoryview(data))
            except OSError as e:
                self.error = e
        return len(data)

    def _write_all(self, view: memoryview) -> None:
        while view:
            try:
                view = view[os.write(self.fd, view):]
            except BlockingIOError:  # a non-blocking descriptor into a full pipe: wait, as a blocking one does
                select.select([], [self.fd], [])
