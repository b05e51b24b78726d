"""Synthetic test and benchmark clips: ``pipeline sample``.

Frames carry texture, gradients, moving shapes and a large frame counter, so
that encoders, decoders and filters see realistic detail and motion, and a
viewer (or a test) can tell which frame it is looking at after lossy coding.

    pipeline sample                     # samples/sample.mp4 (the repository's copy is committed)
    pipeline sample 1080p               # samples/bench_1080p.mp4
    pipeline sample raw4k --frames 30

Outputs go under ``samples/`` in the current directory unless ``-o`` says otherwise. The command
line is in :mod:`pipeline.cli`, which imports this module (and so PyAV and OpenCV) only when run.
The picture itself (:func:`synth_frame`) is drawn by :mod:`pipeline.synth`; here are its colour tags,
the clip writer and the command.
"""

from __future__ import annotations

import errno
import math
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from av.video.reformatter import ColorPrimaries, ColorRange, Colorspace, ColorTrc

from . import synth
from .checks import check_output
from .config import file_url, is_url
from .errors import ConfigError, Interrupted, OutputError, PipelineError, stop_signals
from .outfile import create_like, final_path, place_output, remove_stale_partials, temp_path_for
from .sink import check_hardware_encoder
from .stdio import say, stdout_errors
from .synth import synth_frame
from .video import MAX_SIDE

# What FFmpeg answers when it cannot do what the settings ask (as opposed to a write that failed)
_REFUSALS = {errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}

AUDIO_RATE = 48000
AUDIO_LEVEL = 0.2  # well below full scale so AAC never clips

# Codecs refused at odd sizes whatever the pixel format: libx264 rejects
# them for 4:2:0, and the pipeline's H.264 paths assume even sizes.
EVEN_SIZE_CODECS = {"libx264"}

# FFmpeg holds a frame rate as a fraction of C ints.
INT_MAX = 2**31 - 1

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


def colour_tags(height: int, hdr: bool = False) -> ColourTags:
    """HD and up is BT.709, SD is BT.601; both limited range, as broadcast
    and most players assume when a stream is untagged. ``hdr``: BT.2020 PQ."""
    if hdr:
        return BT2020_PQ
    return BT709 if height >= 720 else BT601


def rgb_to_frame(rgb: np.ndarray, pix_fmt: str, hdr: bool = False) -> av.VideoFrame:
    """Convert an RGB frame to ``pix_fmt`` with the matrix its tags declare."""
    tags = colour_tags(rgb.shape[0], hdr)
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
    if rate <= 0:
        raise ValueError(f"fps must be positive, got {fps}")
    if rate.numerator > INT_MAX:
        raise ValueError(f"fps {fps:g} is too high")
    return rate


def _is_subsampled(pix_fmt: str) -> bool:
    fmt = av.VideoFormat(pix_fmt)  # ValueError for an unknown name
    return fmt.chroma_width(2) < 2 or fmt.chroma_height(2) < 2


def _check_codec(codec: str) -> None:
    kind = av.Codec(codec, "w").type  # UnknownCodecError for a name FFmpeg has no encoder for
    if kind != "video":
        raise ValueError(f"{codec} encodes {kind}, not video; --codec takes a video encoder (libx264, ffv1, ...)")


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
    _check_codec(codec)
    if width % 2 or height % 2:
        if codec in EVEN_SIZE_CODECS:
            raise ValueError(f"{codec} needs even dimensions, got {width}x{height}")
        # PyAV cannot build or read back subsampled frames of odd size.
        if _is_subsampled(pix_fmt):
            raise ValueError(
                f"{pix_fmt} needs even dimensions, got {width}x{height}; use yuv444p or gray"
            )


def _video_options(codec: str, crf: int | None, options: dict | None, hdr: bool = False) -> dict[str, str]:
    opts: dict[str, str] = {}
    if codec == "libx264":
        opts["preset"] = "veryfast"
        if crf is not None:
            opts["crf"] = str(crf)
    if codec == "libx265":
        opts["x265-params"] = "log-level=error"
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
    tags = colour_tags(height, hdr)
    ctx.colorspace = tags.colorspace
    ctx.color_range = tags.color_range
    ctx.color_primaries = tags.primaries
    ctx.color_trc = tags.trc
    return stream


