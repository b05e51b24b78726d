"""Output: PyAV encode and mux into a temporary file beside the target, renamed into place on success.

Video frames are built zero-copy over the host slot (``VideoFrame.from_numpy_buffer``); the slot stays
busy until the encoder lets go of the frame (see :meth:`HostSlot.lend`). Audio packets are copied as they are.
"""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from .errors import ConfigError, OutputError
from .frames import FrameMeta, VideoFormat


def temp_path_for(target: Path) -> Path:
    # Same directory, so the final rename is atomic; same suffix, so the muxer is chosen from it.
    return target.with_name(f".{target.stem}.partial-{os.getpid()}{target.suffix}")


class Sink:
    def __init__(self, target: Path, fmt: VideoFormat, *, codec: str, options: dict[str, str],
                 rate: Fraction | None, time_base: Fraction | None, audio_streams=()):
        self.target = target
        self.tmp = temp_path_for(target)
        self.fmt = fmt
        self._next_pts = 0
        self.zero_copy = True  # cleared by the engine if the encoder keeps references to our frames
        try:
            self.container = av.open(str(self.tmp), "w")
        except ValueError as e:  # unknown container for this extension
            raise ConfigError(f"{target}: cannot choose an output format from the name ({e})") from e
        except (OSError, av.error.FFmpegError) as e:
            raise OutputError(f"{target}: cannot create output: {e}") from e
        try:
            self.video = self._add_video(codec, options, rate, time_base)
            self.audio = {s.index: self.container.add_stream_from_template(s) for s in audio_streams}
        except BaseException:
            self.abort()
            raise

    def _add_video(self, codec, options, rate, time_base):
        try:
            stream = self.container.add_stream(codec, rate=rate or Fraction(30))
        except (ValueError, av.error.FFmpegError) as e:
            raise ConfigError(f"unknown or unavailable encoder {codec!r}: {e}") from e
        stream.width, stream.height = self.fmt.width, self.fmt.height
        stream.pix_fmt = "yuv420p"
        stream.options = dict(options)
        stream.thread_type = "AUTO"
        if time_base:  # keep the input's clock so every pts survives unchanged (VFR included)
            stream.time_base = time_base
            stream.codec_context.time_base = time_base
        colour = self.fmt.colour
        cc = stream.codec_context
        cc.colorspace, cc.color_range = colour.colorspace, colour.color_range
        cc.color_primaries, cc.color_trc = colour.color_primaries, colour.color_trc
        return stream

    def write_video(self, i420: np.ndarray, meta: FrameMeta) -> None:
        """Encode one I420 frame; ``i420`` must already have the shape ``fmt.shape`` (it is wrapped, not copied)."""
        frame = av.VideoFrame.from_numpy_buffer(i420 if self.zero_copy else i420.copy(), format="yuv420p")
        colour = self.fmt.colour
        frame.colorspace, frame.color_range = colour.colorspace, colour.color_range
        if meta.pts is None:
            frame.pts, frame.time_base = self._next_pts, self.video.codec_context.time_base
        else:
            frame.pts, frame.time_base = meta.pts, meta.time_base
        self._next_pts = frame.pts + 1
        self._mux(self.video.encode(frame))

    def write_audio(self, packet: av.Packet) -> None:
        out = self.audio.get(packet.stream.index)
        if out is not None:
            packet.stream = out
            self._mux([packet])

    def _mux(self, packets) -> None:
        try:
            self.container.mux(packets)
        except (OSError, av.error.FFmpegError) as e:
            raise OutputError(f"{self.target}: write failed: {e}") from e

    def finish(self) -> None:
        """Flush the encoder, finalise the container and move it into place."""
        try:
            self._mux(self.video.encode(None))
            self.container.close()
        except (OSError, av.error.FFmpegError) as e:
            self.abort()
            raise OutputError(f"{self.target}: cannot finalise output: {e}") from e
        os.replace(self.tmp, self.target)

    def abort(self) -> None:
        """Drop the partial output: the target is left as it was."""
        try:
            self.container.close()
        except Exception:
            pass  # the file is deleted next; a close error adds nothing
        self.tmp.unlink(missing_ok=True)
