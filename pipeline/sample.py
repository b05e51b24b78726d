"""Synthetic test and benchmark clips: ``pipeline sample``.

Frames carry texture, gradients, moving shapes and a large frame counter, so
that encoders, decoders and filters see realistic detail and motion, and a
viewer (or a test) can tell which frame it is looking at after lossy coding.

    pipeline sample                     # samples/sample.mp4 (the repository's copy is committed)
    pipeline sample 1080p               # samples/bench_1080p.mp4
    pipeline sample raw4k --frames 30

Outputs go under ``samples/`` in the current directory unless ``-o`` says otherwise. The command is
:mod:`pipeline.sample_cli`, which :mod:`pipeline.cli` imports (and so PyAV and OpenCV) only when run.
The picture itself (:func:`synth_frame`) is drawn by :mod:`pipeline.synth`; here are its colour tags
and the clip writer.
"""

from __future__ import annotations

import errno
import logging
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from av.video.reformatter import ColorPrimaries, ColorRange, Colorspace, ColorTrc

from . import synth
from .audio_out import usual_encoder
from .avlib import quiet_encoder, watch
from .config import file_url
from .encoders import format_depth, pixel_format
from .errors import ConfigError, OutputError, PipelineError
from .muxers import (AUDIO, audio_rate, carries_audio, carries_video, codec_name, containers_for, listed_as,
                     without_video)
from .outfile import StagedFile, final_path
from .synth import synth_frame
from .video import MAX_SIDE, is_hd

log = logging.getLogger(__name__)

AUDIO_RATE = 48000
AUDIO_LEVEL = 0.2  # well below full scale so AAC never clips

# Codecs refused at odd sizes whatever the pixel format: libx264 rejects
# them for 4:2:0, and the pipeline's H.264 paths assume even sizes.
EVEN_SIZE_CODECS = {"libx264"}

# The picture's scene cache, reachable here beside synth_frame: clearing it makes the next frame build
# its scene from scratch.
_scene = synth._scene


# --------------------------------------------------------------------------
# Colour and pixel formats
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ColourTags:
    sws_matrix: int  # swscale matrix used for the RGB -> YUV conversion
    colorspace: int  # AVColorSpace written to the stream and frames
    primaries: int
    trc: int
    color_range: int


# AVColorSpace values (libavutil/pixfmt.h); PyAV has no enum for these, its
# Colorspace enum holds swscale's SWS_CS_* constants, which differ.
AVCOL_SPC_BT709 = 1
AVCOL_SPC_SMPTE170M = 6
AVCOL_SPC_BT2020_NCL = 9

BT709 = ColourTags(
    Colorspace.ITU709, AVCOL_SPC_BT709, ColorPrimaries.BT709, ColorTrc.BT709, ColorRange.MPEG
)
BT601 = ColourTags(
    Colorspace.ITU601,
    AVCOL_SPC_SMPTE170M,
    ColorPrimaries.SMPTE170M,
    ColorTrc.SMPTE170M,
    ColorRange.MPEG,
)


# HDR10: BT.2020 (non-constant luminance) with the PQ transfer, and the mastering display (P3 primaries,
# D65, 0.0001-1000 cd/m2) and content light level (1000/400) of a typical grade, in each encoder's params.
BT2020_PQ = ColourTags(
    Colorspace.BT2020, AVCOL_SPC_BT2020_NCL, ColorPrimaries.BT2020, ColorTrc.SMPTE2084, ColorRange.MPEG
)
HDR10_PARAMS = {
    "libx265": ("x265-params", "master-display=G(13250,34500)B(7500,3000)R(34000,16000)WP(15635,16450)"
                "L(10000000,1):max-cll=1000,400"),
    "libx264": ("x264-params", "mastering-display=G(13250,34500)B(7500,3000)R(34000,16000)WP(15635,16450)"
                "L(10000000,1):cll=1000,400"),
    "libsvtav1": ("svtav1-params", "mastering-display=G(0.265,0.69)B(0.15,0.06)R(0.68,0.32)WP(0.3127,0.329)"
                  "L(1000,0.0001):content-light=1000,400"),
}


