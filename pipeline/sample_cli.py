"""``pipeline sample``: the command that writes a synthetic clip (:mod:`pipeline.sample` draws and encodes
it), its presets, and its stop on a signal."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .checks import check_output
from .config import is_pipe_name, is_url
from .errors import ConfigError, Interrupted, stop_signals
from .outfile import final_path, open_directory, temp_path_for
from .sample import _as_rate, clip_errors, make_clip, usual_pix_fmt
from .encoders import check_hardware_encoder
from .stdio import say, stdout_errors


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

log = logging.getLogger(__name__)

# Containers for codecs that MP4 cannot carry, used when --codec changes a
# preset's codec without -o.
CODEC_SUFFIX = {"rawvideo": ".mkv", "ffv1": ".mkv"}


def _output_path(args, preset: Preset, codec: str) -> Path:
    if args.output is not None:
        if is_url(args.output):  # Path would fold udp://host into a local udp:/host
            raise ConfigError(f"{args.output}: sample writes a file, not a URL")
        if is_pipe_name(args.output):  # a clip is written under a temporary name, then put in place
            raise ConfigError(f"{args.output}: sample writes a file, not a pipe (pipeline run CLIP -o - -f mpegts "
                              "streams one)")
        return Path(args.output)
    path = Path(preset.path)
    if codec != preset.codec and codec in CODEC_SUFFIX:
        path = path.with_suffix(CODEC_SUFFIX[codec])
    return path


def _muxer_default(out: Path, codec: str, crf: int | None) -> str:
    """The clip's encoder, or the muxer's own where it cannot take that one's video, as ``pipeline run``
    picks (VP9 for ``.webm``, raw video for ``.y4m``, PNG for ``.png``); ``--crf`` is libx264's, refused then."""
    from .muxers import container_encoder
    from .sequence import ENCODERS

    picture = ENCODERS.get(out.suffix.lower())  # the image2 muxer's own default is mjpeg, whatever the name
    found = ("image2", picture) if picture else container_encoder(str(out), None, codec)
    if found is None:
        return codec
    muxer, encoder = found
    if crf is not None:
        raise ConfigError(f"{out}: --crf sets libx264's quality, which the {muxer} muxer cannot take; its "
                          f"usual {encoder} does not take --crf")
    usual = f"the {out.suffix.lower()} picture's" if picture else f"the {muxer} muxer's usual video"
    log.info(f"{out}: encoding {encoder}, {usual}, in place of {codec} (--codec picks another)")
    return encoder


def _check_target(out: Path, default: bool, overwrite: bool, frames: int) -> None:
    """As ``pipeline run`` checks its output, before anything is encoded. A clip's own folder (``samples/``)
    is made by :func:`make_clip` where it is missing (nothing there to lose); the one of a -o must exist."""
    from .sequence import is_picture, is_sequence

    if is_sequence(out):  # the image2 muxer would expand it in the temporary name, which then cannot be found
        raise ConfigError(f"{out}: a sample is one clip; a frame-number pattern (%d) writes an image sequence, "
                          "which `pipeline run CLIP -o frames/%04d.png` makes from it")
    if is_picture(out) and frames != 1:  # the image2 muxer would fail at the second frame
        raise ConfigError(f"{out}: one picture holds one frame; add --frames 1")
    if default and not out.parent.exists():
        return
    check_output(None, out, overwrite)  # make_clip's staging removes the temporary files of runs killed mid-write


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
    held = open_directory(tmp.parent)  # the file is named in it: a directory moved during the run loses it too

    def handler(signum, frame):
        if stopping:
            try:
                os.unlink(tmp.name if held is not None else tmp, dir_fd=held)
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
        if held is not None:
            os.close(held)


def _display(path: Path) -> str:
    """The path as the user would write it, on one line of a terminal (an ESC in a name is escaped)."""
    from .log import printable

    try:
        return printable(str(path.resolve().relative_to(Path.cwd())))
    except ValueError:
        return printable(str(path))


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
    _check_target(out, args.output is None, bool(args.overwrite), frames)
    if args.codec is None:
        codec = _muxer_default(out, codec, args.crf)
    _check_crf(args.crf, codec)
    check_hardware_encoder(codec)  # an absent one is a usage error, as for pipeline run, not a write error
    pix_fmt = args.pix_fmt or usual_pix_fmt(codec, preset.pix_fmt)
    with clip_errors(out, codec, pix_fmt), _stopped_by_signals(temp_path_for(final_path(out))) as checkpoint:
        path = make_clip(  # checkpoint: make_clip writes beside the target, and stops there on a signal
            out,
            width=width,
            height=height,
            frames=frames,
            fps=fps,
            codec=codec,
            pix_fmt=pix_fmt,
            audio=preset.audio and not args.no_audio,
            seed=args.seed,
            crf=args.crf if args.crf is not None else preset.crf,
            options={"g": str(args.gop)} if args.gop is not None else None,
            overwrite=bool(args.overwrite),
            checkpoint=checkpoint,
        )
    try:
        size = f"  {path.stat().st_size / 1e6:.2f} MB"
    except OSError:  # its directory was moved during the run (make_clip said where), or it is gone already
        size = ""
    duration = frames / _as_rate(fps)
    with stdout_errors(f"; {_display(path)} is complete"):
        print(f"{_display(path)}{size}  {frames} frames  {float(duration):.2f} s")
    return 0
