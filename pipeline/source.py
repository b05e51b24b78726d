"""Input: PyAV demux and threaded decode; each frame's planes are copied once into a host slot (I420).

The only module besides the sink that imports ``av``.

Damaged input is survived rather than refused, unless ``strict``: a packet the decoder rejects is
counted (``decode_errors``) and skipped, a frame the decoder concealed is counted (``corrupt_frames``)
and processed, a read error or early end of file ends the input with a warning. Timestamps are kept
as they are, except that a missing, non-increasing or wildly jumping one is moved (see ``_Clock``) so
the encoder and muxer, which require strictly increasing timestamps, never fail on an input's fault.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Callable, Iterator

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from .errors import InputError
from .frames import AVCOL_RANGE_JPEG, Colour, FrameMeta, VideoFormat

NATIVE_FORMATS = ("yuv420p", "yuvj420p")  # what the kernels take without a conversion

# Larger than any codec level allows (H.264 and HEVC stop at 8192 wide); bigger is a damaged header
# or an input no stage was sized for. Memory for big but legal frames is checked by the engine.
MAX_SIDE = 16384

# A gap between two frames longer than this is a discontinuity (a timestamp wrap or damage), not a
# pause: FFmpeg's own threshold for such jumps is 10 s; a minute leaves room for sparse VFR capture.
MAX_GAP_S = 60.0


@dataclass
class AudioPacket:
    packet: av.Packet


@dataclass
class DecodedFrame:
    frame: av.VideoFrame
    meta: FrameMeta


class Source:
    """An opened input: its video stream (decoded), its audio streams (passed through as packets)."""

    def __init__(self, path: str, *, notice: Callable[[str], None] = lambda msg: None, strict: bool = False):
        self.path = path
        self._notice = notice
        self._held: list[str] | None = []  # notices while opening: shown only if the input is usable
        self.strict = strict
        self.decode_errors = 0  # packets the decoder rejected (skipped)
        self.corrupt_frames = 0  # frames the decoder concealed errors in (processed)
        self.retimed_frames = 0  # frames whose timestamp was missing or went backwards
        self.container = _open(path)
        try:
            self.video = self._video_stream()
            self.audio = self._audio_streams()
            self._pending: list[DecodedFrame | AudioPacket] = []  # read while probing, replayed by items()
            self._clock = _Clock(_frame_step(self.video), _ticks(self.video, MAX_GAP_S))
            self._frames = self._decode()
            self.format, self.display_matrix = self._probe()
        except BaseException:
            self.container.close()
            raise  # its one line says it all; the warnings held back would only repeat it
        held, self._held = self._held, None
        for message in held:
            notice(message)
        self._reformatter = VideoReformatter()  # keeps its swscale context across frames
        self._warned_convert = False

    def _video_stream(self):
        videos = self.container.streams.video
        if not videos:
            raise InputError(f"{self.path}: no video stream")
        video = videos[0]
        if video.codec_context is None:
            raise InputError(f"{self.path}: no decoder for the video stream (unknown or unsupported codec)")
        video.thread_type = "AUTO"
        return video

    def _audio_streams(self) -> list:
        """Audio streams to copy. One without a sample rate or channels (a damaged or phantom stream)
        would make the output's header unwritable, failing the whole run: it is left out instead."""
        usable = []
        for s in self.container.streams.audio:
            cc = s.codec_context
            if cc is not None and cc.sample_rate > 0 and cc.channels > 0:
                usable.append(s)
            else:
                self.notice(f"warning: {self.path}: audio stream #{s.index} has no decoder, sample rate or "
                            "channels (damaged?); not copied")
        return usable

    def notice(self, message: str) -> None:
        if self._held is not None:
            self._held.append(message)
        else:
            self._notice(message)

    @property
    def frame_rate(self):
        return self.video.average_rate or self.video.guessed_rate

    @property
    def expected_frames(self) -> int | None:
        return self.video.frames or None

    def _probe(self) -> tuple[VideoFormat, tuple[int, ...] | None]:
        first = self._first_frame()
        w, h = first.frame.width, first.frame.height
        check_frame_size(self.path, w, h)
        if w % 2 or h % 2:
            self.notice(f"{self.path}: odd frame size {w}x{h}; the last column/row is dropped for 4:2:0")
        colour_range = first.frame.color_range
        if first.frame.format.name == "yuvj420p" and colour_range == 0:
            colour_range = AVCOL_RANGE_JPEG
        colour = Colour.from_tags(
            first.frame.colorspace, colour_range, first.frame.color_primaries, first.frame.color_trc, h
        )
        return VideoFormat(w - w % 2, h - h % 2, colour), _display_matrix(first.frame)

    def _first_frame(self) -> DecodedFrame:
        for item in self._frames:
            self._pending.append(item)
            if isinstance(item, DecodedFrame):
                return item
        errors = f" ({self.decode_errors} packets failed to decode)" if self.decode_errors else ""
        raise InputError(f"{self.path}: no decodable video frames{errors}")

    def items(self, limit: int | None = None) -> Iterator[DecodedFrame | AudioPacket]:
        """Decoded video frames (first one included) and audio packets, in demux order."""
        count = 0
        pending, self._pending = self._pending, []
        for item in itertools.chain(pending, self._frames):
            if limit is not None and count >= limit:
                return
            yield item
            count += isinstance(item, DecodedFrame)

    # -- demux and decode -------------------------------------------------------------------------

    def _decode(self) -> Iterator[DecodedFrame | AudioPacket]:
        index = 0
        for packet in self._packets():
            if packet.stream is not self.video:
                if packet.dts is not None:  # flush packets carry nothing to copy
                    yield AudioPacket(packet)
                continue
            for frame, decode_s in self._decode_packet(packet):
                yield DecodedFrame(frame, self._meta(index, frame, decode_s))
                index += 1
        self._check_complete(index)

    def _packets(self) -> Iterator[av.Packet]:
        """Demuxed packets; a read error ends the input like a truncation (fatal only when strict)."""
        demux = self.container.demux(self.video, *self.audio)
        while True:
            try:
                packet = next(demux)
            except StopIteration:
                return
            except av.error.FFmpegError as e:
                if self.strict:
                    raise InputError(f"{self.path}: read error: {e}") from e
                self.notice(f"warning: {self.path}: read error, the rest of the input is skipped: {e}")
                yield from self._drain_packet()
                return
            yield packet

    def _drain_packet(self) -> Iterator[av.Packet]:
        # After a read error the demuxer sends no flush packet; an empty one drains the decoder's queue.
        packet = av.Packet()
        packet.stream = self.video
        yield packet

    def _decode_packet(self, packet: av.Packet) -> list[tuple[av.VideoFrame, float]]:
        t0 = time.perf_counter()
        try:
            # PyAV >= 17.1 returns the good frames of a packet and drops the error that followed them.
            frames = packet.decode()
        except av.error.FFmpegError as e:
            self._bad_data(f"undecodable packet at pts {packet.pts}", e)
            self.decode_errors += 1
            return []
        dt = (time.perf_counter() - t0) / max(1, len(frames))
        for frame in frames:
            if frame.is_corrupt:
                self._bad_data(f"corrupt frame at pts {frame.pts}")
                self.corrupt_frames += 1
        return [(frame, dt) for frame in frames]

    def _bad_data(self, what: str, error: Exception | None = None) -> None:
        if self.strict:
            cause = f": {error}" if error else ""
            raise InputError(f"{self.path}: {what}{cause} (--strict)") from error
        if self.decode_errors + self.corrupt_frames == 0:
            self.notice(f"warning: {self.path}: {what}; damaged data is skipped or concealed and counted")

    def _meta(self, index: int, frame: av.VideoFrame, decode_s: float) -> FrameMeta:
        pts = self._clock(frame.pts)
        if pts != frame.pts:
            if self.retimed_frames == 0:
                self.notice(f"warning: {self.path}: frame {index} has timestamp {frame.pts}; "
                            f"moved to {pts} to keep timestamps increasing")
            self.retimed_frames += 1
        return FrameMeta(index, pts, frame.time_base or self.video.time_base, decode_s=decode_s)

    def _check_complete(self, decoded: int) -> None:
        expected = self.expected_frames
        if decoded and expected and decoded + self.decode_errors < expected:
            self.notice(f"warning: {self.path}: input ends early: {decoded} of {expected} frames decoded "
                        "(truncated file?)")

    # -- into the host ring -----------------------------------------------------------------------

    def copy_into(self, frame: av.VideoFrame, dst: np.ndarray) -> None:
        """Copy one frame's planes into an I420 slot, converting formats or sizes the kernels do not take."""
        fmt = self.format
        same_size = (frame.width & ~1, frame.height & ~1) == (fmt.width, fmt.height)
        if frame.format.name not in NATIVE_FORMATS or not same_size:
            self._notice_conversion(frame)
            # Same size: convert the format only and crop the odd row/column below, rather than
            # resample the whole picture by a pixel. Another size (a mid-stream change): scale.
            width, height = (frame.width, frame.height) if same_size else (fmt.width, fmt.height)
            frame = self._reformatter.reformat(frame, width=width, height=height, format="yuv420p")
        for plane, target in zip(frame.planes, fmt.planes(dst)):
            rows, cols = target.shape
            # Decoders pad rows to line_size; copy only the visible part.
            src = np.frombuffer(plane, np.uint8).reshape(-1, plane.line_size)[:rows, :cols]
            np.copyto(target, src)

    def _notice_conversion(self, frame: av.VideoFrame) -> None:
        if not self._warned_convert:
            fmt = self.format
            self.notice(f"{self.path}: converting {frame.format.name} {frame.width}x{frame.height} "
                        f"to yuv420p {fmt.width}x{fmt.height}")
            self._warned_convert = True

    def close(self) -> None:
        self.container.close()


