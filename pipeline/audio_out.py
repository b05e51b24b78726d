"""The output's audio: the input's streams copied where the container takes their codec, else encoded.

``--audio copy`` (the default) copies each stream as it is when the muxer takes the codec (PyAV asks
FFmpeg's avformat_query_codec when the stream is added), and otherwise encodes it to the container's
usual codec with a notice: AAC cannot go into WebM, so it becomes Opus there. ``encode`` always encodes
(Opus for WebM, AAC for MP4/MOV, the input's own codec for Matroska, else the muxer's default);
``none`` writes no audio.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import av

from .errors import ConfigError, OutputError
from .log import log
from .muxers import audio_rate, carries_audio, codec_name, listed_as
from .tags import fitting, tags_of

# The usual audio codec of a muxer, by its name; Matroska keeps the input's. Others: the muxer's default.
USUAL = {"webm": "libopus", "mp4": "aac", "mov": "aac", "ipod": "aac", "3gp": "aac", "3g2": "aac"}
KEEPS_INPUT = {"matroska", "nut"}
# FFmpeg's codec names whose usual encoder has another name (the native opus encoder is experimental).
ENCODER_OF = {"opus": "libopus", "mp3": "libmp3lame", "vorbis": "libvorbis"}
# The shortest packet of a codec that is not damaged: FFmpeg's MPEG-TS muxer refuses a shorter AAC packet, and
# that refusal comes out of a later write (the muxer interleaves), where it would fail the run. Others: 1 byte.
SHORTEST = {"aac": 2}
# Bit rates for encoders that choose none themselves and refuse 0 (what ffmpeg gives them: 128 kb/s).
BIT_RATE = {"wmav1": 128_000, "wmav2": 128_000}


@dataclass
class AudioOut:
    """The input's audio streams on the output side: ``write`` takes the input's packets in order."""

    container: object
    target: str
    copied: dict = field(default_factory=dict)  # input stream index -> output stream (packets copied)
    encoded: dict = field(default_factory=dict)  # input stream index -> _Encoder
    dropped: int = 0
    notices: list = field(default_factory=list)  # what was encoded instead of copied, said once the header is out
    _last_dts: dict = field(default_factory=dict)

    @classmethod
    def build(cls, container, templates, mode: str, target) -> AudioOut:
        out = cls(container, str(target))
        if mode == "none" or not templates:
            return out
        if container.default_audio_codec == "none":  # a muxer without audio (GIF): as ffmpeg, video alone
            if mode == "encode":
                raise ConfigError(f"{target}: {container.format.name} carries no audio; --audio none (-an) "
                                  "leaves it out")
            log.info(f"{target}: {container.format.name} carries no audio; the input's audio is left out")
            return out
        for template in templates:
            source = template.codec_context
            if mode == "copy" and carries_audio(listed_as(container), codec_name(source.codec), source.sample_rate):
                try:
                    out.copied[template.index] = container.add_stream_from_template(template)
                    continue
                except (ValueError, av.error.FFmpegError):
                    pass  # the muxer does not take this codec: encoded below, with a notice
            out.encoded[template.index] = _Encoder.add(container, template, target)
            if mode == "copy":
                out.notices.append(out.encoded[template.index].notice(template))
        for template in templates:  # each stream's language and title, as ffmpeg keeps them
            added = out.copied.get(template.index) or out.encoded[template.index].stream
            added.metadata.update(fitting(tags_of(template), container.format.name, str(target)))
        return out

    def write(self, packet: av.Packet) -> bool:
        """One input packet; False if dropped as damaged (dts going backwards, too short, refused by the
        muxer, undecodable): losing that packet beats failing the whole run on the input's fault."""
        index = packet.stream.index
        if index in self.encoded:
            return self._encode(self.encoded[index], packet)
        out = self.copied.get(index)
        if out is None:
            return False
        dts, last = packet.dts, self._last_dts.get(out.index)  # in the input's time base: mux rescales
        if (last is not None and dts <= last) or packet.size < SHORTEST.get(out.codec_context.name, 1):
            self.dropped += 1
            return False
        packet.stream = out
        if not self._mux([packet]):
            return False
        self._last_dts[out.index] = dts
        return True

    def _encode(self, encoder: _Encoder, packet: av.Packet) -> bool:
        try:
            packets = encoder.encode(packet)
        except av.error.FFmpegError:
            self.dropped += 1
            return False
        return self._mux(packets)

    def _mux(self, packets) -> bool:
        try:
            self.container.mux(packets)
        except OSError as e:
            raise OutputError(f"{self.target}: write failed: {e}") from e
        except av.error.FFmpegError:
            self.dropped += 1
            return False
        return True

    def flush(self) -> None:
        """The encoders' last packets, before the container is closed."""
        for encoder in self.encoded.values():
            try:
                packets = encoder.stream.encode(None)
            except av.error.FFmpegError:
                continue
            self._mux(packets)