def _add_audio(container) -> av.audio.stream.AudioStream:
    stream = container.add_stream("aac", rate=AUDIO_RATE)
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
            # Keep audio in step with video so the muxer's interleaving
            # queue stays short.
            audio_end = round((i + 1) * AUDIO_RATE / rate)
            if audio_end > audio_done:
                container.mux(astream.encode(_audio_frame(audio_done, audio_end, seed)))
                audio_done = audio_end
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
    tmp = temp_path_for(final)
    try:
        with _open_output(tmp, path) as container:
            opts = _video_options(codec, crf, options, hdr)
            vstream = _add_video(container, codec, width, height, rate, pix_fmt, opts, hdr)
            astream = _add_audio(container) if audio else None
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
        place_output(tmp, final, overwrite, name=path)
    except BaseException:
        # A half-written clip looks valid to a quick glance; do not leave one.
        tmp.unlink(missing_ok=True)
        raise
    return path


def _open_output(tmp: Path, target: Path):
    create_like(tmp, target)
    try:
        return av.open(file_url(str(tmp)), "w")  # file: so that a ':' in the name is no protocol
    except ValueError as e:  # no muxer for the name's extension (the temporary name keeps it)
        raise ValueError(f"{target}: cannot choose a container from the name ({e}); end it in .mp4, .mkv "
                         "or .nut") from e


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Preset:
    path: str
    width: int
    height: int
    fps: float
    frames: int
    codec: str = "libx264"
    pix_fmt: str = "yuv420p"
    audio: bool = True
    crf: int | None = None


PRESETS = {  # the names `pipeline sample` takes (listed in pipeline/cli.py's help too)
    # Committed to the repo, so kept small.
    "sample": Preset("samples/sample.mp4", 640, 360, 30, 90, crf=28),
    "1080p": Preset("samples/bench_1080p.mp4", 1920, 1080, 60, 600, crf=23),
    "4k": Preset("samples/bench_4k.mp4", 3840, 2160, 30, 300),
    # Uncompressed: decode cost is near zero, so the benchmark measures the
    # pipeline. Matroska rather than NUT because it carries the colour tags.
    "raw1080p": Preset("samples/bench_1080p_raw.mkv", 1920, 1080, 60, 300, "rawvideo", audio=False),
    "raw4k": Preset("samples/bench_4k_raw.mkv", 3840, 2160, 30, 120, "rawvideo", audio=False),
}

# Containers for codecs that MP4 cannot carry, used when --codec changes a
# preset's codec without -o.
CODEC_SUFFIX = {"rawvideo": ".mkv", "ffv1": ".mkv"}


def _output_path(args, preset: Preset, codec: str) -> Path:
    if args.output is not None:
        if is_url(args.output):  # Path would fold udp://host into a local udp:/host
            raise ConfigError(f"{args.output}: sample writes a file, not a URL")
        return Path(args.output)
    path = Path(preset.path)
    if codec != preset.codec and codec in CODEC_SUFFIX:
        path = path.with_suffix(CODEC_SUFFIX[codec])
    return path


def _check_target(out: Path, default: bool, overwrite: bool) -> None:
    """As ``pipeline run`` checks its output, before anything is encoded. A clip's own folder (``samples/``)
    is made by :func:`make_clip` where it is missing (nothing there to lose); the one of a -o must exist."""
    if default and not out.parent.exists():
        return
    check_output(None, out, overwrite)
    remove_stale_partials(out)  # the temporary files of earlier runs killed mid-write


