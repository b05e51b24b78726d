"""Opening an input with PyAV: the checks before (a local path, a demuxer's name), the open itself with its
timeouts and NVDEC's stream analysis, and the checks after (options nobody used, a still image).

Kept apart from :mod:`pipeline.source`, which builds the decoding source on what this opens.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import av

from .avlib import READ_TAGS, ffmpeg_name, unused_demuxer_options
from .errors import ConfigError, DecoderRefused, GPUError, InputError

# The stream analysis of an NVDEC file: its probing decoders' skip_frame, its length (microseconds).
PROBE_HEADERS_ONLY = {"skip_frame": "all", "analyzeduration": "500000"}


def _declares_its_streams(path: str) -> bool:
    """A regular file in MP4/MOV or Matroska/WebM, whose header lists every stream with its parameters (a
    pipe or FIFO is analysed as it comes; MPEG-TS and others may show streams only in their packets)."""
    if not os.path.isfile(path):  # before opening: a FIFO's open waits for its writer
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError:
        return False
    return head[4:8] == b"ftyp" or head[:4] == b"\x1a\x45\xdf\xa3"


def open_file(path: str):
    """A local file, with FFmpeg's defaults."""
    return open_input(path, None, {}, None, local=True)


def open_input(path: str, input_format: str | None, options: dict[str, str], timeout: float | None, *,
               local: bool, hwaccel=None, headers_only: bool = False):
    """Open a file, URL or device. ``timeout`` bounds the open and the stream analysis (each) and
    then every read: without it a silent network source would block forever."""
    if local:
        check_local(path)
    if input_format is not None:
        _check_format(input_format)
    kwargs: dict = dict(READ_TAGS)
    if timeout:
        kwargs["timeout"] = (timeout, timeout)
    if hwaccel is not None:
        kwargs["hwaccel"] = hwaccel
    if hwaccel is not None and local and headers_only and _declares_its_streams(path):
        # The stream analysis would decode the first frame on one CPU core only to learn its pixel format
        # (0.14-0.19 s at 4K on the H200's host), which NVDEC's first frame says anyway. Its probing
        # decoders skip every frame, so it reads headers only (pix_fmt stays unset, so does the decoder's
        # delay: Matroska's video packets then have dts = pts, which nothing here reads; FFmpeg warns, at
        # debug); the stream's own decoder is not given the option. Never complete, the analysis would
        # read on to 5 s of input: half a second is enough for what it still measures, in a container
        # whose header declares every stream (the user's own analyzeduration wins). Asked for
        # (``headers_only``) where CuPy was up before the run (a later run, a batch worker's file): in a
        # fresh process that decode runs beside CuPy's import at no cost, and skipping it moved NVDEC's
        # own set-up into the import's way (1080p's first frame 458-468 ms after the imports, not 391-444).
        kwargs["options"] = {k: v for k, v in PROBE_HEADERS_ONLY.items() if k not in options}
    try:
        container = _open(path, input_format, local, options, kwargs)
    except RuntimeError as e:  # "Hardware accelerated decode requested but no stream is compatible"
        raise DecoderRefused(f"{path}: NVDEC cannot decode this stream: {e}") from e
    except av.error.ExitError as e:  # the interrupt callback: the open timeout expired
        raise InputError(f"{path}: nothing received within {timeout:g} s while opening "
                         "(is the source sending? --timeout sets the limit)") from e
    except av.error.FFmpegError as e:
        if hwaccel is not None and isinstance(e, OSError):  # no driver, or no device context: not the file
            raise GPUError(f"{path}: cannot open NVDEC on this GPU: {e}") from e
        refused = _REFUSED_OPTION.search(str(e))
        if refused and refused.group(1) in options:  # the user's value, not the input's fault
            key = refused.group(1)
            raise ConfigError(f"Invalid --input-opt {key}={options[key]}: the demuxer refused the value "
                              f"({e.strerror or 'out of range or malformed'})") from e
        raise InputError(f"{path}: cannot open as video: {_reason(e)}") from e
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot open: {e}") from e
    _check_input_options(container, path, input_format, options, local)
    if not local:
        return container
    if container.format.name.endswith("_pipe") or container.format.name == "image2":
        # A still image decodes as a one-frame "video"; a video pipeline should say so, not "succeed".
        container.close()
        raise InputError(f"{path}: is a still image ({container.format.name}), not a video")
    return container


