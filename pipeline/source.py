"""Input: PyAV demux and threaded decode; each frame's planes are copied once into a host slot, in the
layout the first frame chose (I420, 10-bit I420 or RGB: see :mod:`pipeline.ingest`).

The only module besides the sink that imports ``av``.

Damaged input is survived rather than refused, unless ``strict``: a packet the decoder rejects is
counted (``decode_errors``) and skipped, a frame the decoder concealed is counted (``corrupt_frames``)
and processed, a read error or early end of file ends the input with a warning (a last video packet cut
short by it is dropped, not decoded: see ``DecodeLoop._without_cut_tail``). Timestamps are kept
as they are, except that a missing, non-increasing or wildly jumping one is moved (see ``_Clock``) so
the encoder and muxer, which require strictly increasing timestamps, never fail on an input's fault.

Live inputs (a network URL or a capture device, see :func:`is_live_input`) are opened with open and
read timeouts, so no read blocks for longer than ``timeout``; a read that times out or fails drains
the decoder (the frames it holds are kept) and raises :class:`SourceStalled`; the reader thread
(:mod:`pipeline.live`) then calls :meth:`Source.reopen` or gives up. The decoder uses slice threads
only: frame threads would hold back one frame per thread, latency a camera feed cannot afford.

stdin (``-``, ``pipe:``) is a stream read as it comes, like a file without seeking or a frame count. A
span (``-ss``/``-t``/``-to``, :mod:`pipeline.span`) is cut here: frames and audio packets outside it are
dropped, the ones kept have their timestamps moved as it says.

This module opens the input, probes it (the first frame decides the layout), reconnects a live one and
copies frames into host slots; the demux and decode loop that does the above to each packet and frame,
with the clock, is :mod:`pipeline.decode`.
"""

from __future__ import annotations

import errno
import itertools
import logging
import weakref
from fractions import Fraction
from typing import Callable, Iterator

import av
import numpy as np

from .avlib import drain_decoder, route_ffmpeg_log
from .config import is_url, pipe_fd
from .damage import DamageLog
from .decode import (MAX_GAP_S, AudioPacket, DecodedFrame, DecodeLoop, FrameReturns, _BestEffort, _Clock, _frame_step,
                     _stream_desc, _ticks, frame_rate)
from .errors import ConfigError, InputError, no_threads
from .ingest import (SlotWriter, display_matrix, host_layout, input_format, read_hdr, refuse_deep_surfaces,
                     surface_layout)
from .inputnotes import interlaced, other_video_streams, streams_left_out
from .log import log
from .opening import open_file, open_input
from .seek import NO_TIMESTAMPS, seek_before
from .span import Span
from .tags import tags_of
from .video import StreamInfo, VideoFormat, check_frame_size, pixel_aspect

# How much of a live stream FFmpeg analyses before the first frame (its defaults: 5 s and 5 MB). The
# stream is read from its start anyway, and frames that arrive during the probe come out in a burst that
# a drop policy would thin: 100 ms keeps that backlog to a few frames. --input-opt overrides either key.
LIVE_PROBE = {"analyzeduration": "100000", "probesize": "1000000"}

# Demuxers that read a capture device rather than a file: live, like a network stream.
CAPTURE_FORMATS = frozenset({"v4l2", "video4linux2", "avfoundation", "dshow", "gdigrab", "x11grab", "kmsgrab",
                             "fbdev", "decklink", "android_camera"})


def is_live_input(path: str, input_format: str | None = None) -> bool:
    """A network stream (any URL but ``file:``) or a capture device: it delivers frames at its own pace,
    may stall, and cannot be asked to wait."""
    if input_format in CAPTURE_FORMATS:
        return True
    return is_url(path) and not path.lower().startswith("file:")


class AudioTracks:
    """The input's audio streams, passed through unchanged: what a sink needs to copy them (their
    parameters as templates for its own streams), so that no PyAV stream crosses the engine."""

    def __init__(self, streams: list):
        self.templates = list(streams)

    def __bool__(self) -> bool:
        return bool(self.templates)


