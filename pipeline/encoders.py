"""What a video encoder is given: a pixel format and a time base it takes, and why it refused.

The frames are I420, 8-bit (yuv420p) or 10-bit (yuv420p10le). The pixel format is the one ``--pix-fmt``
names (an encoder that does not take it is refused, exit 2), else: for 10-bit input, the closest 10-bit
(or deeper) format the encoder takes, or 8 bits with a notice where it takes none; for 8-bit input,
yuv420p where taken. An encoder that does not take either (mjpeg wants full-range yuvj420p, prores 10-bit
4:2:2, png RGB, gif a palette) gets the closest format it lists; PyAV's encode converts each frame with
swscale in the sink. The frames are 10-bit whenever the chosen format is deeper than 8 bits (see
:func:`output_format`). The time base is the input's wherever possible, so that every
timestamp survives (VFR included); MPEG-1/2 take only their standard frame rates, the MPEG-4 family
(FFmpeg's mpegvideo encoders) no denominator above 16 bits, and a muxer without variable frame rate
(AVI) states its rate as the inverse of the time base: those get 1/rate.
"""

from __future__ import annotations

from fractions import Fraction

import av

from .avlib import captured_stderr
from .errors import ConfigError, PipelineError, no_threads

# Hardware encoders: they need a device and a driver that may be absent; that is a refusal, not a bug.
HARDWARE_SUFFIXES = ("_nvenc", "_vaapi", "_qsv", "_v4l2m2m", "_amf", "_videotoolbox", "_mediacodec", "_vulkan",
                     "_omx", "_rkmpp", "_mf", "_d3d12va")

# Encoders FFmpeg declares limited range only for, where its libraries cannot be asked (before FFmpeg 7.1).
LIMITED_RANGE_ONLY = frozenset({"prores", "prores_aw", "prores_ks", "dnxhd", "mpeg1video", "mpeg2video", "mpeg4",
                                "h263", "h263p", "dvvideo", "huffyuv", "ffvhuff", "utvideo", "magicyuv", "ffv1",
                                "cljr", "libwebp", "jpeg2000", "speedhq", "cfhd", "snow"})

# The matrices an encoder's frames are read back in, whatever the stream's tags say: JPEG's and WebP's are
# BT.601 (JFIF, VP8: FFmpeg's decoders tag every frame so), DNxHD's decoder tags every frame BT.709, and
# UT Video codes a flag for one of two. Frames of another matrix are converted for these encoders.
CODED_MATRICES = {"mjpeg": ("bt601",), "amv": ("bt601",), "ljpeg": ("bt601",), "libwebp": ("bt601",),
                  "libwebp_anim": ("bt601",), "dnxhd": ("bt709",), "utvideo": ("bt601", "bt709")}



def makes_limited_range(encoder: str, muxer: str) -> bool:
    """Whether full-range frames are converted to limited range for ``encoder``: FFmpeg declares that it codes
    limited range only (ffmpeg converts for it too), and a decoder would read full-range codes as limited.
    A lossless encoder into Matroska keeps its codes, exact as they are its point: the container's tag says
    their range."""
    from .avlib import limited_range_only

    declared = limited_range_only(encoder)
    if declared is None:
        declared = encoder in LIMITED_RANGE_ONLY
    codec = av.Codec(encoder, "w")
    return declared and not (codec.lossless and not codec.lossy and muxer == "matroska")

# The closest to I420 first: the same layout, then more chroma, then RGB, then fewer colours.
PREFERRED_FORMATS = ("yuv420p", "nv12", "yuv422p", "yuv444p", "yuv411p", "yuv410p", "yuva420p", "yuv420p10le",
                     "yuv422p10le", "yuv444p10le", "yuva444p10le", "gbrp", "rgb24", "bgr24", "rgb0", "bgr0",
                     "0rgb", "0bgr", "rgba", "bgra", "argb", "abgr", "rgb48le", "rgb48be", "rgb565le", "rgb555le",
                     "gbrpf32le", "gbrapf32le",
                     "rgb8", "bgr8", "gray", "gray16le", "gray16be", "monow", "monob", "pal8")  # GIF: rgb8, not grey

