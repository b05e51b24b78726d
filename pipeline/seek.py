"""Seeking to the keyframe before ``-ss``'s start, checked: where the seek lands is looked at, not trusted.

A container with an index (MP4, Matroska with cues) lands on the keyframe before the target. One without
(MPEG-TS, MPEG-PS) is searched by timestamp alone: FFmpeg lands on whichever packet comes before the
target, usually in the middle of a GOP, and the decoder then skips to the next keyframe, past the start.
So after each seek the packets are read up to the first video keyframe. Where it is shown at or before
the start, decoding begins there: it and the audio packets read on the way are handed back, to be decoded
and copied before the rest (the video packets before it could only fail to decode). Where it comes after,
the seek goes further back (1 s, then 2, 4, ...) until the input's beginning, from where decoding always
works.

Reading ahead costs demuxing only (no decoding), at most up to the start.
"""

from __future__ import annotations

import math
from fractions import Fraction

import av

from .log import log

NO_TIMESTAMPS = 0x80  # AVFMT_NOTIMESTAMPS: a format whose packets carry none (raw H.264, HEVC)


def seek_before(container, video, audio: list, target: Fraction, begin: Fraction, origin: Fraction) -> list:
    """Leave ``container`` where decoding ``video`` gives every frame from ``begin`` (seconds, as ``target``
    and ``origin``, the input's first timestamp): at a keyframe shown at or before it, else at the beginning.
    ``target`` is the first place tried. Returns the packets already read that the demux must give first
    (the keyframe, ``audio``'s packets before it). Raises what ``container.seek`` raises."""
    if container.format.flags & NO_TIMESTAMPS:
        return []  # a raw stream: its frames are timed by counting them from the start (pipeline.decode)
    try:
        return _seek_checked(container, video, audio, target, begin, origin)
    except av.error.FFmpegError:
        # FFmpeg may have read to the end looking for a timestamp; decoding starts at the beginning then.
        _rewind(container)
        raise


def _seek_checked(container, video, audio: list, target: Fraction, begin: Fraction, origin: Fraction) -> list:
    tb = Fraction(video.time_base)
    step = Fraction(1)
    container.seek(math.floor(target / tb), stream=video, backward=True)
    while target > origin:
        try:
            read = _read_to_keyframe(container, video, audio, begin)
        except (av.error.FFmpegError, IndexError):  # damage on the way (IndexError: see pipeline.decode)
            break  # from the beginning: the decode loop meets that damage in its turn and says so
        if read is not None:
            return read
        log.debug(f"seek to {float(target):.3f} s landed past the keyframe before {float(begin):.3f} s; "
                  f"trying {float(step):g} s earlier")
        target -= step
        step *= 2
        if target > origin:
            container.seek(math.floor(target / tb), stream=video, backward=True)
    # To the beginning. Not to ``origin`` itself: the input's start time may come after its first packet's
    # decoding time (MPEG-TS), where a search by timestamp lands past the first keyframe again.
    container.seek(math.floor((origin - 1) / tb), stream=video, backward=True)
    return []


def _read_to_keyframe(container, video, audio: list, begin: Fraction) -> list | None:
    """The packets from here to the first video keyframe (it last; no other video packet) when it is shown
    at or before ``begin``; None when it comes later, or none comes before a video packet decoded after
    ``begin`` or the end."""
    tb = Fraction(video.time_base)
    kept = []
    for packet in container.demux(video, *audio):
        if packet.stream is not video:
            kept.append(packet)
            continue
        if packet.size == 0:  # the flush packet at the end
            return None
        shown = packet.pts if packet.pts is not None else packet.dts
        if packet.is_keyframe and shown is not None:
            return kept + [packet] if shown * tb <= begin else None
        if packet.dts is not None and packet.dts * tb > begin:  # any keyframe after it is shown later still
            return None
    return None


def _rewind(container) -> None:
    try:
        container.seek(0, unsupported_byte_offset=True)
    except av.error.FFmpegError:
        log.debug("cannot go back to the input's first byte after a failed seek")
