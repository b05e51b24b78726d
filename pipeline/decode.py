"""The source's demux and decode loop: packets read and decoded, damage counted (or fatal with ``strict``),
frames and audio packets cut to the span, and timestamps kept increasing (:class:`_Clock`).

Mixed into :class:`pipeline.source.Source`, which opens and probes the input and holds what this loop
reads (the container, the video stream, the span, the counters); kept apart so that what happens to each
packet and frame reads on its own, without the opening, probing and reconnection around it. Its entries,
:class:`DecodedFrame` and :class:`AudioPacket`, are what the engine receives.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable, Iterator, Sequence

import av

from .errors import DecoderRefused, InputError, SourceStalled
from .ingest import SURFACE_LAYOUT, OtherColour, refuse_deep_surfaces
from .log import log
from .span import SKIP, STOP, zero_shift
from .video import FrameMeta

# A gap between two frames longer than this is a discontinuity (a timestamp wrap or damage), not a
# pause: FFmpeg's own threshold for such jumps is 10 s; a minute leaves room for sparse VFR capture.
MAX_GAP_S = 60.0
# How far past a span's end the demuxer reads for that span's audio: FFmpeg's default max_interleave_delta.
MAX_INTERLEAVE_S = 10


@dataclass
class AudioPacket:
    packet: av.Packet


@dataclass
class DecodedFrame:
    frame: av.VideoFrame
    meta: FrameMeta


class FrameReturns:
    """Decoded frames whose last reference is dropped by the thread that decodes.

    A hardware decoder takes each new surface from FFmpeg's buffer pool holding the pool's lock, and may
    log meanwhile (a failed CUDA call), which takes the GIL in PyAV's log callback. Dropping a frame's last
    reference on another thread returns its buffer under the same lock while holding the GIL: each thread
    then waits for the other for ever (seen on the H200 with NVDEC, the encode thread freeing a surface while
    the decoder allocated one). So frames done with are handed in here (:meth:`take`) and the decoding
    thread drops them between packets (:meth:`drop`); once decoding has ended (:meth:`close`) nothing
    allocates from the pool any more and frames are dropped where they are handed in.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._held: list = []
        self._open = True

    def take(self, item) -> None:
        """Move ``item.surface`` (a decoded frame) in here; ``item`` keeps no reference to it."""
        frame, item.surface = item.surface, None
        self.hand_in(frame)

    def hand_in(self, frame) -> None:
        """Hold ``frame`` for the decoding thread; once decoding has ended, let it go here."""
        with self._lock:
            if self._open:
                self._held.append(frame)

    def drop(self) -> None:
        with self._lock:
            held, self._held = self._held, []
        del held  # the last references go on this thread

    def close(self) -> None:
        with self._lock:
            self._open = False
        self.drop()