# For 10-bit frames: the closest to 10-bit I420 first, then more chroma, then deeper, then RGB and grey.
DEEP_FORMATS = ("yuv420p10le", "p010le", "yuv422p10le", "yuv444p10le", "yuva420p10le", "yuv420p12le", "yuv422p12le",
                "yuv444p12le", "yuv420p16le", "p016le", "yuv444p16le", "gbrp10le", "gbrp12le", "gbrp16le",
                "rgb48le", "rgb48be", "gray10le", "gray12le", "gray16le", "gray16be")

# FFmpeg's mpegvideo encoders (ff_mpv_encode_init) refuse a time base denominator over 65535.
SHORT_TIME_BASE = frozenset({"mpeg4", "msmpeg4", "msmpeg4v2", "wmv1", "wmv2", "h261", "h263", "h263p", "flv",
                             "rv10", "rv20", "mjpeg", "amv", "speedhq", "mpeg1video", "mpeg2video"})

AVFMT_VARIABLE_FPS = 0x0400


def is_hardware(name: str) -> bool:
    return name.endswith(HARDWARE_SUFFIXES)


def video_encoder(name: str) -> av.Codec:
    """The encoder ``-c`` names; ConfigError (exit 2) for an unknown name or one that is not a video
    encoder (``-c aac``: the audio codec is chosen with --audio)."""
    if name == "copy":
        raise ConfigError("-c copy: every frame is decoded, filtered and encoded again, so there is no stream "
                          "copy (ffmpeg's -c copy); -c names the video encoder (libx264, libx265, ...)",
                          setting="codec")
    try:
        codec = av.Codec(name, "w")
    except (ValueError, av.error.FFmpegError):
        raise ConfigError(f"unknown encoder {name!r}: PyAV's FFmpeg has no such encoder "
                          "(`ffmpeg -encoders` lists them)", setting="codec") from None
    if codec.type != "video":
        raise ConfigError(f"-c {name}: {name} is an {codec.type} encoder; -c takes a video encoder "
                          "(libx264, libx265, ...), and --audio chooses what happens to the audio", setting="codec")
    return codec


def pixel_format(codec: av.Codec) -> str:
    """yuv420p where taken; full-range yuvj420p for the JPEG family (limited range there is "non-standard",
    refused); else the closest format the encoder lists."""
    names = [f.name for f in codec.video_formats or ()]
    if not names:
        return "yuv420p"  # the encoder does not say: it takes what it is given
    if "yuvj420p" in names and "jpeg" in codec.long_name.lower():  # JPEG wants full range
        return "yuvj420p"
    chosen = next((n for n in PREFERRED_FORMATS if n in names), names[0])
    if chosen == "pal8":
        raise ConfigError(f"the {codec.name} encoder takes only palette (pal8) frames, which swscale cannot make "
                          "from video; choose another encoder")
    return chosen


def format_depth(name: str) -> int:
    """Bits per sample of a pixel format (ConfigError for a name FFmpeg does not know)."""
    try:
        fmt = av.VideoFormat(name)
    except (ValueError, av.error.FFmpegError):
        raise ConfigError(f"unknown pixel format {name!r} (`ffmpeg -pix_fmts` lists them)",
                          setting="pix_fmt") from None
    return max((c.bits for c in fmt.components), default=8)


# Picture encoders whose YUV carries no matrix or range (TIFF's readers assume BT.601, JPEG 2000's nothing):
# RGB by default, which they store as it is.
RGB_FIRST = frozenset({"tiff", "jpeg2000"})


def _rgb_format(names: list[str], depth: int) -> str | None:
    """The first RGB format of the preferred ones (deep first for deep frames) that ``names`` holds."""
    order = (*DEEP_FORMATS, *PREFERRED_FORMATS) if depth > 8 else PREFERRED_FORMATS
    return next((n for n in order if n in names and av.VideoFormat(n).is_rgb), None)


