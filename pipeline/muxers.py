"""Which codecs a muxer carries, where FFmpeg cannot say.

Most muxers list the codecs they take (a codec tag table or a query function): PyAV's ``add_stream``
refuses the others, and ``supported_codecs`` lists them. MPEG-TS and the MPEG program stream muxers
(mpeg, vob, svcd, dvd, vcd) list none, so FFmpeg accepts any stream there. What they do with it:
MPEG-TS writes an unknown codec as "private data" that no demuxer reads back (VP9, FFV1, FLAC, PCM: a
file with no video or no audio, and exit 0); the program stream muxers write any video the same way and
refuse most audio only when the header is written (AAC), too late to encode it instead. The lists
below are what reads back after a write (tests/test_muxers.py writes and reads each one that PyAV can
encode), with the codecs FFmpeg's demuxers name in these containers and PyAV has no encoder for (DTS,
TrueHD, LATM AAC, SMPTE 302M). Codec names are FFmpeg's (``h264``), not an encoder's (``libx264``).
Two more take any codec and keep only raw video readable: Y4M (YUV4MPEG2, which fails the header with
others) and the raw muxer (``.yuv``: an H.264 stream there reads back as noise). Ogg and SWF take any
stream too and refuse most only when the header is written: their video is listed so that a run without
``-c`` gets theirs (:func:`default_video_encoder`) and one with another says so before it starts.
MPEG-TS written as Blu-ray's M2TS (a ``.m2ts`` name, or ``mpegts_m2ts_mode=1``) carries Blu-ray's PCM too, which
plain MPEG-TS writes unreadable: the tables name it ``m2ts`` (see :func:`listed_as`).
"""

from __future__ import annotations

import io

import av

_PROGRAM_STREAM_VIDEO = frozenset({"mpeg1video", "mpeg2video", "mpeg4", "h264", "hevc"})
_PROGRAM_STREAM_AUDIO = frozenset({"mp1", "mp2", "mp3", "ac3", "dts", "pcm_dvd", "pcm_s16be"})
_PROGRAM_STREAMS = ("mpeg", "vob", "svcd", "dvd", "vcd")

VIDEO = {"mpegts": frozenset({"mpeg1video", "mpeg2video", "mpeg4", "h264", "hevc"}),
         **dict.fromkeys(_PROGRAM_STREAMS, _PROGRAM_STREAM_VIDEO)}
_TS_AUDIO = frozenset({"mp1", "mp2", "mp3", "aac", "aac_latm", "ac3", "eac3", "opus", "dts", "truehd", "s302m"})
VIDEO["m2ts"] = VIDEO["mpegts"]
VIDEO |= {"yuv4mpegpipe": frozenset({"wrapped_avframe", "rawvideo"}), "rawvideo": frozenset({"rawvideo"}),
          **dict.fromkeys(("ogg", "ogv"), frozenset({"theora", "vp8"})),
          **dict.fromkeys(("swf", "avm2"), frozenset({"flv1", "vp6f", "mjpeg"}))}
AUDIO = {"mpegts": _TS_AUDIO, "m2ts": _TS_AUDIO | {"pcm_bluray"},
         **dict.fromkeys(_PROGRAM_STREAMS, _PROGRAM_STREAM_AUDIO),
         "mxf": frozenset({"pcm_s16le", "pcm_s24le"}), "swf": frozenset({"mp3"}),
         **dict.fromkeys(("ogg", "ogv"), frozenset({"vorbis", "opus", "flac", "speex"}))}

# Sample rates a muxer takes, where it takes few (it refuses the others when the header is written).
AUDIO_RATES = {"mxf": (48000,), "swf": (11025, 22050, 44100)}

# A few common output extensions and their muxers, in the order they are suggested.
COMMON = {".mkv": "matroska", ".mp4": "mp4", ".mov": "mov", ".avi": "avi", ".nut": "nut", ".webm": "webm",
          ".ts": "mpegts"}


def codec_name(codec: av.Codec) -> str:
    """FFmpeg's name of what ``codec`` encodes or decodes (``h264`` for libx264, ``mp3`` for mp3float)."""
    return codec.canonical_name


def listed_as(container) -> str:
    """The name of ``container``'s muxer in the tables above: ``m2ts`` for MPEG-TS written as M2TS (the
    muxer's own choice: ``mpegts_m2ts_mode`` set, else a name ending in ``.m2ts``), else FFmpeg's name."""
    muxer = container.format.name
    if muxer != "mpegts":
        return muxer
    given = {**(getattr(container, "options", None) or {}), **(getattr(container, "container_options", None) or {})}
    mode = _bool_option(given.get("mpegts_m2ts_mode", "auto"))
    if mode == -1:
        mode = int(str(container.name).lower().endswith(".m2ts"))
    return "m2ts" if mode == 1 else muxer