def colour_tags(width: int, height: int, hdr: bool = False) -> ColourTags:
    """HD and up is BT.709, SD is BT.601 (:func:`pipeline.video.is_hd`); both limited range, as broadcast
    and most players assume when a stream is untagged. ``hdr``: BT.2020 PQ."""
    if hdr:
        return BT2020_PQ
    return BT709 if is_hd(width, height) else BT601


def rgb_to_frame(rgb: np.ndarray, pix_fmt: str, hdr: bool = False) -> av.VideoFrame:
    """Convert an RGB frame to ``pix_fmt`` with the matrix its tags declare."""
    tags = colour_tags(rgb.shape[1], rgb.shape[0], hdr)
    frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
    frame = frame.reformat(
        format=pix_fmt, dst_colorspace=tags.sws_matrix, dst_color_range=tags.color_range
    )
    # Set only as metadata: passing these to reformat would ask swscale for a
    # transfer/primaries conversion we do not want.
    frame.color_primaries = tags.primaries
    frame.color_trc = tags.trc
    return frame


# --------------------------------------------------------------------------
# Clip writing
# --------------------------------------------------------------------------


def _as_rate(fps: float | int | Fraction) -> Fraction:
    """Frame rate as an exact fraction; 23.976/29.97/59.94 become n*1000/1001."""
    if isinstance(fps, float) and not math.isfinite(fps):  # NaN passes every comparison below
        raise ValueError(f"fps must be a finite number, got {fps}")
    if isinstance(fps, (int, Fraction)):
        rate = Fraction(fps)
    else:
        ntsc = round(fps * 1.001)
        if abs(fps - ntsc * 1000 / 1001) < 5e-3 and abs(fps - round(fps)) > 5e-3:
            rate = Fraction(ntsc * 1000, 1001)
        else:
            rate = Fraction(fps).limit_denominator(1001)
    if fps <= 0:
        raise ValueError(f"fps must be positive, got {fps}")
    if rate < MIN_FPS:
        raise ValueError(f"fps {float(fps):g} is too low (at least 1/1001)")
    if rate > MAX_FPS:  # above it, MP4's and Matroska's clocks time some frames alike: a clip that does not play
        raise ValueError(f"fps {float(fps):g} is too high (at most {MAX_FPS})")
    if max(rate.numerator, rate.denominator) > INT_MAX:  # FFmpeg holds a rate as a fraction of C ints
        raise ValueError(f"fps {fps}: its terms are too large (a fraction of numbers below 2**31)")
    return rate


MIN_FPS, MAX_FPS = Fraction(1, 1001), 1000
INT_MAX = 2**31 - 1


def _is_subsampled(pix_fmt: str) -> bool:
    fmt = av.VideoFormat(pix_fmt)  # ValueError for an unknown name
    return fmt.chroma_width(2) < 2 or fmt.chroma_height(2) < 2


def _check_codec(codec: str, pix_fmt: str) -> None:
    encoder = av.Codec(codec, "w")  # UnknownCodecError for a name FFmpeg has no encoder for
    if encoder.type != "video":
        raise ValueError(f"{codec} encodes {encoder.type}, not video; --codec takes a video encoder (libx264, "
                         "ffv1, ...)")
    format_depth(pix_fmt)  # ConfigError (a ValueError) for a name FFmpeg does not know
    # Else the encoder's open fails with EINVAL alone (libvpx-vp9 built without high bit depth, for one).
    formats = [f.name for f in encoder.video_formats or ()]
    if formats and pix_fmt not in formats:
        raise ValueError(f"{codec} does not take pixel format {pix_fmt}; it takes {', '.join(formats)}")