def output_format(codec: av.Codec, requested: str | None, depth: int) -> tuple[str, str, str | None]:
    """(pixel format, the frames' layout, a notice or None) for frames of ``depth`` bits into ``codec``.

    The layout is ``i420p10`` (10-bit I420) when the pixel format is deeper than 8 bits, else ``i420``:
    swscale, in the sink, converts from it to the pixel format where they differ."""
    names = [f.name for f in codec.video_formats or ()]
    notice = None
    if requested is not None:
        format_depth(requested)
        if names and requested not in names:
            raise ConfigError(f"--pix-fmt {requested}: the {codec.name} encoder does not take it; it takes "
                              f"{', '.join(names)}", setting="pix_fmt")
        if av.VideoFormat(requested).has_palette:  # swscale makes no palette (ffmpeg's palettegen filter does)
            others = ", ".join(n for n in names if n != requested)
            raise ConfigError(f"--pix-fmt {requested}: palette frames cannot be made from video here; "
                              + (f"the {codec.name} encoder also takes {others}" if others else
                                 "choose another pixel format"), setting="pix_fmt")
        chosen = requested
    elif codec.name in RGB_FIRST and (rgb := _rgb_format(names, depth)):
        chosen = rgb
    elif depth > 8 and (not names or any(n in names for n in DEEP_FORMATS)):
        chosen = next((n for n in DEEP_FORMATS if n in names), "yuv420p10le")
    else:
        chosen = pixel_format(codec)
        if depth > 8 and format_depth(chosen) <= 8:
            notice = f"converting 10-bit to 8 bits for {codec.name} (it takes no deeper pixel format)"
    return chosen, "i420p10" if format_depth(chosen) > 8 else "i420", notice


# Encoders whose rate list ends with rates they refuse unless compliance is relaxed: MPEG-1's Xing and
# libmpeg3 rates (15, 5, 10, 12 fps) follow its eight standard ones.
OFFICIAL_RATES = {"mpeg1video": 8}
RATE_TOLERANCE = 0.01  # a rate this close plays as the input's (29.97 for a phone's 29.9 average)


def time_base(codec: av.Codec, rate: Fraction, input_time_base: Fraction | None, muxer_flags: int) -> Fraction | None:
    """The encoder's time base: the input's unless the encoder or the muxer cannot take it (see the
    module's note); None: the input has none, PyAV's default (1/rate) applies."""
    rates = [Fraction(r.numerator, r.denominator) for r in codec.frame_rates or ()]
    rates = rates[:OFFICIAL_RATES.get(codec.name, len(rates))]
    if rates:
        nearest = min(rates, key=lambda r: (abs(r - rate), r))  # the standard rate nearest the input's
        # Each frame takes one tick of that rate: far from the input's, the video would play faster or slower.
        if abs(nearest - rate) > RATE_TOLERANCE * rate:
            raise ConfigError(f"the {codec.name} encoder takes standard frame rates only, the nearest "
                              f"{float(nearest):.5g} fps; this {float(rate):.5g} fps video would play at the "
                              "wrong speed: choose another encoder (-c libx264)")
        return 1 / nearest
    if not muxer_flags & AVFMT_VARIABLE_FPS:
        return _inverse(rate)
    if input_time_base and codec.name in SHORT_TIME_BASE and input_time_base.denominator > 0xFFFF:
        return _inverse(rate)
    return input_time_base


def _inverse(rate: Fraction) -> Fraction:
    return (1 / Fraction(rate)).limit_denominator(0xFFFF)


# A pixel aspect ratio travels in the bitstream of these codecs (MPEG-2 as the nearest of its display ratios,
# JPEG and PNG in their density fields), and in the headers of these muxers, which take it from the encoder's;
# the others (Matroska, WebM, AVI, NUT, FLV, MPEG-TS) write only what the bitstream codes: PyAV cannot give
# them the stream's own. Measured: each encoder's and muxer's output read back.
SAR_IN_BITSTREAM = frozenset({"h264", "hevc", "mpeg4", "mpeg1video", "mpeg2video", "mjpeg", "png"})
SAR_IN_HEADER = frozenset({"mp4", "mov", "ipod", "3gp", "3g2", "psp", "ismv", "f4v", "mxf", "mxf_d10",
                           "mxf_opatom", "asf", "asf_stream"})


def aspect_lost(muxer: str, codec: av.Codec, sar: Fraction) -> str | None:
    """Why an output of ``muxer`` and ``codec`` will not keep the pixel aspect ratio ``sar``; None if it will."""
    if sar == 1 or muxer in SAR_IN_HEADER or codec.canonical_name in SAR_IN_BITSTREAM:
        return None
    return (f"the pixel aspect ratio {sar.numerator}:{sar.denominator} is not written (neither {codec.name} nor "
            f"{muxer} codes it); it plays with square pixels: an .mp4 or .mov output keeps it")