def _reason(error: av.error.FFmpegError) -> str:
    """FFmpeg's words for a failed open: what its demuxer logged, then the error code's text, which alone can
    mislead (a y4m header of 100000x100000 is "Device or resource busy"); not the name FFmpeg was given."""
    said = error.strerror or str(error)
    logged = error.log[2].strip() if error.log and error.log[2] else ""
    return f"{logged} ({said})" if logged and logged != said else said


def _open(path: str, input_format: str | None, local: bool, options: dict[str, str], kwargs: dict):
    """``av.open``; a regular file FFmpeg's probe could not place is tried once more as its name says, where
    the demuxer of that name lists no extensions, so the probe never read the name: a file of a few MPEG-TS
    packets (a two-frame 16x16 clip, under about 2 KB) scores lower as TS than as MPEG-PS and did not open."""
    name = ffmpeg_name(path, input_format, local)
    try:
        return av.open(name, "r", format=input_format, container_options=options, **kwargs)
    except (av.error.EOFError, av.error.InvalidDataError) as e:
        named = None if input_format is not None or not local else _unprobed_demuxer(path)
        if named is None:
            raise
        try:
            return av.open(name, "r", format=named, container_options=options, **kwargs)
        except av.error.FFmpegError:
            raise e from None


def _unprobed_demuxer(path: str) -> str | None:
    """The demuxer of the muxer a regular file's extension names, where that demuxer lists no extensions."""
    from .avlib import guessed_muxer

    muxer = guessed_muxer(path) if os.path.isfile(path) else None
    try:
        demuxer = av.format.ContainerFormat(muxer, "r") if muxer else None
    except ValueError:  # a muxer without a demuxer of its name
        return None
    return muxer if demuxer is not None and not demuxer.extensions else None


# What FFmpeg logs when an option's value does not parse or is out of range (PyAV appends the last log line).
_REFUSED_OPTION = re.compile(r"Error setting option (\S+) to value ")


def _check_input_options(container, path: str, input_format: str | None, options: dict[str, str],
                         local: bool) -> None:
    """An --input-opt that the demuxer and the protocol under it would not use is refused, as ffmpeg
    refuses it ("Option ... not found"), rather than left unused (a typo such as probsize=32 ran with exit
    0 at the defaults). Checked for files, devices and pipes; a URL's protocols may nest (https over tls)
    and take their own options, so its keys are left to them."""
    if not options or not (local or path.startswith("pipe:")):
        return
    no_file = input_format is not None and av.format.ContainerFormat(input_format, "r").no_file
    protocol = None if local and no_file else "file" if local else "pipe"
    unused = unused_demuxer_options(container.format.name, protocol, options)
    if unused:
        container.close()
        listed = ", ".join(f"{k}={options[k]}" for k in unused)
        demuxer = container.format.name.split(",")[0]
        raise ConfigError(f"Invalid --input-opt {listed}: the {demuxer} demuxer does not use it (misspelled? "
                          f"`ffmpeg -h demuxer={demuxer}` lists its options; decoder options are not input options)")


def check_local(path: str) -> None:
    """A local input that is there and not a directory (InputError, one line, otherwise)."""
    if not path:  # Path("") is the current directory
        raise ConfigError("the input's name is empty (give a file, a URL, or - for stdin)")
    p = Path(path)
    try:
        exists = p.exists()
    except OSError as e:  # a name too long for the filesystem, a loop of links
        raise InputError(f"{path}: cannot open: {e.strerror}") from None
    if not exists:  # Path.exists() is False for a loop of links too
        try:
            os.stat(path)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise InputError(f"{path}: cannot open: {e.strerror}") from None
        raise InputError(f"{path}: no such file" + (" (a symbolic link to nothing)" if os.path.islink(path) else ""))
    if p.is_dir():
        raise InputError(f"{path}: is a directory")


def _check_format(name: str) -> None:
    try:
        av.format.ContainerFormat(name, "r")
    except ValueError:
        raise ConfigError(f"Invalid input format ({name!r}): FFmpeg has no such demuxer or device "
                          "(`ffmpeg -formats` lists them)") from None