def _check_args(width: int, height: int, frames: int, codec: str, pix_fmt: str, seed: int) -> None:
    if width <= 0 or height <= 0:
        raise ValueError(f"frame size must be positive, got {width}x{height}")
    # The pipeline reads no larger, and a larger picture would be drawn in memory before an encoder refused it.
    if width > MAX_SIDE or height > MAX_SIDE:
        raise ValueError(f"frame size {width}x{height} is too large; supported sizes are up to "
                         f"{MAX_SIDE}x{MAX_SIDE}")
    if frames <= 0:
        raise ValueError(f"frames must be positive, got {frames}")
    if seed < 0:  # NumPy's own refusal names no option
        raise ValueError(f"seed must be non-negative, got {seed}")
    _check_codec(codec, pix_fmt)
    if width % 2 or height % 2:
        if codec in EVEN_SIZE_CODECS:
            raise ValueError(f"{codec} needs even dimensions, got {width}x{height}")
        # PyAV cannot build or read back subsampled frames of odd size.
        if _is_subsampled(pix_fmt):
            raise ValueError(
                f"{pix_fmt} needs even dimensions, got {width}x{height}; use yuv444p or gray"
            )


def usual_pix_fmt(codec: str, wanted: str) -> str:
    """``wanted``, or for the usual yuv420p or a format the encoder named ``codec`` does not take, the one
    ``pipeline run`` gives it (:func:`pipeline.encoders.pixel_format`: full-range yuvj420p for MJPEG,
    rgb8 for GIF); ``wanted`` where the encoder is unknown (its error comes later, in words)."""
    try:
        encoder = av.Codec(codec, "w")
    except (ValueError, av.error.FFmpegError):
        return wanted
    formats = [f.name for f in encoder.video_formats or ()]
    return pixel_format(encoder) if wanted == "yuv420p" or (formats and wanted not in formats) else wanted


def _video_options(codec: str, crf: int | None, options: dict | None, hdr: bool = False) -> dict[str, str]:
    opts: dict[str, str] = {}
    if codec == "libx264":
        opts["preset"] = "veryfast"
        if crf is not None:
            opts["crf"] = str(crf)
    if hdr and codec in HDR10_PARAMS:
        key, params = HDR10_PARAMS[codec]
        opts[key] = ":".join(p for p in (opts.get(key), params) if p)
    opts.update({k: str(v) for k, v in (options or {}).items()})
    return opts


def _add_video(container, codec, width, height, rate, pix_fmt, opts, hdr=False) -> av.video.stream.VideoStream:
    stream = container.add_stream(codec, rate=rate, options=opts)
    stream.width = width
    stream.height = height
    stream.pix_fmt = pix_fmt
    ctx = stream.codec_context
    ctx.time_base = 1 / rate
    tags = colour_tags(width, height, hdr)
    ctx.colorspace = tags.colorspace
    ctx.color_range = tags.color_range
    ctx.color_primaries = tags.primaries
    ctx.color_trc = tags.trc
    return stream


def _add_audio(container, path: Path) -> av.audio.stream.AudioStream | None:
    """AAC where the container carries it, else its usual audio (Opus in WebM, MP2 in MPEG-PS, PCM in MXF);
    None for a muxer without audio (raw H.264, Y4M), whose clip is its video alone, as ffmpeg writes it."""
    muxer = container.format.name
    if container.default_audio_codec == "none":
        log.info(f"{path}: {muxer} carries no audio; the clip has none")
        return None
    listed = listed_as(container)
    carried = carries_audio(listed, "aac", AUDIO_RATE) and (listed in AUDIO or "aac" in container.supported_codecs)
    stream = container.add_stream("aac" if carried else usual_encoder(container, "aac"),
                                  rate=audio_rate(listed, AUDIO_RATE))
    stream.layout = "stereo"
    stream.bit_rate = 96_000
    return stream


def _tone(start: int, stop: int, seed: int) -> np.ndarray:
    """Samples [start, stop) of a seeded stereo tone, (2, n) float32 planar.

    Computed from the absolute sample index, so chunks join without clicks.
    """
    semitone = np.random.default_rng(seed).integers(0, 12)
    freq = 220.0 * 2 ** (semitone / 12)
    t = np.arange(start, stop, dtype=np.float64) / AUDIO_RATE
    left = np.sin(2 * np.pi * freq * t)
    right = np.sin(2 * np.pi * 1.5 * freq * t)  # a fifth above: channels are distinguishable
    return (AUDIO_LEVEL * np.stack([left, right])).astype(np.float32)