# Encoders that take frames FFmpeg's own decoder then cannot read: DXV of 4 rows or fewer ("Invalid data").
MIN_HEIGHT = {"dxv": 6}


def size_refusal(name: str, width: int, height: int) -> str | None:
    """Why the encoder ``name`` cannot code ``width`` x ``height`` frames that read back, or None."""
    least = MIN_HEIGHT.get(name)
    if least is not None and height < least:
        return (f"the {name} encoder's {width}x{height} frames do not decode; it needs frames at least "
                f"{least} rows high")
    return None


def refusal(name: str, error: Exception, detail: str, what: str) -> ConfigError:
    """The one line for an encoder that refused to open or to take our frames (``what`` says which)."""
    said = getattr(error, "log", None)
    cause = detail or (said[2] if isinstance(said, tuple) and len(said) > 2 and said[2] else str(error))
    cause = " ".join(cause.split())  # FFmpeg's messages may hold newlines ("Valid sizes are ...")
    if len(cause) > 300:  # DNxHD lists every profile it has
        cause = cause[:297] + "..."
    if is_hardware(name):
        return ConfigError(f"hardware encoder {name} is not available here ({cause})")
    return ConfigError(f"the {name} encoder refused {what}: {cause}")


def opens_on_one_thread(name: str, width: int, height: int, pix_fmt: str, time_base: Fraction,
                        options: dict[str, str]) -> bool:
    """Whether encoder ``name`` opens with these settings on one thread. x264 that cannot start its threads
    (``ulimit -u``, a container's limit, memory) fails with FFmpeg's "Generic error in an external library"
    and no word of why: opening on one thread tells that from a refusal of the settings."""
    try:
        with captured_stderr():  # x265 and SVT-AV1 print their refusals themselves: not on the user's terminal
            cc = av.CodecContext.create(name, "w")
            cc.width, cc.height, cc.pix_fmt, cc.time_base = width, height, pix_fmt, time_base
            cc.options, cc.thread_count = {**options, "threads": "1"}, 1
            cc.open()
    except Exception:  # any refusal: the settings are what it refuses
        return False
    del cc  # freed here, encoder and all (PyAV 18's contexts have no close)
    return True


def encoder_without_threads(name: str, error: Exception) -> PipelineError:
    """The one line for an encoder that opens on one thread but not on its own threads."""
    said = getattr(error, "strerror", None) or error  # FFmpeg's words, without the call that failed
    return no_threads(f"the {name} encoder could not start its threads ({said})")


# x265 sets the offset between a frame's PTS and its DTS only when its third frame arrives (x265 issue 781, fixed
# in an x265 newer than PyAV's wheels bundle): a clip of one or two frames gets whatever was in memory as DTS,
# which MP4 and MOV refuse ("Not yet implemented") and Matroska calls "pts < dts". So few frames are never
# reordered (the last is a P frame): their DTS is their PTS.
X265_DTS_FROM_FRAME = 3


def repair_short_x265_dts(encoder: str, frames_sent: int, packets) -> None:
    """Give the flushed ``packets`` of a libx265 encoder that was sent fewer than three frames in all their PTS
    as DTS."""
    if encoder == "libx265" and frames_sent < X265_DTS_FROM_FRAME:
        for packet in packets:
            if packet.pts is not None:
                packet.dts = packet.pts


# Hardware encoders (is_hardware) are in PyAV's build whether or not this machine has the hardware,
# so each is tried before the run (the H200, for one, has NVDEC but no NVENC).
CPU_ENCODERS = ("libx264", "libx265", "libsvtav1", "libvpx-vp9", "mpeg4", "ffv1")


def check_hardware_encoder(codec: str) -> None:
    """Refuse, before the run, a hardware encoder this machine cannot open, naming CPU encoders that work.

    NVENC takes the frames from the pinned download (host memory) as any encoder does."""
    if not is_hardware(codec):
        return
    try:
        cc = av.CodecContext.create(codec, "w")
        cc.width, cc.height, cc.pix_fmt = 256, 256, "yuv420p"
        cc.time_base = Fraction(1, 30)
        cc.open()
    except (av.error.FFmpegError, ValueError, OSError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        working = [c for c in CPU_ENCODERS if c in av.codecs_available]
        raise ConfigError(f"hardware encoder {codec} is not available here ({first}); CPU encoders that work "
                          f"here: {', '.join(working)}") from e
