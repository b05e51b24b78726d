"""Input: PyAV demux and threaded decode; each frame's planes are copied once into a host slot (I420).

The only module besides the sink that imports ``av``.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import av
import numpy as np

from .errors import InputError
from .frames import AVCOL_RANGE_JPEG, Colour, FrameMeta, VideoFormat

NATIVE_FORMATS = ("yuv420p", "yuvj420p")  # what the kernels take without a conversion


@dataclass
class AudioPacket:
    packet: av.Packet


@dataclass
class DecodedFrame:
    frame: av.VideoFrame
    meta: FrameMeta


class Source:
    """An opened input: its video stream (decoded), its audio streams (passed through as packets)."""

    def __init__(self, path: str, *, notice: Callable[[str], None] = lambda msg: None):
        self.path = path
        self.notice = notice
        self.container = _open(path)
        videos = self.container.streams.video
        if not videos:
            self.container.close()
            raise InputError(f"{path}: no video stream")
        self.video = videos[0]
        self.video.thread_type = "AUTO"
        self.audio = [s for s in self.container.streams.audio if s.codec_context is not None]
        self._pending: list[DecodedFrame | AudioPacket] = []  # read while probing, replayed by items()
        self._frames = self._decode()
        self.format = self._probe_format()
        self._warned_convert = False

    @property
    def frame_rate(self):
        return self.video.average_rate or self.video.guessed_rate

    @property
    def expected_frames(self) -> int | None:
        return self.video.frames or None

    def _probe_format(self) -> VideoFormat:
        for item in self._frames:
            self._pending.append(item)
            if isinstance(item, DecodedFrame):
                first = item
                break
        else:
            raise InputError(f"{self.path}: no decodable video frames")
        w, h = first.frame.width, first.frame.height
        if w < 2 or h < 2:
            raise InputError(f"{self.path}: frame size {w}x{h} is too small")
        if w % 2 or h % 2:
            self.notice(f"{self.path}: odd frame size {w}x{h}; the last column/row is dropped for 4:2:0")
        colour_range = first.frame.color_range
        if first.frame.format.name == "yuvj420p" and colour_range == 0:
            colour_range = AVCOL_RANGE_JPEG
        colour = Colour.from_tags(
            first.frame.colorspace, colour_range, first.frame.color_primaries, first.frame.color_trc, h
        )
        return VideoFormat(w - w % 2, h - h % 2, colour)

    def items(self, limit: int | None = None) -> Iterator[DecodedFrame | AudioPacket]:
        """Decoded video frames (first one included) and audio packets, in demux order."""
        count = 0
        pending, self._pending = self._pending, []
        for item in itertools.chain(pending, self._frames):
            if limit is not None and count >= limit:
                return
            yield item
            count += isinstance(item, DecodedFrame)

    def _decode(self) -> Iterator[DecodedFrame | AudioPacket]:
        index = 0
        try:
            for packet in self.container.demux(self.video, *self.audio):
                if packet.stream is not self.video:
                    if packet.dts is not None:  # flush packets carry nothing to copy
                        yield AudioPacket(packet)
                    continue
                t0 = time.perf_counter()
                for frame in packet.decode():
                    meta = FrameMeta(index, frame.pts, frame.time_base, decode_s=time.perf_counter() - t0)
                    yield DecodedFrame(frame, meta)
                    index += 1
                    t0 = time.perf_counter()
        except av.error.FFmpegError as e:
            raise InputError(f"{self.path}: decoding failed: {e}") from e

    def copy_into(self, frame: av.VideoFrame, dst: np.ndarray) -> None:
        """Copy one frame's planes into an I420 slot, converting formats or sizes the kernels do not take."""
        fmt = self.format
        if frame.format.name not in NATIVE_FORMATS or (frame.width & ~1, frame.height & ~1) != (fmt.width, fmt.height):
            if not self._warned_convert:
                self.notice(
                    f"{self.path}: converting {frame.format.name} {frame.width}x{frame.height} "
                    f"to yuv420p {fmt.width}x{fmt.height}"
                )
                self._warned_convert = True
            frame = frame.reformat(width=fmt.width, height=fmt.height, format="yuv420p")
        for plane, target in zip(frame.planes, fmt.planes(dst)):
            rows, cols = target.shape
            # Decoders pad rows to line_size; copy only the visible part.
            src = np.frombuffer(plane, np.uint8).reshape(-1, plane.line_size)[:rows, :cols]
            np.copyto(target, src)

    def close(self) -> None:
        self.container.close()


def _open(path: str):
    p = Path(path)
    if not p.exists():
        raise InputError(f"{path}: no such file")
    if p.is_dir():
        raise InputError(f"{path}: is a directory")
    try:
        return av.open(str(p), "r")
    except av.error.FFmpegError as e:
        raise InputError(f"{path}: cannot open as video: {e}") from e
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot open: {e}") from e
