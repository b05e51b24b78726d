"""Output: PyAV encode and mux into a temporary file beside the target, renamed into place on success.

Video frames are built zero-copy over the host slot (``VideoFrame.from_numpy_buffer``); the slot stays
busy until the encoder lets go of the frame (see :meth:`HostSlot.lend`). 10-bit frames (``yuv420p10le``,
which PyAV cannot wrap) are copied into a frame of their own. Audio packets are copied as they are.

HDR metadata of the input (mastering display, content light level) is written through the encoder's own
parameters where it has them (x265, x264, SVT-AV1: see :mod:`pipeline.hdr`), merged with the user's; other
encoders cannot carry it, and a notice says so.

Rotation is kept, not applied: pixels are encoded as stored and the input's display matrix is written
to the output stream, so a player shows the output turned exactly as it showed the input. Applying
it would cost a transpose per frame and change the frame size for 90/270 degrees, for no gain.

A run killed outright (SIGKILL, power loss) leaves only the temporary file, never a truncated target;
the next run into the same directory removes such leftovers of processes that no longer exist.

A URL output (``udp://``, ``rtmp://``, ``srt://``...) is a live stream: it is written directly (there is
nothing to rename), the muxer comes from ``--format`` or else the scheme (MPEG-TS for udp/tcp/srt, FLV
for rtmp), and connecting is bounded by the timeout. A pipe (``-o -``, ``pipe:N``) is written directly
too, with the muxer ``--format`` names, by the sink itself (:class:`~pipeline.pipeout.PipeWriter`, so
that no write error goes unseen); MP4 and MOV are written fragmented there.
"""

from __future__ import annotations

import contextlib
import errno
import re
import weakref
from fractions import Fraction
from pathlib import Path
from typing import Callable

import av
import numpy as np

from .audio_out import AudioOut
from .avlib import captured_stderr, flush_encoder, library_errors, quiet_encoder, route_ffmpeg_log, watch
from .config import file_url, is_url, pipe_fd
from .convert.layouts import layout_depth
from .encoders import (aspect_lost, encoder_without_threads, is_hardware, opens_on_one_thread, output_format, refusal,
                       repair_short_x265_dts, size_refusal, video_encoder)
from .encoders import time_base as encoder_time_base
from .durations import FrameDurations
from .encoder_frames import EncoderFrames
from .errors import ConfigError, OutputError, PipelineError
from .log import log
from .muxers import COMMON, carries_video, codec_name, containers_for, raw_format_refusal, without_video
from .outfile import final_path, staged
from .pipeout import PipeWriter, check_pipe_audio, pipe_muxer_options
from .protocols import url_muxer
from .sinkopts import (check_encoder_options, check_muxer_options, check_params_parsed, interleaving, muxer_options,
                       with_hdr)
from .tags import fitting
from .video import FrameMeta, StreamInfo

def i420_frame(i420: np.ndarray, fmt, zero_copy: bool) -> av.VideoFrame:
    """A yuv420p frame over ``i420`` (wrapped when ``zero_copy``), or copied into a frame of its own when
    PyAV cannot wrap it: ``from_numpy_buffer`` takes the height as a multiple of 4 (rows // 6 * 4), so a
    frame 2 rows high came out 0 rows high (encoding failed) and one 54 rows high 52 (silently rescaled).
    uint16 samples make a yuv420p10le frame, always copied (``from_numpy_buffer`` does not take 10 bits)."""
    if i420.dtype == np.uint16:
        return _copied_frame(i420, fmt, "yuv420p10le")
    if fmt.height % 4 == 0:
        return av.VideoFrame.from_numpy_buffer(i420 if zero_copy else i420.copy(), format="yuv420p")
    return _copied_frame(i420, fmt, "yuv420p")