@dataclass
class _Encoder:
    stream: object

    @classmethod
    def add(cls, container, template, target) -> _Encoder:
        source = template.codec_context
        name = usual_encoder(container, source.name)
        try:
            codec = av.Codec(name, "w")
            rate = audio_rate(listed_as(container), _rate(codec, source.sample_rate))
            stream = container.add_stream(name, rate=rate)
            stream.layout = _ordered(source.layout)
            if name in BIT_RATE and not stream.bit_rate:
                stream.bit_rate = BIT_RATE[name]
            if codec.audio_formats:
                stream.format = codec.audio_formats[0].name
        except (ValueError, av.error.FFmpegError) as e:
            raise ConfigError(f"{target}: cannot encode audio stream #{template.index} ({source.name}) as {name} "
                              f"for {container.format.name} ({e}); --audio none leaves the audio out") from e
        return cls(stream)

    def notice(self, template) -> str:
        """Why the input's stream is encoded rather than copied (the codec, or the rate only)."""
        source, stream, muxer = template.codec_context, self.stream, self.stream.container.format.name
        rate, name = stream.codec_context.sample_rate, stream.codec_context.name
        only_rate = rate != source.sample_rate and carries_audio(listed_as(self.stream.container),
                                                                 codec_name(source.codec), rate)
        at = f" at {source.sample_rate} Hz" if only_rate else ""
        return (f"audio stream #{template.index} ({source.name}) cannot go into {muxer}{at}; encoded as {name}"
                + (f" at {rate} Hz" if at else ""))

    def encode(self, packet: av.Packet) -> list:
        packets = []
        for frame in packet.decode():  # the input stream's own decoder, used by this thread only
            packets.extend(self.stream.encode(frame))  # PyAV resamples to the encoder's format and rate
        return packets


def usual_encoder(container, input_codec: str) -> str:
    """The audio encoder for ``container`` when ``input_codec`` cannot be copied into it (see the module's note)."""
    muxer = container.format.name
    if muxer in USUAL:
        return USUAL[muxer]
    if muxer in KEEPS_INPUT and _has_encoder(ENCODER_OF.get(input_codec, input_codec)):
        return ENCODER_OF.get(input_codec, input_codec)
    default = container.default_audio_codec or "aac"
    return ENCODER_OF.get(default, default)


def _has_encoder(name: str) -> bool:
    try:
        return av.Codec(name, "w").type == "audio"
    except (ValueError, av.error.FFmpegError):
        return False


def _ordered(layout):
    """A layout without channel order (PCM from Matroska: "2 channels") as FFmpeg's usual layout for that
    many channels ("stereo"): encoders list named layouts (MP2 refuses "2 channels")."""
    if layout.name.endswith(" channels"):
        return av.AudioLayout(f"{layout.nb_channels}c")
    return layout


def _rate(codec, rate: int) -> int:
    """The input's sample rate if the encoder takes it, else the nearest it does (Opus: 48 kHz)."""
    rates = list(codec.audio_rates or ())
    if not rates or rate in rates:
        return rate
    return min(rates, key=lambda r: (abs(r - rate), -r))
