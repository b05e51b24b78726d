"""Image-sequence outputs: ``-o frames/%04d.png``, one picture a frame, as FFmpeg's image2 muxer writes them.

A name with a frame-number pattern (``%d``, ``%04d``) and a picture's extension is a sequence. Its frames
are written into a hidden directory beside them (named without the ``%``, which the muxer would read as a
pattern) and moved into place one by one once the run has completed, so a failed or interrupted run leaves
none of its frames and every frame placed is whole. Without ``-y`` no frame of the pattern may exist
before the run, nor appear during it; with it, frames of the same numbers are replaced and others (a
longer earlier run's) are left. The encoder is the picture format's (``png`` for .png, ``mjpeg`` for
.jpg, ...) unless ``-c`` names another, and the audio is left out: a picture has none.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from .errors import ConfigError, OutputError

# The picture formats FFmpeg's image2 muxer writes, by extension, and the encoder each takes.
ENCODERS = {".png": "png", ".jpg": "mjpeg", ".jpeg": "mjpeg", ".bmp": "bmp", ".tif": "tiff", ".tiff": "tiff",
            ".ppm": "ppm", ".pgm": "pgm", ".pam": "pam", ".tga": "targa", ".dpx": "dpx", ".exr": "exr",
            ".webp": "libwebp", ".qoi": "qoi", ".j2k": "jpeg2000", ".jp2": "jpeg2000"}
_PATTERN = re.compile(r"%(0?)(\d*)d")
_STAGING = ".partial-"


def is_sequence(target: Path | str, output_format: str | None = None) -> bool:
    """A local output named with one frame-number pattern, as a picture (or with ``--format image2``)."""
    if not isinstance(target, Path) or "%%" in target.name:  # a literal % is not worth the ambiguity
        return False
    return len(_PATTERN.findall(target.name)) == 1 and (output_format == "image2"
                                                          or target.suffix.lower() in ENCODERS)


def encoder_for(target: Path, codec: str, default: str) -> str:
    """``codec``, or the picture format's encoder where ``codec`` is the default (a video encoder)."""
    return ENCODERS.get(target.suffix.lower(), codec) if codec == default else codec


def frame_names(target: Path) -> re.Pattern:
    """The names the pattern gives its frames (``f%03d.png``: f000.png ... f1234.png)."""
    match = _PATTERN.search(target.name)
    head, tail = target.name[:match.start()], target.name[match.end():]
    width = int(match.group(2) or 1)
    return re.compile(re.escape(head) + rf"\d{{{width},}}" + re.escape(tail))


def existing_frames(target: Path) -> list[str]:
    """Files of the pattern already in its directory."""
    names = frame_names(target)
    try:
        entries = os.listdir(target.parent if str(target.parent) else ".")
    except OSError:
        return []
    return sorted(n for n in entries if names.fullmatch(n))


def check_sequence(target: Path, overwrite: bool) -> None:
    """Before the run: a directory to write into, and no frame there already unless ``-y``."""
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"{target}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"{target}: directory {parent} is not writable")
    found = existing_frames(target)
    if found and not overwrite:
        raise ConfigError(f"{target}: {len(found)} frame(s) of this pattern already exist ({found[0]}, ...); "
                          "use -y/--overwrite to replace them")


class StagedSequence:
    """A sequence's frames, written into a hidden directory and moved into place when the run completes
    (the sink's counterpart of :class:`pipeline.outfile.StagedFile`)."""

    def __init__(self, final: Path):
        self.final = final
        stem = final.name.replace("%", "_")  # the muxer would expand a % in the directory's name too
        self.dir = final.with_name(f".{stem}{_STAGING}{os.getpid()}")
        self.path = self.dir / final.name  # what the muxer is given

    def prepare(self) -> None:
        self.remove_stale()
        try:
            self.dir.mkdir()
        except OSError as e:
            raise OutputError(f"{self.final}: cannot create output: {e.strerror or e}") from e

    def place(self, overwrite: bool, name) -> None:
        """Every frame moved into place; without ``overwrite``, none if one appeared during the run."""
        from .outfile import place_output

        frames = sorted(os.listdir(self.dir))
        if not overwrite:
            taken = [f for f in frames if os.path.lexists(self.final.parent / f)]
            if taken:
                self.discard()
                raise ConfigError(f"{name}: {taken[0]} appeared during the run (another process wrote it); kept "
                                  "as it is, no frame written (use -y/--overwrite to replace them)")
        for f in frames:
            place_output(self.dir / f, self.final.parent / f, overwrite, name=self.final.parent / f)
        self.dir.rmdir()

    def discard(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def written_bytes(self) -> int | None:
        """The frames' bytes so far: in the staging directory, then (placed) the pattern's frames."""
        try:
            with os.scandir(self.dir) as entries:
                return sum(e.stat().st_size for e in entries)
        except OSError:
            pass
        try:
            return sum((self.final.parent / n).stat().st_size for n in existing_frames(self.final))
        except OSError:
            return None

    def remove_stale(self) -> None:
        """Staging directories of earlier runs into this pattern whose process is gone (killed mid-run)."""
        from .outfile import process_alive

        prefix = self.dir.name[:len(self.dir.name) - len(str(os.getpid()))]
        try:
            names = os.listdir(self.dir.parent if str(self.dir.parent) else ".")
        except OSError:
            return
        for name in names:
            pid = name[len(prefix):]
            if name.startswith(prefix) and pid.isdigit() and int(pid) != os.getpid() and not process_alive(int(pid)):
                shutil.rmtree(self.dir.parent / name, ignore_errors=True)