def _copied_frame(i420: np.ndarray, fmt, pix_fmt: str) -> av.VideoFrame:
    frame = av.VideoFrame(fmt.width, fmt.height, pix_fmt)
    for plane, source in zip(frame.planes, fmt.planes(i420.reshape(-1))):
        rows, cols = source.shape
        np.frombuffer(plane, source.dtype).reshape(-1, plane.line_size // source.itemsize)[:rows, :cols] = source
    return frame


def _output_format(codec: str, pix_fmt: str | None, depth: int) -> tuple[str, str, str | None]:
    return output_format(video_encoder(codec), pix_fmt, depth)


class Sink:
    """A PyAV encoder and muxer: I420 host frames in (8-bit wrapped, not copied; 10-bit copied), packets out.

    ``info`` describes the video written (size after the filter chain, the input's clock, rotation, HDR
    metadata); ``audio`` is the source's passthrough object (:class:`pipeline.source.AudioTracks`) or None.
    ``pix_fmt``: the encoder's pixel format (None: chosen for the frames' depth, see
    :func:`~pipeline.encoders.output_format`); ``layout`` is then what the sink takes, ``i420`` or ``i420p10``.
    """

    residence = "host"

    def __init__(self, target: Path | str, info: StreamInfo, *, codec: str, options: dict[str, str],
                 audio=None, output_format: str | None = None, output_opts: dict[str, str] | None = None,
                 timeout: float | None = None, low_latency: bool = False, overwrite: bool = False,
                 audio_mode: str = "copy", pix_fmt: str | None = None):
        fmt, rate, time_base = info.format, info.frame_rate, info.time_base
        route_ffmpeg_log()
        self.target = target
        self.low_latency = low_latency
        self.overwrite = overwrite  # at the final rename: replace a target that appeared during the run
        self.url = is_url(str(target))
        self.pipe = pipe_fd(str(target), 1) is not None  # stdout: written directly too
        self._writer = PipeWriter(pipe_fd(str(target), 1)) if self.pipe else None
        self.final: Path | None = None if self.url or self.pipe else final_path(Path(target))  # a link's file
        self.staged = None if self.final is None else staged(self.final, output_format)
        self.pix_fmt, self.layout, notice = _output_format(codec, pix_fmt, fmt.depth)
        if notice:
            log.info(f"{target}: {notice}")
        self.fmt = fmt.with_depth(layout_depth(self.layout))
        self._next_pts = 0
        self._encoded = 0  # frames the encoder took
        self._durations = FrameDurations()
        self._encoder_said = None
        self._frames = EncoderFrames(self.pix_fmt, self.fmt.colour, target)
        self.audio_out: AudioOut | None = None
        self.zero_copy = True  # cleared by the engine if the encoder keeps references to our frames
        # Called with the timestamps (seconds) of the video packets each encode returned: latency.
        self.on_packets: Callable[[list[float | None]], None] | None = None
        self._output_opts = dict(output_opts or {})  # named again if the muxer refuses them only at the end
        with_audio = audio is not None and bool(audio.templates)
        muxer_opts = interleaving(output_opts or {}, rate, with_audio and not low_latency)
        self.container = self._open(output_format, muxer_opts, time_base, timeout)
        if self.staged is not None:  # a sink built and never run or aborted (an API user's) leaves no file
            weakref.finalize(self, self.staged.discard)
        # Nor a descriptor: a started container and its streams refer to each other, a cycle the collector
        # cannot break, so a dropped one stays open. Not at the interpreter's exit, which closes it anyway,
        # and where a thread may still be writing into it.
        weakref.finalize(self, _close_quietly, self.container).atexit = False
        try:
            muxer = self.container.format.name
            check_muxer_options(target, muxer, output_opts or {})
            self.video = self._add_video(codec, with_hdr(codec, options, info.hdr, target), rate, time_base)
            if info.display_matrix is not None:
                self.video.set_display_matrix(info.display_matrix)
            self.container.metadata.update(fitting(info.tags, muxer, target))
            self.video.metadata.update(fitting(info.video_tags, muxer, target))
            if info.sar is not None:  # in the bitstream where the codec codes it (H.264's VUI), else the container's
                self.video.codec_context.sample_aspect_ratio = info.sar
                if (why := aspect_lost(muxer, self.video.codec_context.codec, info.sar)):
                    log.info(f"{target}: {why}")
            templates = audio.templates if audio else ()
            if self.pipe:
                check_pipe_audio(target, muxer, templates)
            self.audio_out = AudioOut.build(self.container, templates, audio_mode, target)
            self._start()
            for notice in self._frames.notices:
                log.info(notice)
            for notice in self.audio_out.notices:
                log.info(f"{target}: {notice}")
            self._check_written()
            check_encoder_options(target, self.video.codec_context, options)
            check_params_parsed(target, self.video.codec_context.name, options, self._encoder_said)
        except BaseException:
            self.abort()
            raise

    def _open(self, output_format, output_opts, time_base, timeout):
        target = self.target
        if self.pipe:
            return self._open_pipe(output_format, output_opts, time_base)
        muxer = url_muxer(target, output_format) if self.url else output_format
        try:
            if self.url:
                kwargs = {"timeout": (timeout, timeout)} if timeout else {}
                return av.open(target, "w", format=muxer, container_options=output_opts, **kwargs)
            options = muxer_options(Path(target), time_base, output_opts)
            try:  # prepare() opens the directory and creates the file: a failure or a stop after it leaks neither
                self.staged.prepare()
                return av.open(file_url(self.staged.muxer_path), "w", format=muxer, container_options=options)
            except BaseException:
                self.staged.discard()
                raise
        except ConfigError:  # the output's own (another run of this process writes it): says it all
            raise
        except ValueError as e:  # unknown container for this extension, or an unknown --format
            if muxer:
                raise ConfigError(f"{target}: invalid --format {muxer!r} ({e})") from e
            raise ConfigError(f"{target}: cannot choose an output format from the name ({e}); "
                              "give one with --format") from e
        except av.error.ExitError as e:
            raise OutputError(f"{target}: cannot connect within {timeout:g} s") from e
        except (OSError, av.error.FFmpegError) as e:
            raise OutputError(f"{target}: cannot create output: {e}") from e

    def _open_pipe(self, muxer: str, output_opts: dict[str, str], time_base):
        """A pipe (``-o -``): the muxer is ``--format`` (the config refuses a pipe without one)."""
        options = {**pipe_muxer_options(muxer, time_base), **output_opts}
        try:
            return av.open(self._writer, "w", format=muxer, container_options=options)
        except ValueError as e:
            raise ConfigError(f"{self.target}: invalid --format {muxer!r} ({e})") from e
        except (OSError, av.error.FFmpegError) as e:
            raise OutputError(f"{self.target}: cannot open for writing: {e}") from e

    def _start(self) -> None:
        """Open the encoder and write the header now, not at the first packet: a container that cannot
        hold a stream (PCM audio in MP4) or a bad encoder option is refused before any frame is done."""
        printed: list[str] = []
        cc = self.video.codec_context
        # Named before the open: after an encoder refused it, PyAV 19 reads its name through a codec pointer
        # FFmpeg 8 has cleared (dnxhd at 64x48 crashed the process there).
        name = cc.name
        # What each encoder is asked, read before the open too (a refusal clears the size).
        asked = {s.codec_context.name: _asked(s) for s in self.container.streams}
        time_base = cc.time_base or 1 / Fraction(cc.framerate or 30)  # none yet for a variable-rate muxer's input
        settings = (cc.width, cc.height, cc.pix_fmt, time_base, dict(self.video.options))
        streams = ", ".join(f"{s.type} {s.codec_context.name}" for s in self.container.streams)
        # The encoders' and the muxer's own reasons (a frame-threaded encoder only says its init failed).
        said = watch({*asked, self.container.format.name})
        # Not skipped as a repeat of an earlier run's in this process: an encoder's warnings (x264-params) count.
        repeated = av.logging.get_skip_repeated()
        av.logging.set_skip_repeated(False)
        try:
            with captured_stderr() as printed:  # x264, x265, SVT-AV1 print there themselves
                self._open_encoders()
        except (OSError, ValueError, av.error.FFmpegError) as e:
            try:
                error = self._open_failure(e, name, asked, settings, said, printed, streams)
            finally:
                said.close()
            raise error from e
        except BaseException:
            said.close()
            raise
        finally:
            av.logging.set_skip_repeated(repeated)
        self._encoder_said = said  # kept until the first frame is taken: its refusal has reasons too

    def _open_failure(self, e: Exception, name: str, asked: dict[str, str], settings: tuple, said,
                      printed: list[str], streams: str) -> PipelineError:
        """Why the header could not be written: an encoder's refusal (which encoder: FFmpeg names it in
        the failed call), the threads the video encoder could not start, the output, or the muxer."""
        failed, lines, muxer = _FAILED_OPEN.search(str(e)), said.take(), self.container.format.name
        if failed is not None:  # an encoder's refusal (a hardware one's absence is an OSError)
            encoder = failed.group(1)
            reasons = "; ".join(r for r in [m for who, level, m in lines if level >= 40 and who == encoder]
                                + [library_errors(printed)] if r).replace(":; ", ": ")  # "layouts:", then each
            if (encoder == name and not reasons and isinstance(e, av.error.ExternalError) and not is_hardware(name)
                    and opens_on_one_thread(name, *settings)):
                return encoder_without_threads(name, e).with_target(self.target)
            return refusal(encoder, e, reasons, asked.get(encoder, "its settings")).with_target(self.target)
        if (bad := _OPTION_VALUE.search(str(e))) is not None:  # av_opt_set refused it: EINVAL
            value = self._output_opts.get(bad.group(1), bad.group(2))  # as given (movflags gets write_colr added)
            return ConfigError(f"{self.target}: --output-opt {bad.group(1)}={value}: the {muxer} muxer "
                               "cannot take this value")
        # The muxer's own refusal (SWF takes FLV video, MXF 48 kHz audio): EPERM or EINVAL with its reason.
        refused = "; ".join(m for who, level, m in lines if level >= 40 and who == muxer)
        if isinstance(e, OSError) and not (refused and e.errno in (errno.EPERM, errno.EINVAL, errno.ENOSYS)):
            return OutputError(f"{self.target}: cannot create output: {e}")
        return ConfigError(f"{self.target}: cannot write {streams} as {muxer} with these options ("
                           f"{refused or e}); try {self._other_muxers(name, muxer)} or --output-opt")

    def _other_muxers(self, encoder: str, muxer: str) -> str:
        """Other outputs to suggest, of those that carry ``encoder``'s video: extensions for a file, ``-f``
        names for a pipe or URL; never the muxer that just refused."""
        fits = [suffix for suffix in containers_for(encoder) if COMMON[suffix] != muxer]
        if self.staged is not None:
            return f"another output extension ({', '.join(fits)})" if fits else "another output extension"
        return f"another -f ({', '.join(COMMON[suffix] for suffix in fits)})" if fits else "another -f"

    def _open_encoders(self) -> None:
        self.container.start_encoding()  # opens every stream's encoder and writes the header

    def _add_video(self, codec, options, rate, time_base):
        encoder = video_encoder(codec)
        if (why := without_video(self.container)) is not None:
            raise ConfigError(f"{self.target}: {why}")
        try:
            if not carries_video(self.container, codec_name(encoder)):
                raise ValueError("it writes no readable stream of this codec")
            stream = self.container.add_stream(codec, rate=rate or Fraction(30))
        except (ValueError, av.error.FFmpegError) as e:
            muxer, fits = self.container.format.name, containers_for(encoder.name)
            raise ConfigError(f"{self.target}: the {muxer} muxer cannot hold {encoder.name} video"
                              + (f"; these can: {', '.join(fits)}" if fits else f" ({e})")) from e
        if (why := raw_format_refusal(self.container.format.name, encoder.name, self.pix_fmt)) is not None:
            raise ConfigError(f"{self.target}: {why}")
        if (why := size_refusal(encoder.name, self.fmt.width, self.fmt.height)) is not None:
            raise ConfigError(f"{self.target}: {why}")
        stream.width, stream.height = self.fmt.width, self.fmt.height
        stream.pix_fmt = self.pix_fmt  # converted by swscale from the frames' I420 where it differs
        stream.options = quiet_encoder(stream.codec_context.name, options)
        # Frame threads hold back one frame per thread (24 at 16 cores: 0.4 s at 60 fps), and FFmpeg's
        # libx264 wrapper picks them over x264's own sliced threads (tune=zerolatency) whenever
        # thread_type includes FRAME. Live and paced runs want each packet out at once: slices only.
        stream.thread_type = "SLICE" if self.low_latency else "AUTO"
        # The input's clock where the encoder and muxer take it, so every pts survives (VFR included).
        try:
            tb = encoder_time_base(stream.codec_context.codec, Fraction(rate or 30), time_base,
                                   self.container.format.flags)
        except ConfigError as e:
            raise e.with_target(self.target) from None
        if tb:
            stream.time_base = tb
            stream.codec_context.time_base = tb
            if tb != time_base:
                stream.codec_context.framerate = 1 / tb
        self._frames.tag_stream(stream.codec_context, self.container.format.name)
        return stream

    def write_video(self, i420: np.ndarray, meta: FrameMeta) -> None:
        """Encode one I420 frame; ``i420`` must already have the shape ``fmt.shape`` (8-bit: it is wrapped, not
        copied; 10-bit: uint16 samples)."""
        frame = i420_frame(i420, self.fmt, self.zero_copy)
        colour = self.fmt.colour
        frame.colorspace, frame.color_range = colour.frame_colorspace, colour.color_range
        # Encoders that code the primaries and transfer per frame (ProRes) read them from the frame.
        frame.color_primaries, frame.color_trc = colour.color_primaries, colour.color_trc
        frame = self._frames.convert(frame)
        frame.pts, frame.time_base = self._timestamp(meta)
        self._next_pts = frame.pts + 1
        self._durations.note(frame.pts, meta.duration, meta.time_base)
        try:
            packets = self.video.encode(frame)
        except av.error.FFmpegError as e:
            if self._encoded == 0:  # the encoder refuses our frames themselves (a size it cannot code)
                cc = self.video.codec_context
                reasons = "; ".join(m for who, level, m in self._encoder_said.take() if level >= 30 and who == cc.name)
                raise refusal(cc.name, e, reasons, f"{cc.width}x{cc.height} {cc.pix_fmt} frames").with_target(
                    self.target) from e
            raise OutputError(f"{self.target}: encoding failed: {e}") from e
        if self._encoded == 0:
            self._encoder_said.close()
        self._encoded += 1
        self._mux_video(packets)

    def _timestamp(self, meta: FrameMeta) -> tuple[int, Fraction]:
        """The frame's pts in the encoder's time base where that is not the input's (1/rate for MPEG-2 or
        AVI): rounded, and kept increasing, since two input frames may fall on one tick."""
        tb = self.video.codec_context.time_base
        if meta.pts is None:
            return self._next_pts, tb
        if meta.time_base is None or Fraction(meta.time_base) == tb:
            return meta.pts, meta.time_base
        pts = round(Fraction(meta.pts) * Fraction(meta.time_base) / tb)
        return (max(pts, self._next_pts) if self._encoded else pts), tb

    def _report(self, packets) -> None:
        if self.on_packets is not None and packets:
            self.on_packets([None if p.pts is None or p.time_base is None else float(p.pts * p.time_base)
                             for p in packets])

    def write_audio(self, packet: av.Packet) -> bool:
        """Copy (or encode, see :mod:`pipeline.audio_out`) one packet; False if dropped as damaged."""
        return self.audio_out.write(packet)

    @property
    def audio_dropped(self) -> int:
        return self.audio_out.dropped if self.audio_out is not None else 0

    def _mux_video(self, packets) -> None:
        self._durations.apply(packets)
        self._mux(packets)
        self._report(packets)

    def _mux(self, packets) -> None:
        try:
            self.container.mux(packets)
        except (OSError, av.error.FFmpegError) as e:
            raise OutputError(f"{self.target}: write failed: {e}") from e
        self._check_written()

    def _check_written(self) -> None:
        """A pipe's write error, which FFmpeg did not see (see :class:`~pipeline.pipeout.PipeWriter`)."""
        error = self._writer.error if self._writer is not None else None
        if error is not None:
            raise OutputError(f"{self.target}: write failed: {error.strerror or error}")

    def finish(self) -> None:
        """Flush the encoder, finalise the container and move it into place; on failure, no output."""
        try:
            packets = flush_encoder(self.video)
            repair_short_x265_dts(self.video.codec_context.name, self._encoded, packets)
            self._mux_video(packets)
            self.audio_out.flush()
            self.container.close()
            self._check_written()
            if self.staged is not None:
                self.staged.place(self.overwrite, self.target)
        except OutputError:
            self.abort()
            raise
        except (OSError, av.error.FFmpegError) as e:
            self.abort()
            raise self._finish_failure(e) from e
        except BaseException:  # the API caller's Ctrl-C mid-flush: the file is not whole, so none is kept
            self.abort()
            raise

    def _finish_failure(self, e: Exception) -> PipelineError:
        """Why the trailer could not be written. The space an option reserved for the index turning out too
        small for this file (the muxer says EINVAL) is that option's fault, a usage error, not the disk's."""
        asked = [f"{k}={v}" for k, v in self._output_opts.items() if k in RESERVES_INDEX_SPACE]
        if asked and getattr(e, "errno", None) == errno.EINVAL:
            muxer = self.container.format.name
            why = e.log[2].strip() if _logged(e) else "the space it reserves for the index is too small"
            return ConfigError(f"{self.target}: the {muxer} muxer could not finish the file with --output-opt "
                               f"{' '.join(asked)} ({why}); output removed")
        return OutputError(f"{self.target}: cannot finalise output: {e}")

    def abort(self) -> None:
        """Drop the partial output: the target is left as it was."""
        if getattr(self, "_encoder_said", None) is not None:
            self._encoder_said.close()
        if self.staged is not None:  # first: closing flushes the encoder, which may hang on a stuck GPU
            self.staged.discard()
        _close_quietly(self.container)


def _close_quietly(container) -> None:
    with contextlib.suppress(Exception):  # closed already, or its file gone: a close error adds nothing
        container.close()


# Muxer options that reserve room for the index at the header, found too small only at the trailer.
RESERVES_INDEX_SPACE = frozenset({"moov_size", "reserve_index_space"})


def _logged(e: Exception) -> bool:
    """PyAV's error carries FFmpeg's last error line as (level, who, message)."""
    log = getattr(e, "log", None)
    return isinstance(log, tuple) and len(log) == 3 and bool(log[2])


_FAILED_OPEN = re.compile(r'avcodec_open2\("([^"]+)"')  # PyAV names the call that failed, and its encoder
_OPTION_VALUE = re.compile(r"Error setting option (\S+) to value (.*?)\.?$", re.M)  # a muxer's, at the header


def _asked(stream) -> str:
    """What a stream's encoder is asked to take, for the line that says it refused."""
    cc = stream.codec_context
    if stream.type == "audio":
        return f"{cc.layout.name} audio at {cc.sample_rate} Hz"
    return f"{cc.width}x{cc.height} {cc.pix_fmt} with time base {cc.time_base}"