_TRUE, _FALSE = ("true", "y", "yes", "enable", "enabled", "on"), ("false", "n", "no", "disable", "disabled", "off")


def _bool_option(value: str) -> int | None:
    """An FFmpeg boolean option's value as FFmpeg reads it: 1, 0, or -1 for auto; None for one it refuses
    (the muxer's header then fails, in its words)."""
    word = str(value).strip().lower()
    if word == "auto":
        return -1
    if word in _TRUE or word in _FALSE:
        return int(word in _TRUE)
    try:
        number = float(word)
    except ValueError:
        return None
    return int(number) if number in (-1, 0, 1) else None


def carries_video(container, codec: str) -> bool:
    """Whether the output ``container``'s muxer carries video in ``codec`` (FFmpeg's name), as far as
    it can be told before the stream is added: False for a muxer without video (ffmetadata), the list
    above for one that takes anything; True otherwise (``add_stream`` asks FFmpeg)."""
    if container.default_video_codec == "none":
        return False
    listed = VIDEO.get(listed_as(container))
    return listed is None or codec in listed


# Muxers that check frames rather than store them (``-f md5 -``, ``-f framecrc``): they take any codec, and
# what users compare with them is FFmpeg's default there, the raw frames.
_CHECKSUMS = frozenset({"md5", "crc", "hash", "framemd5", "framecrc", "framehash", "streamhash"})


def container_encoder(name: str, muxer: str | None, encoder: str) -> tuple[str, str] | None:
    """(the muxer, its encoder) where the output named ``name`` (its muxer ``-f``'s, else the one FFmpeg
    guesses from the name) should get the muxer's own encoder in place of ``encoder``; None otherwise."""
    from .avlib import guessed_muxer

    muxer = muxer or guessed_muxer(name)
    chosen = default_video_encoder(muxer, encoder) if muxer else None
    return (muxer, chosen) if chosen else None


# Audio muxers whose one video stream is a cover picture: FFmpeg keeps its first frame and drops the rest.
COVER_ONLY = frozenset({"mp3", "flac", "aiff"})


def without_video(container) -> str | None:
    """Why ``container`` cannot take a video stream (.mka, .ffmeta; .mp3 only a cover picture), or None."""
    name = container.format.name
    if container.default_video_codec != "none" and name not in COVER_ONLY:
        return None
    cover = " (one cover picture, not a video)" if name in COVER_ONLY else ""
    return f"{container.format.long_name} ({name}) carries no video{cover}; name a video container (.mkv, .mp4)"


def default_video_encoder(muxer: str, encoder: str) -> str | None:
    """The encoder ffmpeg picks without ``-c`` for the muxer named ``muxer`` (libvpx-vp9 for WebM, gif for
    GIF, rawvideo for ``.yuv`` and the checksum muxers) where that muxer cannot take ``encoder``'s video, or
    only checks frames; None where it can, or where it has no video or this build no such encoder (the run
    then says what it cannot hold)."""
    try:
        probe = av.open(io.BytesIO(), "w", format=muxer)
    except (ValueError, av.error.FFmpegError):
        return None
    with probe:
        default = probe.default_video_codec
        if default == "none" or default == encoder or muxer in COVER_ONLY:
            return None
        if muxer not in _CHECKSUMS and _takes(probe, encoder):
            return None
        # The muxer's default, else one it is listed to keep (Ogg's Theora has no encoder here: VP8).
        for codec in (default, *sorted(VIDEO.get(muxer, ()))):
            try:
                return av.Codec(codec, "w").name
            except (ValueError, av.error.FFmpegError):
                continue
        return None


def opens_its_own_output(muxer: str) -> bool:
    """FFmpeg's AVFMT_NOFILE: the muxer opens its output itself (a device, a network session, files by
    name) and ignores the file or pipe it is given. False for a name FFmpeg does not know (the sink says so)."""
    try:
        return av.ContainerFormat(muxer, "w").no_file
    except ValueError:
        return False


def takes_video(muxer: str | None, encoder: str) -> bool:
    """Whether the muxer named ``muxer`` takes a video stream from ``encoder``; True where this cannot be
    told here (no such muxer or encoder: the run says so in its own words)."""
    try:
        probe = av.open(io.BytesIO(), "w", format=muxer)
    except (ValueError, TypeError, av.error.FFmpegError):
        return True
    with probe:
        return _takes(probe, encoder)


def _takes(probe, encoder: str) -> bool:
    try:
        if not carries_video(probe, codec_name(av.Codec(encoder, "w"))):
            return False
    except (ValueError, av.error.FFmpegError):  # no such encoder
        return True
    try:
        probe.add_stream(encoder, rate=25)
    except (ValueError, av.error.FFmpegError):  # not in the muxer's list
        return False
    return True