def _audio_frame(start: int, stop: int, seed: int) -> av.AudioFrame:
    frame = av.AudioFrame.from_ndarray(_tone(start, stop, seed), format="fltp", layout="stereo")
    frame.sample_rate = AUDIO_RATE
    frame.pts = start
    frame.time_base = Fraction(1, AUDIO_RATE)
    return frame


def _encode_all(container, vstream, astream, *, width, height, frames, rate, pix_fmt, seed, hdr=False,
                checkpoint=None):
    time_base = 1 / rate
    audio_done = 0
    for i in range(frames):
        if checkpoint is not None:
            checkpoint()
        frame = rgb_to_frame(synth_frame(i, width, height, seed), pix_fmt, hdr)
        frame.pts = i
        frame.time_base = time_base
        container.mux(vstream.encode(frame))
        if astream is not None:
            # Keep audio in step with video so the muxer's interleaving queue stays short; a second at a
            # time, so that a slow frame rate (--fps 1/1001: 1001 s of sound a frame) neither holds its
            # whole span in memory nor keeps a stop waiting.
            audio_end = round((i + 1) * AUDIO_RATE / rate)
            chunks = 0
            while audio_end > audio_done:
                if checkpoint is not None and chunks:  # the frame's own was just made; again for each further second
                    checkpoint()
                chunks += 1
                chunk_end = min(audio_end, audio_done + AUDIO_RATE)
                container.mux(astream.encode(_audio_frame(audio_done, chunk_end, seed)))
                audio_done = chunk_end
    container.mux(vstream.encode(None))
    if astream is not None:
        container.mux(astream.encode(None))


def make_clip(
    path: str | Path,
    *,
    width: int = 640,
    height: int = 360,
    frames: int = 90,
    fps: float | int | Fraction = 30,
    codec: str = "libx264",
    pix_fmt: str = "yuv420p",
    audio: bool = True,
    seed: int = 0,
    crf: int | None = None,
    options: dict | None = None,
    hdr: bool = False,
    overwrite: bool = True,
    checkpoint: Callable[[], None] | None = None,
) -> Path:
    """Write a synthetic clip and return its path.

    The clip is written to a temporary file beside ``path`` and moved onto it only when complete: a
    failure leaves ``path`` as it was. ``overwrite=False``: a ``path`` that exists by then is kept
    (ConfigError, as for ``pipeline run`` without -y).

    Video frames have pts 0, 1, 2, ... in time base 1/fps. With ``audio``, a
    stereo 48 kHz AAC tone of the same duration is muxed alongside. ``hdr``:
    HDR10 tags (BT.2020 matrix and primaries, PQ transfer; use a 10-bit
    ``pix_fmt``), with mastering display and content light level metadata
    where the encoder writes them (libx265, libx264, libsvtav1).

    Container notes: MP4 takes libx264 only. Matroska takes ffv1, libx264 and
    rawvideo in formats with a FourCC (not yuv420p10le), keeps the colour
    tags, and rounds timestamps to milliseconds. NUT takes every raw format
    and keeps exact timestamps but drops the colour tags; it cannot store
    negative timestamps either, so with audio it shifts all streams by the
    AAC encoder delay (1024 samples) and video starts there, not at 0.

    ``checkpoint`` is called before each frame and once more before the clip is moved into place; what it
    raises ends the call with no clip written (``pipeline sample`` stops there on a signal).
    """
    path = Path(path)
    _check_args(width, height, frames, codec, pix_fmt, seed)
    rate = _as_rate(fps)
    path.parent.mkdir(parents=True, exist_ok=True)
    final = final_path(path)  # a symbolic link stays one: the file it points to is replaced, as by run
    staging = StagedFile(final)
    try:
        staging.prepare()
        with _open_output(staging.path, path) as container:
            opts = quiet_encoder(codec, _video_options(codec, crf, options, hdr))  # no x265 or SVT banner
            _check_carried(container, path, codec)
            vstream = _add_video(container, codec, width, height, rate, pix_fmt, opts, hdr)
            astream = _add_audio(container, path) if audio else None
            _open_encoders(container, codec, f"{width}x{height} {pix_fmt}")
            _encode_all(
                container,
                vstream,
                astream,
                width=width,
                height=height,
                frames=frames,
                rate=rate,
                pix_fmt=pix_fmt,
                seed=seed,
                hdr=hdr,
                checkpoint=checkpoint,
            )
        if checkpoint is not None:
            checkpoint()
        staging.place(overwrite, path)
    except BaseException:
        # A half-written clip looks valid to a quick glance; do not leave one.
        staging.discard()
        raise
    return path