class _Clock:
    """Strictly increasing timestamps: the input's own where they are, else one frame step later.

    A jump back, or forward by more than ``max_gap`` (concatenated streams, a timestamp wrap, a damaged
    timestamp), shifts that frame and the ones after it by the same amount, so the spacing (the frame
    rate, VFR included) is kept and one bad value does not push the rest hours away.
    """

    def __init__(self, step: int, max_gap: int):
        self.step = step
        self.max_gap = max(max_gap, step)
        self.last: int | None = None
        self.offset = 0

    def __call__(self, pts: int | None) -> int:
        if pts is None:
            pts = (self.last + self.step) if self.last is not None else 0
        else:
            pts += self.offset
        if self.last is not None and not 0 < pts - self.last <= self.max_gap:
            wanted = self.last + self.step
            self.offset += wanted - pts
            pts = wanted
        self.last = pts
        return pts


def _ticks(video, seconds: float) -> int:
    tb = video.time_base
    return int(seconds / tb) if tb else 1 << 62


def _frame_step(video) -> int:
    """One frame period in the stream's time base (at least one tick)."""
    rate, tb = video.average_rate or video.guessed_rate, video.time_base
    if not rate or not tb:
        return 1
    return max(1, round(1 / (Fraction(rate) * Fraction(tb))))