def carries_audio(muxer: str, codec: str, rate: int) -> bool:
    """Whether the muxer named ``muxer`` carries audio in ``codec`` (FFmpeg's name) at ``rate`` Hz; True
    where FFmpeg decides when the stream is added."""
    listed = AUDIO.get(muxer)
    return ((listed is None or codec in listed) and codec not in REFUSED_AT_HEADER.get(muxer, ())
            and audio_rate(muxer, rate) == rate)


def audio_rate(muxer: str, rate: int) -> int:
    """``rate``, or the nearest rate the muxer takes where it takes few."""
    rates = AUDIO_RATES.get(muxer)
    if not rates or rate in rates:
        return rate
    return min(rates, key=lambda r: (abs(r - rate), -r))


# Codecs a muxer lists as supported and then refuses when it writes its header: Matroska "does not yet support
# muxing" RealVideo and RealAudio; MOV takes Opus and FLAC "only in MP4" (the MOV muxer is MP4's, in its mode).
REFUSED_AT_HEADER = {"matroska": frozenset({"rv10", "rv20", "rv30", "rv40", "ra_144", "ra_288", "cook", "atrac3",
                                            "sipr"}),
                     "mov": frozenset({"opus", "flac"})}


def containers_for(codec: str, candidates=tuple(COMMON)) -> list[str]:
    """The output extensions, of a few common ones, whose muxer carries ``codec`` (an encoder's name)."""
    name = codec_name(av.Codec(codec, "w"))
    found = []
    for suffix in candidates:
        muxer = COMMON[suffix]
        if name in REFUSED_AT_HEADER.get(muxer, ()):
            continue
        if muxer in VIDEO:
            if name in VIDEO[muxer]:
                found.append(suffix)
            continue
        try:
            with av.open(io.BytesIO(), "w", format=muxer) as probe:
                if codec in probe.supported_codecs:
                    found.append(suffix)
        except (ValueError, av.error.FFmpegError):
            continue
    return found


# Raw video whose picture AVI and MOV read back as written (grey and monow as an equal palette). Each
# names a raw frame's format by a FourCC or a bit depth, and for many formats its demuxer reads another one
# back (yuv444p in AVI as yuv420p, bgr0 as a picture of noise; MOV's yuv420p does not open at all).
# tests/test_muxers.py writes each of these and a few others and reads them back; NUT stores any format,
# Matroska refuses raw RGB.
RAW_READ_BACK = {
    "avi": ("yuv420p", "yuv422p", "yuv410p", "yuv411p", "nv12", "nv21", "uyvy422", "yuyv422", "uyva", "vyu444",
            "bgr24", "rgba", "bgra", "rgb555le", "gray", "monow"),
    "mov": ("uyvy422", "yuyv422", "uyva", "vyu444", "rgb24", "bgr24", "rgba", "argb", "abgr", "bgra", "rgb48be",
            "rgb565le", "rgb565be", "rgb555le", "rgb555be", "gray", "gray16be", "monow"),
}


def raw_format_refusal(muxer: str, codec: str, pix_fmt: str) -> str | None:
    """Why ``muxer`` cannot hold ``codec`` video in ``pix_fmt`` so that it reads back the same, or None."""
    formats = RAW_READ_BACK.get(muxer)
    if codec != "rawvideo" or formats is None or pix_fmt in formats:
        return None
    return (f"the {muxer} muxer writes rawvideo {pix_fmt} so that it reads back as another pixel format or not "
            f"at all; -pix_fmt {', '.join(formats)} read back as written, and .nut holds any")


# Muxers that store no colour tags, and the codecs whose own bitstream carries them (H.264's VUI, ...): any
# other codec in these leaves players to assume the size's convention (BT.601 for SD, BT.709 for HD, limited).
UNTAGGED_MUXERS = frozenset({"avi", "nut", "mpegts", "image2", "image2pipe"})
TAGS_IN_BITSTREAM = frozenset({"h264", "hevc", "av1", "vp9", "mpeg2video", "prores", "mjpeg", "ljpeg", "amv", "webp",
                               "dnxhd", "utvideo"})  # the last three: frames converted to the matrix they code


def loses_range(muxer: str, codec: str) -> bool:
    """Whether full-range video of ``codec`` in ``muxer`` reads back as limited: MOV's colour box has no range
    flag (MP4's has), and only a bitstream that says it (H.264's VUI, ...) keeps it there."""
    return muxer == "mov" and codec not in TAGS_IN_BITSTREAM


def loses_colour_tags(muxer: str, codec: str) -> bool:
    """Whether video of ``codec`` (FFmpeg's name) in ``muxer`` reads back without its matrix and range."""
    return muxer in UNTAGGED_MUXERS and codec not in TAGS_IN_BITSTREAM