class DecodeLoop:
    """Demux and decode for :class:`pipeline.source.Source`: entries in demux order, one connection's.
    ``_gops``: several NVDEC sessions decode the video packets (:mod:`pipeline.gops`), or None."""

    _gops = None
    frame_threads = False  # the video decoder runs frame threads (set by the source)
    span_ended = False  # a frame at or after -t/-to's end came: the span, not the input, ended the frames
    _replay: Sequence[av.Packet] = ()  # packets the demux gives first (pipeline.seek)
    last_skipped: Fraction | None = None  # the time (seconds) of the last frame before -ss's start
    _device_colour: OtherColour | None = None  # device frames: tags that change mid-stream, said once
    _colour_said = False

    def _decode(self) -> Iterator[DecodedFrame | AudioPacket]:
        video = self.video  # this connection's stream: a reopen replaces self.video
        packets = self._packets()
        if self.frame_threads:
            packets = self._without_cut_tail(packets, video)
        for packet in packets:
            self._damage.packet(packet)
            if packet.stream is not video:
                if packet.dts is not None and self._audio_in_span(packet):  # flush packets carry nothing to copy
                    yield AudioPacket(packet)
                continue
            for frame, decode_s in self._decode_packet(packet):
                if self.hwaccel is not None and self._index:
                    self._check_device_frame(frame)
                given = self._best_effort(frame.pts, frame.dts)
                pts = self._clock(given)  # every frame's, skipped or not: the clock counts frames without one
                # Judged by the timestamp it is written with: the span's first frame is written at 0 or after.
                time_base = frame.time_base or video.time_base
                verdict = self._trim.frame(pts, time_base) if self._trim else None
                if verdict == STOP:  # the span's end: no frame after it is wanted, some audio may be
                    self.span_ended = True
                    yield from self._audio_after_the_last_frame(packets, video)
                    return
                if verdict == SKIP:
                    self.last_skipped = pts * time_base
                    continue
                yield DecodedFrame(frame, self._meta(self._index, frame, given, pts, decode_s))
                self._index += 1
        if self._trim is None:  # a span's frame count is an estimate
            self._check_complete(self._index)

    def _audio_after_the_last_frame(self, packets: Iterator[av.Packet], video) -> Iterator[AudioPacket]:
        """The span's audio still to come after its last frame. A muxer may put audio well after the video
        of the same time (MPEG-PS: about 0.7 s), so packets are read on, video ones dropped undecoded, until
        each audio stream has passed the span's end, or the video is MAX_INTERLEAVE_S past it. Not on a live
        input, where reading on is waiting (a stall there would fail a span already complete)."""
        waiting = {s.index for s in self.audio_streams}
        if not waiting or self.live:
            return
        try:
            yield from self._audio_until_past_the_end(packets, video, waiting)
        except InputError as e:  # --strict's read error past the span: what the span holds is complete
            log.debug(f"{self.path}: after the span: {e}")

    def _audio_until_past_the_end(self, packets: Iterator[av.Packet], video, waiting: set) -> Iterator[AudioPacket]:
        for packet in packets:
            self._damage.packet(packet)
            if packet.stream is video:
                if self._trim.past_end(packet.dts, packet.time_base, MAX_INTERLEAVE_S):
                    return
            elif packet.dts is not None and self._audio_in_span(packet):
                yield AudioPacket(packet)
            elif self._trim.past_end(packet.pts, packet.time_base):
                waiting.discard(packet.stream.index)
                if not waiting:
                    return

    def _audio_in_span(self, packet: av.Packet) -> bool:
        """An audio packet within -ss/-t/-to, its timestamps moved as the video's are."""
        if self._trim is not None and not self._trim.packet(packet.pts, packet.time_base):
            return False
        shift = self._shift(packet.time_base)
        if shift:
            if packet.pts is not None:
                packet.pts -= shift
            packet.dts -= shift
        return True

    def _packets(self) -> Iterator[av.Packet]:
        """Demuxed packets; a read error ends the input like a truncation (fatal only when strict)."""
        replay, self._replay = self._replay, ()
        yield from replay  # read while seeking to -ss's start (pipeline.seek)
        del replay  # not held for the rest of the run
        demux = self.container.demux(self.video, *self.audio_streams)
        while True:
            try:
                packet = next(demux)
            except (StopIteration, IndexError):
                # IndexError: at the end, PyAV's demux also flushes streams the demuxer added mid-file (damaged
                # MPEG-TS), which it never lists; ours, listed from the start, were flushed before them.
                if self._gops is not None and not self._gops.finished:
                    yield from self._drain_packet()  # the sessions' last segment ends here
                return
            except av.error.FFmpegError as e:
                if self.live:  # a stall or a lost connection: keep what the decoder holds, then report
                    yield from self._drain_packet()
                    raise SourceStalled(self._loss(e)) from e
                if self.strict:
                    raise InputError(f"{self.path}: read error: {e}") from e
                self.warn(f"{self.path}: read error, the rest of the input is skipped: {e}")
                yield from self._drain_packet()
                return
            yield packet

    def _without_cut_tail(self, packets: Iterator[av.Packet], video) -> Iterator[av.Packet]:
        """``packets`` without a last video packet the demuxer flagged corrupt (a file cut in the middle of
        it). With frame threads its decoder's error comes out only while the decoder drains at the end,
        and PyAV's drain stops there: the frames the other threads still held (as many as threads less one)
        would be lost, where a decoder without frame threads refuses the packet and gives them all. So such
        a packet is held back until the next video packet: decoded then if one follows, else dropped and
        counted as a packet that could not be decoded."""
        held = None
        for packet in packets:
            if packet.stream is video and held is not None:
                if packet.size:
                    yield held  # damage inside the stream: decoded (concealed or refused) as any other
                else:
                    self._cut_short(held)
                held = None
            if packet.stream is video and packet.size and packet.is_corrupt:
                held = packet
                continue
            yield packet
        if held is not None:
            self._cut_short(held)

    def _cut_short(self, packet: av.Packet) -> None:
        self._damage.packet(packet)
        self._bad_data(f"last packet cut short at pts {packet.pts}, not decoded")
        self.decode_errors += 1
        self.last_rejection = "cut short"

    def _loss(self, error: Exception) -> str:
        if isinstance(error, av.error.ExitError):  # our own interrupt: the read timeout expired
            return f"{self.path}: no data for {self.timeout:g} s (stalled)"
        return f"{self.path}: connection lost: {error}"

    def _drain_packet(self) -> Iterator[av.Packet]:
        # After a read error the demuxer sends no flush packet; an empty one drains the decoder's queue.
        packet = av.Packet()
        packet.stream = self.video
        yield packet

    def _decode_packet(self, packet: av.Packet) -> Iterable[tuple[av.VideoFrame, float]]:
        if self._gops is not None:
            return self._from_sessions(packet)
        if self.returns is not None:
            self.returns.drop()  # frames the pipeline is done with go back to the decoder's pool from here
        t0 = time.perf_counter()
        try:
            # PyAV >= 17.1 returns the good frames of a packet and drops the error that followed them.
            frames = packet.decode()
        except av.error.FFmpegError as e:
            self._damage.decoder_errors()  # what it logged about this packet is this error
            self._rejected(packet.pts, e)
            return []
        dt = (time.perf_counter() - t0) / max(1, len(frames))
        for frame in frames:
            self._check_corrupt(frame)
        self._concealed(packet, frames)
        return [(frame, dt) for frame in frames]

    def _from_sessions(self, packet: av.Packet) -> Iterator[tuple[av.VideoFrame, float]]:
        """Frames of several NVDEC sessions (:mod:`pipeline.gops`), in order; an empty packet ends the stream.

        The decoders' logged errors cannot be pinned on a packet here (a session starting at an open GOP's
        keyframe logs about references it never saw), so they are set aside, not counted as concealed
        damage; what the demuxer logged is kept for the end (DamageLog)."""
        self._damage.decoder_errors()
        outputs = self._gops.finish() if packet.size == 0 else self._gops.feed(packet)
        for kind, value, extra in outputs:
            if kind == "error":
                self._rejected(extra, value)
                continue
            self._check_corrupt(value)
            yield value, extra
            del value  # the session lets the frame go once nobody else holds it

    def _rejected(self, pts: int | None, error: av.error.FFmpegError) -> None:
        """A packet the decoder refused: before any frame with NVDEC, the GPU refusing the stream (raised);
        otherwise damage, skipped and counted (fatal with --strict)."""
        if self.hwaccel is not None and self._index == 0:
            refuse_deep_surfaces(self.path, self.video)  # the header is parsed now: a deep one says so
            raise DecoderRefused(f"{self.path}: NVDEC cannot decode this stream ({_stream_desc(self.video)}): "
                                 f"{error}") from error
        self._bad_data(f"undecodable packet at pts {pts}", error)
        self.decode_errors += 1
        self.last_rejection = error.strerror or str(error)  # its words tell a system out of threads or memory
        self.last_rejection_errno = error.errno  # (EAGAIN, ENOMEM) from damaged data

    def _check_corrupt(self, frame: av.VideoFrame) -> None:
        if frame.is_corrupt:
            self._bad_data(f"corrupt frame at pts {frame.pts}")
            self.corrupt_frames += 1

    def _concealed(self, packet: av.Packet, frames: list) -> None:
        """Errors the decoder logged and concealed: the packet did not fail and, with slice threads, no
        frame is even flagged corrupt. Counted as a corrupt frame (fatal with --strict)."""
        errors = self._damage.decoder_errors()
        if errors and not any(frame.is_corrupt for frame in frames):
            self._bad_data(f"decoder error at pts {packet.pts} ({errors[0]})")
            self.corrupt_frames += 1

    def _bad_data(self, what: str, error: Exception | None = None) -> None:
        if self.strict:
            cause = f": {error}" if error else ""
            raise InputError(f"{self.path}: {what}{cause} (--strict)") from error
        if self.decode_errors + self.corrupt_frames == 0:
            self.warn(f"{self.path}: {what}; damaged data is skipped or concealed and counted")

    def _meta(self, index: int, frame: av.VideoFrame, given: int | None, pts: int, decode_s: float) -> FrameMeta:
        # A frame without a timestamp (a raw stream's, or an MPEG-PS packet's without one) gets the next
        # frame step, as ffmpeg gives it, unsaid; one whose own timestamp had to move is counted and said.
        if given is not None and pts != given:
            if self.retimed_frames == 0:
                self.warn(f"{self.path}: frame {index} has timestamp {given}; "
                            f"moved to {pts} to keep timestamps increasing")
            self.retimed_frames += 1
        time_base = frame.time_base or self.video.time_base
        return FrameMeta(index, pts - self._shift(time_base), time_base, decode_s=decode_s,
                         duration=frame.duration or None)

    def _shift(self, time_base: Fraction | None) -> int:
        """Ticks subtracted from a timestamp of ``time_base``: the output starts at 0 (pipeline.span)."""
        shift = self._shifts.get(time_base)
        if shift is None:
            zero = self._trim.begin if self._trim is not None and self._trim.begin is not None else self._origin
            shift = self._shifts[time_base] = zero_shift(zero, time_base)
        return shift

    def _check_complete(self, decoded: int) -> None:
        expected = self.expected_frames
        why = self._damage.ended_early()  # in every container: what the demuxer met on the way
        if decoded and expected and decoded + self.decode_errors < expected:
            why = f"input ends early: {decoded} of {expected} frames decoded (truncated file?)" + (
                f"; {why}" if why else "")
        elif why:
            why = f"input damaged or cut short ({decoded} frames decoded): {why}"
        if why and self.strict:
            raise InputError(f"{self.path}: {why} (--strict)")
        if why:
            self.warn(f"{self.path}: {why}")

    def _check_device_frame(self, frame: av.VideoFrame) -> None:
        """Device frames are read in place at the first frame's size and layout: another size or surface
        format cannot be converted on the way (the CPU decoder's path does that). Nor another colour, which is
        read as the first frame's, with a warning once."""
        fmt = self.format
        sw = getattr(frame, "sw_format", None)
        kind = f"{frame.format.name}" + (f"/{sw.name}" if sw is not None else "")
        if (frame.width & ~1, frame.height & ~1) != (fmt.width, fmt.height) or frame.format.name != "cuda" or \
                sw is None or SURFACE_LAYOUT.get(sw.name) != self.layout:
            raise InputError(f"{self.path}: frame {self._index} is {frame.width}x{frame.height} "
                             f"({kind}) after {fmt.width}x{fmt.height} {self.layout} frames; with --decode nvdec "
                             "the size and format cannot change mid-stream (--decode cpu converts such input)")
        if self._colour_said:
            return
        if self._device_colour is None:
            self._device_colour = OtherColour(fmt.colour)
        if (other := self._device_colour(frame)) is not None:
            self._colour_said = True
            self.warn(f"{self.path}: frame {self._index} is in {other.name} after frames in {fmt.colour.name}; "
                      "with --decode nvdec such frames are read as the first ones were (--decode cpu converts "
                      "them)")