class Source(DecodeLoop):
    """An opened input: its video stream (decoded), its audio streams (passed through as packets).

    ``hwaccel`` (a PyAV ``HWAccel``, see :mod:`pipeline.nvdec`): decode on the GPU, frames left in device
    memory (``layout`` "nv12", or "p010" for 10-bit: the processor reads the surfaces in place). Without it
    frames are decoded on the CPU and copied into host slots (:meth:`copy_into`) of the layout the first
    frame chose: "i420", "i420p10" (deeper than 8 bits) or "rgb24" (RGB and grey input).
    """

    def __init__(self, path: str, *, strict: bool = False,
                 input_format: str | None = None, options: dict[str, str] | None = None,
                 timeout: float | None = None, live: bool | None = None, hwaccel=None, span: Span | None = None,
                 decode_sessions: int = 1, make_current: Callable[[], None] | None = None, decoders=None,
                 headers_only: bool = False, first_frame_first: bool = True):
        self.path = path
        self._headers_only = headers_only  # see pipeline.opening.open_input
        self._first_frame_first = first_frame_first  # see pipeline.gops.GopDecoders
        self._decoders = decoders  # a DecoderPool: NVDEC decoders kept between runs (see _open_sessions)
        self.decoders_reused = 0
        route_ffmpeg_log()
        self.hwaccel = hwaccel
        self.returns = FrameReturns() if hwaccel is not None else None  # see FrameReturns
        self.layout = "nv12" if hwaccel is not None else "i420"  # until the first frame says (_probe)
        self.hdr = None
        self._held: list[tuple[int, str]] | None = []  # notices while opening: shown only if the input is usable
        self.strict = strict
        self.live = is_live_input(path, input_format) if live is None else live
        self.input_format, self.options = input_format, dict(options or {})
        if self.live:  # a short probe: what arrives meanwhile is a backlog the pipeline must catch up on
            self.options = {**LIVE_PROBE, **self.options}
        self.timeout = timeout if self.live else None
        self.decode_errors = 0  # packets the decoder rejected (skipped)
        self.last_rejection = ""  # what the decoder said of the last one
        self.last_rejection_errno: int | None = None
        self.corrupt_frames = 0  # frames the decoder concealed errors in (processed)
        self.retimed_frames = 0  # frames whose timestamp went backwards or jumped (see _Clock)
        self._index = 0  # frames decoded, across reconnections
        self.container = self._open()
        try:
            self.video = self._video_stream()
            self._damage = DamageLog(path, self.container.format.name, self.video.codec_context.name)
            self.audio_streams = self._audio_streams()
            self._origin = _start_time(self.container)
            # A raw stream (H.264, HEVC) carries no timestamps: the clock times it, at the rate its headers
            # give unless the raw demuxer was told one (--input-opt framerate=50).
            self._headers_rate = bool(self.container.format.flags & NO_TIMESTAMPS) and "framerate" not in self.options
            self._trim = span.bind(self._origin) if span is not None else None
            self._shifts: dict[Fraction, int] = {}  # per time base: where the output's timestamps start
            self._seek_to_start()
            if decode_sessions > 1 and hwaccel is not None:
                self._open_sessions(decode_sessions, make_current or (lambda: None))
            self._pending: list[DecodedFrame | AudioPacket] = []  # read while probing, replayed by items()
            self._best_effort = _BestEffort()
            self._clock = _Clock(_frame_step(self.video, self._headers_rate), _ticks(self.video, MAX_GAP_S))
            self._frames = self._decode()
            self.format, self.display_matrix = self._probe()
        except BaseException:
            self._decoders = None  # a source that failed to open (a stream NVDEC refused) gives no decoder back
            self.close()
            raise  # its one line says it all; the warnings held back would only repeat it
        held, self._held = self._held, None
        for level, message in held:
            log.log(level, message)
        self._writer = SlotWriter(path, self.layout, self.format, _held_weakly(self.notice))

    def _video_stream(self):
        videos = self.container.streams.video
        if not videos:
            raise InputError(f"{self.path}: no video stream")
        video = videos[0]
        if video.codec_context is None:
            raise InputError(f"{self.path}: no decoder for the video stream (unknown or unsupported codec)")
        if self._held is not None:  # once: not again at each reconnection
            for note in (other_video_streams(self.path, list(videos), video),
                         streams_left_out(self.path, self.container.streams)):
                if note:
                    self.notice(note)
        # Frame threads hold back frames (latency a camera cannot afford), hardware decoding needs none
        # (the GPU decodes, the CPU only parses), and with --strict a decoder error must be the packet's
        # own, not a later one's.
        self.frame_threads = not (self.live or self.hwaccel is not None or self.strict)
        video.thread_type = "AUTO" if self.frame_threads else "SLICE"
        if self.hwaccel is not None:
            video.thread_count = 1  # the GPU decodes: one parsing thread each, not one per core per stream
            refuse_deep_surfaces(self.path, video)
        return video

    @property
    def decode_sessions(self) -> int:
        return self._gops.sessions if self._gops is not None else 1

    def _open_sessions(self, sessions: int, make_current: Callable[[], None]) -> None:
        """The sessions' decoders: this container's and others made from the stream's parameters (no second
        open or probe of the file: the packets come from this container's demuxer), or with a pool of
        decoders (:class:`~pipeline.nvdec.DecoderPool`) those a previous run of such a stream left, the
        rest made. Fewer sessions if the GPU refuses more."""
        from .gops import GopDecoders

        first = self.video.codec_context
        if self._decoders is not None:
            contexts = self._decoders.take(self._decoders.key(first, self.hwaccel), sessions)
            self.decoders_reused = len(contexts)
        else:
            contexts = [first]
        while len(contexts) < sessions:
            try:
                ctx = av.CodecContext.create(first.name, "r", hwaccel=self.hwaccel)
                ctx.extradata = first.extradata
                ctx.thread_type, ctx.thread_count = "SLICE", 1
                ctx.open()  # the device context now; NVDEC's own decoder at the first packet, in its session
            except (av.error.FFmpegError, OSError, ValueError) as e:
                log.debug(f"{self.path}: {len(contexts)} NVDEC sessions, not {sessions}: {e}")
                break
            contexts.append(ctx)
        if len(contexts) > 1 or self._decoders is not None and contexts:
            self._gops = GopDecoders(contexts, lookahead=_lookahead(self.video), make_current=make_current,
                                     first_frame_first=self._first_frame_first)
            self.returns = self._gops.returns

    def _close_sessions(self) -> None:
        gops, self._gops = self._gops, None
        if gops is None:
            return
        clean = gops.close()
        if self._decoders is not None and clean:
            self._decoders.give(self._decoders.key(self.video.codec_context, self.hwaccel), clean)

    def _open(self):
        fd = pipe_fd(self.path)
        if fd is not None:  # stdin: a stream, read as it comes; nothing on disk to check
            return open_input(f"pipe:{fd}", self.input_format, self.options, self.timeout, local=False,
                              hwaccel=self.hwaccel)
        if not (self.live or self.input_format or self.options or is_url(self.path) or self.hwaccel):
            return open_file(self.path)
        return open_input(self.path, self.input_format, self.options, self.timeout, local=not is_url(self.path),
                          hwaccel=self.hwaccel, headers_only=self._headers_only)

    def reopen(self) -> None:
        """Open a live input again after a stall (called by the reader thread, which owns the container).

        Frames keep the first connection's size (copy_into scales) and clock (``_Clock`` moves a
        timestamp that restarts or jumps), so the output continues as one stream."""
        try:
            self.container.close()
        except (OSError, av.error.FFmpegError):
            pass  # a connection that just failed may fail to close too; it is replaced either way
        self.container = self._open()
        try:
            self.video = self._video_stream()
            self.audio_streams = self._audio_streams()
        except BaseException:
            self.container.close()
            raise
        self._best_effort = _BestEffort()  # a new decoder's: FFmpeg counts its faulty timestamps per decoder
        self._frames = self._decode()

    def _audio_streams(self) -> list:
        """Audio streams to copy. One without a sample rate or channels (a damaged or phantom stream)
        would make the output's header unwritable, failing the whole run: it is left out instead."""
        usable = []
        for s in self.container.streams.audio:
            cc = s.codec_context
            if cc is not None and cc.sample_rate > 0 and cc.channels > 0:
                usable.append(s)
            else:
                self.warn(f"{self.path}: audio stream #{s.index} has no decoder, sample rate or "
                            "channels (damaged?); not copied")
        return usable

    def notice(self, message: str, level: int = logging.INFO) -> None:
        if self._held is not None:
            self._held.append((level, message))
        else:
            log.log(level, message)

    def warn(self, message: str) -> None:
        self.notice(message, logging.WARNING)

    @property
    def frame_rate(self):
        return frame_rate(self.video, self._headers_rate)

    @property
    def info(self) -> StreamInfo:
        return StreamInfo(self.format, self.frame_rate, self.video.time_base, None if self.live else self.expected_frames,
                          self.display_matrix, self.live, self.path, self.hdr, self.sar, self.tags, self.video_tags)

    @property
    def audio(self) -> AudioTracks:
        return AudioTracks(self.audio_streams)

    @property
    def expected_frames(self) -> int | None:
        frames = self.video.frames or None
        if frames is None or self._trim is None:
            return frames
        return self._trim.expected_frames(frames, self.frame_rate, self._origin)

    def _seek_to_start(self) -> None:
        """With -ss on a file: jump to the keyframe before the start, checked (:mod:`pipeline.seek`); the
        frames up to the start are then decoded and dropped. A stream (stdin, a live source) cannot seek: it
        is decoded from where it is."""
        target = self._trim.seek_target(self._origin) if self._trim is not None else None
        if target is None or self.live or pipe_fd(self.path) is not None or not self.video.time_base:
            return
        try:
            self._replay = seek_before(self.container, self.video, self.audio_streams, target, self._trim.begin,
                                       self._origin)
        except av.error.FFmpegError as e:  # an input without an index: decoding from the beginning also works
            log.debug(f"{self.path}: cannot seek ({e}); decoding from the beginning to the start")

    def _probe(self) -> tuple[VideoFormat, tuple[int, ...] | None]:
        """The first frame decides the layout, format and HDR metadata of the whole stream."""
        first = self._first_frame().frame
        if self.hwaccel is not None:
            self.layout = surface_layout(self.path, first, lambda: _stream_desc(self.video))
        else:
            self.layout = host_layout(first.format)
        w, h = first.width, first.height
        check_frame_size(self.path, w, h)
        if w % 2 or h % 2:
            self.notice(f"{self.path}: odd frame size {w}x{h}; the last column/row is dropped for 4:2:0")
        if note := interlaced(self.path, first, self.video.codec_context.field_order):
            self.notice(note)
        self.hdr = read_hdr(first)
        # The container's ratio, else the bitstream's, as FFmpeg guesses it (the decoder has seen a frame).
        self.sar = pixel_aspect(self.video.sample_aspect_ratio)
        self.tags, self.video_tags = tags_of(self.container), tags_of(self.video)
        if self.hdr:
            log.debug(f"{self.path}: HDR metadata: {self.hdr.describe()}")
        return input_format(self.path, first, self.layout, self.notice), display_matrix(first)

    def _first_frame(self) -> DecodedFrame:
        for item in self._frames:
            self._pending.append(item)
            if isinstance(item, DecodedFrame):
                return item
        # Counted per refusal: a decoder working on several frames at once refuses a batch of packets once.
        last = f"; the last: {self.last_rejection}" if self.last_rejection else ""
        times = "once" if self.decode_errors == 1 else f"{self.decode_errors} times"
        errors = f" (decoding failed {times}{last})" if self.decode_errors else ""
        if self.last_rejection_errno == errno.EAGAIN:  # its frame threads could not start: not the input's fault
            raise no_threads(f"{self.path}: no frame decoded: the decoder could not start its threads "
                             f"({self.last_rejection}, {times})")
        if self._trim is not None and not errors:
            why = self._span_too_short() if self.span_ended else self._starts_past_the_end()
            raise ConfigError(f"{self.path}: no video frames in the span asked for (-ss/-t/-to): {why}")
        raise InputError(f"{self.path}: no decodable video frames{errors}")

    def _starts_past_the_end(self) -> str:
        if self.last_skipped is None:
            return "the input ends before it starts"
        return f"the input's last frame starts at {float(self.last_skipped - self._origin):.3f} s, before it"

    def _span_too_short(self) -> str:
        rate = self.frame_rate
        lasts = f" (a frame lasts {1000 / float(rate):.4g} ms)" if rate else ""
        return f"no frame starts within it{lasts}"

    def items(self, limit: int | None = None) -> Iterator[DecodedFrame | AudioPacket]:
        """Decoded video frames (first one included) and audio packets, in demux order."""
        count = 0
        for item in self.entries():
            if limit is not None and count >= limit:
                return
            yield item
            count += isinstance(item, DecodedFrame)

    def entries(self) -> Iterator[DecodedFrame | AudioPacket]:
        """Everything until the end of this connection: on a live input, ends by raising SourceStalled."""
        pending, self._pending = self._pending, []
        return itertools.chain(pending, self._frames)

    # -- into the host ring -----------------------------------------------------------------------

    def copy_into(self, frame: av.VideoFrame, dst: np.ndarray) -> None:
        """Copy one frame's planes into a host slot of :attr:`layout`, converting formats or sizes the kernels
        do not take."""
        self._writer(frame, dst)

    @property
    def frees_slowly(self) -> bool:
        """Closing frees NVDEC's surfaces one cudaFree at a time (see ``Pipeline._close_source``)."""
        return self.hwaccel is not None

    def leave_to_exit(self) -> Source:
        """What :meth:`close` does, except freeing the decoders and their surfaces: the sessions' threads
        stopped, the frames handed back let go. The process's exit frees the rest at once; until then the
        caller holds the source (returned)."""
        if self._gops is not None:
            self._gops.close()  # the threads end; the decoders stay, held by the sessions
        if self.returns is not None:
            self.returns.close()
        self._close_damage_log()
        return self

    def close(self) -> None:
        # The decode generator first: stopped part-way, it still holds the last frame it yielded, which would
        # keep that frame's session from giving its decoder back. Then the sessions, before the container's
        # decoder is drained: session 0 decodes with it.
        self._close_frames()
        self._close_sessions()
        # Frame threads (probing may have left them at work) may still take surfaces from the pool: frames
        # handed back are held till then. A source that failed before finding its stream has no decoder.
        drain_decoder(getattr(self, "video", None))
        if self.returns is not None:
            self.returns.close()
        self._close_damage_log()
        self.container.close()

    def _close_frames(self) -> None:
        """End the decode generator where it stopped, and let go of it: suspended, it holds this source in a
        reference cycle (its frame refers to the source, which refers to it) that only a collection would
        free, with the frames it read ahead. Closing it alone left the cycle on Python 3.12.3; without the
        source's reference the generator, then the source, go as soon as nothing else holds them."""
        self._pending = []
        frames, self._frames = getattr(self, "_frames", None), iter(())
        if frames is not None and hasattr(frames, "close"):  # closed before: the empty iterator left then
            try:
                frames.close()
            except ValueError:  # running in a live source's reader thread, which closes it when its read returns
                pass

    def _close_damage_log(self) -> None:
        damage = getattr(self, "_damage", None)
        if damage is not None:
            damage.close()


def _held_weakly(method: Callable) -> Callable:
    """``method``, not keeping its object alive: a part the source owns calling back into the source would
    otherwise make a reference cycle, which holds the decoder and its frames until a full collection."""
    ref = weakref.WeakMethod(method)

    def call(*args) -> None:
        bound = ref()
        if bound is not None:
            bound(*args)

    return call


def _lookahead(video) -> int:
    """Decoded surfaces each NVDEC session may hold ahead of the pipeline: about 256 MiB of NV12 each, 8 to 64."""
    cc = video.codec_context
    frame_bytes = max(1, cc.width * cc.height * 3 // 2)
    return max(8, min(64, (256 << 20) // frame_bytes))


def _start_time(container) -> Fraction:
    """The input's first timestamp, seconds: where -ss/-to count from, as ffmpeg counts them."""
    start = container.start_time  # microseconds (AV_TIME_BASE), None when unknown
    return Fraction(start, 1_000_000) if start is not None else Fraction(0)