# What FFmpeg answers when it cannot do what the settings ask (as opposed to a write that failed)
_REFUSALS = {errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


@contextmanager
def clip_errors(out: str | Path, codec: str, pix_fmt: str) -> Iterator[None]:
    """What :func:`make_clip` raises, as the project's one-line errors: settings an encoder refuses are a
    usage error (ConfigError), a write that failed an output error."""
    try:
        yield
    except PipelineError:  # a signal, a target that appeared during the run: already one line of ours
        raise
    except OSError as e:
        if isinstance(e, av.error.FFmpegError) and e.errno in _REFUSALS:  # the settings, not the writing
            raise ConfigError(f"sample: {e.strerror or e} (codec {codec!r}, pixel format {pix_fmt!r})") from e
        raise OutputError(f"{out}: cannot write: {e.strerror or e}") from e
    except av.codec.codec.UnknownCodecError:
        raise ConfigError(f"sample: unknown codec {codec!r}") from None
    except (ValueError, av.error.FFmpegError) as e:  # bad values, or ones the encoder refuses when it opens
        raise ConfigError(f"sample: {e}") from e


def _check_carried(container, path: Path, codec: str) -> None:
    """A muxer that would write the video unreadable (VP9 in MPEG-TS) is refused, as by ``pipeline run``."""
    if (why := without_video(container)) is not None:
        raise ValueError(f"{path}: {why}")
    if not carries_video(container, codec_name(av.Codec(codec, "w"))):
        fits = ", ".join(containers_for(codec)) or "none of .mkv, .mp4, .nut"
        raise ValueError(f"{path}: the {container.format.name} muxer cannot hold {codec} video; these can: {fits}")


def _open_encoders(container, codec: str, what: str) -> None:
    """Open the encoders before a frame is drawn: one refusing its settings (x264 a 16384x16384 picture)
    says so at once, not after seconds of drawing and gigabytes of memory. A muxer refusing the streams
    (SWF takes FLV video, Y4M raw video alone) says why in FFmpeg's log, with EPERM, EINVAL or
    AVERROR_INVALIDDATA."""
    muxer = container.format.name
    said = watch({muxer})
    try:
        container.start_encoding()
    except av.error.FFmpegError as e:
        refused = "; ".join(m for who, level, m in said.take() if who == muxer and level >= 40)
        if refused:
            streams = ", ".join(f"{s.type} {s.codec_context.name}" for s in container.streams)
            raise ValueError(f"the {muxer} muxer refused {streams} ({refused})") from e
        if e.errno not in _REFUSALS:
            raise
        raise ValueError(f"{codec} cannot encode {what} with these settings ({e.strerror})") from e
    finally:
        said.close()


def _open_output(tmp: Path, target: Path):
    try:
        # file: so that a ':' in the name is no protocol. The muxer waits for every stream's packets, however
        # far apart: audio is written as soon as it is made, and a frame seconds long (--fps 1/10) would
        # otherwise come after audio written past it, which FLV refuses (its packets must go in time order).
        return av.open(file_url(str(tmp)), "w", container_options={"max_interleave_delta": "0"})
    except ValueError as e:  # no muxer for the name's extension (the temporary name keeps it)
        raise ValueError(f"{target}: cannot choose a container from the name ({e}); end it in .mp4, .mkv "
                         "or .nut") from e