class _BestEffort:
    """FFmpeg's best-effort timestamp (``guess_correct_pts``), which PyAV does not give: a frame's own
    timestamp while those have gone backwards no more often than the decoding timestamps, else its
    decoding timestamp. AVI has no presentation times: its B-frames come out with their packets' decoding
    order (1, 3, 2, 5, 4...), where the decoding timestamps run straight; an MPEG-PS packet may have none."""

    def __init__(self):
        self.faulty_pts = self.faulty_dts = 0
        self.last_pts = self.last_dts = None

    def __call__(self, pts: int | None, dts: int | None) -> int | None:
        if dts is not None:
            self.faulty_dts += self.last_dts is not None and dts <= self.last_dts
            self.last_dts = dts
        elif pts is not None:
            self.last_dts = pts
        if pts is not None:
            self.faulty_pts += self.last_pts is not None and pts <= self.last_pts
            self.last_pts = pts
        elif dts is not None:
            self.last_pts = dts
        return pts if pts is not None and (self.faulty_pts <= self.faulty_dts or dts is None) else dts


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


def frame_rate(video, from_headers: bool = False):
    """The stream's frame rate: its average, or with ``from_headers`` FFmpeg's guess. A raw stream's average
    is the raw demuxer's default (25 fps), where the guess reads the rate its headers give, as ffmpeg counts
    its frames."""
    if from_headers:
        return video.guessed_rate or video.average_rate
    return video.average_rate or video.guessed_rate


def _frame_step(video, from_headers: bool) -> int:
    """One frame period in the stream's time base (at least one tick)."""
    rate, tb = frame_rate(video, from_headers), video.time_base
    if not rate or not tb:
        return 1
    return max(1, round(1 / (Fraction(rate) * Fraction(tb))))


def _stream_desc(video) -> str:
    cc = video.codec_context
    profile = f" {cc.profile}" if getattr(cc, "profile", None) else ""
    return f"{cc.name}{profile} {cc.width}x{cc.height} {cc.pix_fmt or ''}".strip()