def _display_matrix(frame: av.VideoFrame) -> tuple[int, ...] | None:
    """The rotation/flip matrix a player applies when showing the frame (FFmpeg's layout), if any."""
    data = frame.side_data.get(av.sidedata.sidedata.Type.DISPLAYMATRIX)
    if data is None:
        return None
    values = tuple(int(v) for v in np.frombuffer(bytes(data), np.int32))
    return values if len(values) == 9 else None


def check_frame_size(path: str, width: int, height: int) -> None:
    if width < 2 or height < 2:
        raise InputError(f"{path}: frame size {width}x{height} is too small")
    if width > MAX_SIDE or height > MAX_SIDE:
        raise InputError(f"{path}: frame size {width}x{height} is too large; "
                         f"supported sizes are up to {MAX_SIDE}x{MAX_SIDE}")


def _open(path: str):
    p = Path(path)
    if not p.exists():
        raise InputError(f"{path}: no such file")
    if p.is_dir():
        raise InputError(f"{path}: is a directory")
    try:
        container = av.open(str(p), "r")
    except av.error.FFmpegError as e:
        raise InputError(f"{path}: cannot open as video: {e}") from e
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot open: {e}") from e
    if container.format.name.endswith("_pipe") or container.format.name == "image2":
        # A still image decodes as a one-frame "video"; a video pipeline should say so, not "succeed".
        container.close()
        raise InputError(f"{path}: is a still image ({container.format.name}), not a video")
    return container