@contextmanager
def _stopped_by_signals(tmp: Path) -> Iterator[Callable[[], None]]:
    """SIGINT, SIGTERM and SIGHUP stop the clip before its next frame with none written (exit 130/143/129;
    SIGINT or SIGHUP ignored at the start, ``cmd &`` or ``nohup``, stays ignored): a clip cut short is not
    the one asked for. Yields :func:`make_clip`'s checkpoint, which raises Interrupted once a signal came,
    and :func:`make_clip` removes ``tmp`` on the way out; a second signal, while that happens, removes it
    itself and leaves at once, as ``pipeline run`` does. A signal after the last checkpoint, while the
    finished clip is moved into place (a rename), is too late to stop it: the clip is written.

    The handler only records the signal. Raised from the handler, where the main thread happens to be,
    the exception can land inside PyAV's own error handling (one raised while its audio resampler reads
    the EAGAIN that ends its output is taken for that EAGAIN) and be lost: the clip then went on to the end."""
    stopping: list[int] = []

    def handler(signum, frame):
        if stopping:
            try:
                tmp.unlink()
                what = ", no clip written"
            except OSError:  # not made yet, or already moved into place
                what = ""
            say(f"pipeline: {signal.Signals(signum).name} again: exiting now{what}\n")
            os._exit(128 + signum)
        stopping.append(signum)

    def checkpoint() -> None:
        if stopping:
            raise Interrupted(stopping[0], "no clip written")

    previous = {sig: signal.signal(sig, handler) for sig in stop_signals()}
    try:
        yield checkpoint
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


MAX_GOP = 100_000  # frames between keyframes; more is no GOP at all
MAX_CRF = 51  # libx264's worst quality at 8 bits (FFmpeg passes any larger value on, and x264 clamps it)


def _check_crf(crf: int | None, codec: str) -> None:
    if crf is None:
        return
    if codec != "libx264":  # the other encoders have no such option here: it would be dropped unseen
        raise ConfigError(f"--crf sets libx264's quality; --codec {codec} does not take it")
    if not 0 <= crf <= MAX_CRF:
        raise ConfigError(f"Invalid --crf ({crf}). Supported values are 0 (lossless) to {MAX_CRF}.")


def run(args) -> int:
    """``pipeline sample``, with the options parsed by :mod:`pipeline.cli`; prints what it wrote."""
    preset = PRESETS.get(args.name)
    if preset is None:
        raise ConfigError(f"unknown sample {args.name!r}; known: {', '.join(PRESETS)}")
    width, height = args.size or (preset.width, preset.height)
    codec = args.codec or preset.codec
    frames = args.frames if args.frames is not None else preset.frames
    fps = args.fps if args.fps is not None else preset.fps
    out = _output_path(args, preset, codec)
    if args.gop is not None and not 1 <= args.gop <= MAX_GOP:
        raise ConfigError(f"Invalid --gop ({args.gop}). Supported values are 1 to {MAX_GOP} frames.")
    _check_crf(args.crf, codec)
    check_hardware_encoder(codec)  # an absent one is a usage error, as for pipeline run, not a write error
    _check_target(out, args.output is None, bool(args.overwrite))
    try:
        with _stopped_by_signals(temp_path_for(final_path(out))) as checkpoint:  # where make_clip writes
            path = make_clip(
                out,
                width=width,
                height=height,
                frames=frames,
                fps=fps,
                codec=codec,
                pix_fmt=args.pix_fmt or preset.pix_fmt,
                audio=preset.audio and not args.no_audio,
                seed=args.seed,
                crf=args.crf if args.crf is not None else preset.crf,
                options={"g": str(args.gop)} if args.gop is not None else None,
                overwrite=bool(args.overwrite),
                checkpoint=checkpoint,
            )
    except PipelineError:  # a signal, a target that appeared during the run: already one line of ours
        raise
    except OSError as e:
        if isinstance(e, av.error.FFmpegError) and e.errno in _REFUSALS:  # the settings, not the writing
            pix_fmt = args.pix_fmt or preset.pix_fmt
            raise ConfigError(f"sample: {e.strerror or e} (codec {codec!r}, pixel format {pix_fmt!r})") from e
        raise OutputError(f"{out}: cannot write: {e.strerror or e}") from e
    except av.codec.codec.UnknownCodecError:
        raise ConfigError(f"sample: unknown codec {codec!r}") from None
    except (ValueError, av.error.FFmpegError) as e:  # bad values, or ones the encoder refuses when it opens
        raise ConfigError(f"sample: {e}") from e
    size_mb = path.stat().st_size / 1e6
    duration = frames / _as_rate(fps)
    with stdout_errors(f"; {_display(path)} is complete"):
        print(f"{_display(path)}  {size_mb:.2f} MB  {frames} frames  {float(duration):.2f} s")
    return 0
