"""Image-sequence outputs: ``-o frames/%04d.png``, one picture a frame, as FFmpeg's image2 muxer writes them.

A name with a frame-number pattern (``%d``, ``%04d``) and a picture's extension is a sequence. Its frames
are written into a hidden directory beside them (named as a single output's temporary file, without the
``%``, which the muxer would read as a pattern) and moved into place one by one once the run has completed, so a failed or interrupted run leaves
none of its frames and every frame placed is whole. Without ``-y`` no frame of the pattern may exist
before the run, nor appear during it; with it, frames of the same numbers are replaced and others (a
longer earlier run's) are left. The encoder is the picture format's (``png`` for .png, ``mjpeg`` for
.jpg, ...) unless ``-c`` names another, and the audio is left out: a picture has none.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import threading
from pathlib import Path

from .checks import real_path
from .config import is_default_codec
from .errors import ConfigError, OutputError

# The picture formats FFmpeg's image2 muxer writes, by extension, and the encoder each takes (FFmpeg's own
# table, libavformat/img2.c: the muxer's default is mjpeg whatever the name, where ffmpeg looks the name up).
ENCODERS = {".png": "png", ".jpg": "mjpeg", ".jpeg": "mjpeg", ".bmp": "bmp", ".tif": "tiff", ".tiff": "tiff",
            ".ppm": "ppm", ".pgm": "pgm", ".pam": "pam", ".tga": "targa", ".dpx": "dpx", ".exr": "exr",
            ".webp": "libwebp", ".qoi": "qoi", ".j2k": "jpeg2000", ".jp2": "jpeg2000", ".j2c": "jpeg2000",
            ".pbm": "pbm", ".pfm": "pfm", ".phm": "phm", ".pgmyuv": "pgmyuv", ".pcx": "pcx", ".sgi": "sgi",
            ".xbm": "xbm", ".xwd": "xwd", ".xface": "xface", ".wbmp": "wbmp", ".vbn": "vbn", ".hdr": "hdr",
            ".pix": "alias_pix", ".jls": "jpegls", ".ljpg": "ljpeg", ".jxl": "libjxl", ".jxs": "libsvtjpegxs",
            ".y": "rawvideo", **dict.fromkeys((".sun", ".ras", ".rs", ".im1", ".im8", ".im24", ".sunras"), "sunrast")}
_PATTERN = re.compile(r"%(0?)(\d*)d")


def _is_picture(target: Path, output_format: str | None) -> bool:
    """Written by the image2 muxer: named with -f, or chosen by FFmpeg from the name (-f matroska x.png is a
    Matroska file)."""
    return output_format == "image2" if output_format else target.suffix.lower() in ENCODERS


def is_sequence(target: Path | str, output_format: str | None = None) -> bool:
    """A local output named with one frame-number pattern, as a picture (or with ``--format image2``)."""
    if not isinstance(target, Path) or "%%" in target.name:  # a literal % is not worth the ambiguity
        return False
    return len(_PATTERN.findall(target.name)) == 1 and _is_picture(target, output_format)


def is_picture(target: Path | str, output_format: str | None = None) -> bool:
    """A local output the image2 muxer writes: a sequence, or one picture (``-o thumb.png --frames 1``)."""
    return isinstance(target, Path) and _is_picture(target, output_format)


def check_single_picture(target: Path, final: Path, output_format: str | None) -> None:
    """A picture named without one frame-number pattern is one picture, which the image2 muxer still names
    by expanding each ``%`` of its path (``e%d%d.png`` became e11.png, ``dir%04d/f.png`` dir0001/f.png) and
    the finished file could not be put in place: refuse a ``%`` in such a path before the run."""
    if not is_picture(target, output_format):
        return
    if "%" in str(target) or "%" in str(final):
        raise ConfigError(f"{target}: a picture's path holds '%' only as one frame-number pattern in its "
                          "file name (frames/%04d.png); rename it")


def encoder_for(target: Path, codec: str) -> str:
    """``codec``, or the picture format's encoder where no one chose one (libx264, the default, is a video
    encoder). A ``-c libx264`` someone gave stays: the image2 muxer then refuses it, as for a file."""
    return ENCODERS.get(target.suffix.lower(), codec) if is_default_codec(codec) else codec


def frame_names(target: Path) -> re.Pattern:
    """The names the pattern gives its frames (``f%03d.png``: f000.png ... f1234.png; ``%3d`` pads with
    spaces, as printf does)."""
    match = _PATTERN.search(target.name)
    head, tail = target.name[:match.start()], target.name[match.end():]
    width = max(1, int(match.group(2) or 1))
    number = rf"\d{{{width},}}" if match.group(1) else r" *\d+"
    return re.compile(re.escape(head) + number + re.escape(tail))


def frame_name(target: Path, number: int) -> str:
    """The name of frame ``number`` of the pattern ``target``."""
    match = _PATTERN.search(target.name)
    width = int(match.group(2) or 0)
    digits = f"{number:0{width}d}" if match.group(1) else f"{number:{width}d}"
    return target.name[:match.start()] + digits + target.name[match.end():]


def is_frame_of(path: Path, target: Path) -> bool:
    """``path`` is one of the frames the sequence ``target`` writes."""
    if not is_sequence(target) or not frame_names(target).fullmatch(path.name):
        return False
    try:
        return real_path(path.parent) == real_path(target.parent)
    except OSError:
        return False


# Frame numbers whose names two patterns could share: each of a pattern's widths is reached at a power of ten.
_PROBES = (*range(1, 10), *(10 ** k + d for k in range(1, 13) for d in (0, 1)))


def overlaps(a: Path, b: Path) -> bool:
    """Two outputs one of whose files is the other's: a sequence and one of its frames, or two sequences of
    one directory whose frame names meet (f%d.png and f%02d.png both write f10.png)."""
    if is_sequence(a) and not is_sequence(b):
        return is_frame_of(b, a)
    if is_sequence(b) and not is_sequence(a):
        return is_frame_of(a, b)
    if not is_sequence(a):
        return False
    try:
        if real_path(a.parent) != real_path(b.parent):
            return False
    except OSError:
        return False
    theirs = frame_names(b)
    return any(theirs.fullmatch(frame_name(a, n)) for n in _PROBES)


def muxer_path(path: Path) -> str:
    """``path`` as the image2 muxer must be given it: it expands every ``%`` of the whole path, so all but
    the frame number's are doubled."""
    match = _PATTERN.search(path.name)
    name = (path.name[:match.start()].replace("%", "%%") + match.group(0)
            + path.name[match.end():].replace("%", "%%"))
    return str(path.parent).replace("%", "%%") + os.sep + name


def existing_frames(target: Path) -> list[str]:
    """Files of the pattern already in its directory."""
    names = frame_names(target)
    try:
        entries = os.listdir(target.parent if str(target.parent) else ".")
    except OSError:
        return []
    return sorted(n for n in entries if names.fullmatch(n))


def check_frames(source: str | None, target: Path, overwrite: bool, is_input) -> None:
    """Before the run: the frames already there (the directory is checked as for any output) are not the
    input, are regular files, and exist only with ``-y``; a frame that is a symbolic link is written
    through it (:func:`linked_frames`)."""
    found = existing_frames(target)
    frames = [target.with_name(name) for name in found]
    if source is not None and any(is_input(frame, source) for frame in frames):
        raise ConfigError(f"{target}: the input is one of this pattern's frames; choose another -o")
    for frame in frames:
        _check_replaceable(frame)
    if found and not overwrite:
        raise ConfigError(f"{target}: {len(found)} frame(s) of this pattern already exist ({found[0]}, ...); "
                          "use -y/--overwrite to replace them")
    linked_frames(target)


def linked_frames(target: Path) -> list[Path]:
    """The files the frames of ``target`` that are symbolic links name (a frame is written through its
    link, as ffmpeg writes). Refused, before the run: a link that cannot be followed, one into a missing
    or read-only directory, one onto another frame of the sequence (two frames, one file) or onto the
    name the run stages its frames under."""
    from .outfile import final_path

    staged_as = target.with_name(target.name.replace("%", "_"))
    found: dict[Path, Path] = {}  # file: the frame linking to it
    for name in existing_frames(target):
        frame = target.with_name(name)
        if not frame.is_symlink():
            continue
        file = final_path(frame)  # an OutputError for a loop
        parent = file.parent
        if file in found:
            raise OutputError(f"{frame}: a link to {file}, as {found[file].name} is; a frame would be lost")
        if is_frame_of(file, target):
            raise OutputError(f"{frame}: a link to {file}, which this run writes as another frame; "
                              "a frame would be lost")
        if file == real_path(staged_as):
            raise OutputError(f"{frame}: a link to {file}, the name this run stages its frames under")
        if not parent.is_dir():
            raise OutputError(f"{frame}: a link into {parent}, which does not exist")
        if not os.access(parent, os.W_OK):
            raise OutputError(f"{frame}: a link into {parent}, which is not writable")
        found[file] = frame
    return list(found)


def _check_replaceable(frame: Path) -> None:
    """Only regular files are replaced (a FIFO, a device or a directory named like a frame is kept)."""
    from .checks import special_kind

    kind = "directory" if frame.is_dir() else special_kind(frame)
    if kind is not None:
        raise OutputError(f"{frame}: is a {kind}, not a regular file; only regular files are replaced")


def _keep_mode(staged: Path, target: Path) -> None:
    """A frame that replaces a file keeps that file's permissions, as a single output does (a private
    picture stays private)."""
    from .outfile import replaced_mode

    mode = replaced_mode(target)
    if mode is not None:
        with contextlib.suppress(OSError):
            os.chmod(staged, mode)


def _beside(staged: Path, target: Path) -> Path:
    """``staged`` moved next to ``target`` under a temporary name (copied where the two are on different
    file systems), so that it replaces ``target`` in one rename."""
    from .outfile import temp_path_for

    moved = temp_path_for(target)
    try:
        try:
            os.rename(staged, moved)
        except OSError as e:
            if e.errno != errno.EXDEV:
                raise
            shutil.copyfile(staged, moved)  # another file system
            staged.unlink()
    except OSError as e:
        with contextlib.suppress(OSError):
            moved.unlink(missing_ok=True)
        raise OutputError(f"{target}: cannot write the frame there: {e.strerror or e}") from e
    return moved


class StagedSequence:
    """A sequence's frames, written into a hidden directory and moved into place when the run completes
    (the sink's counterpart of :class:`pipeline.outfile.StagedFile`)."""

    def __init__(self, final: Path):
        from .outfile import temp_path_for

        self.final = final
        # named as a single output's temporary file is, without the % the muxer would expand
        self._named = final.with_name(final.name.replace("%", "_"))
        self.dir = temp_path_for(self._named)
        self.path = self.dir / final.name  # the pattern, in the staging directory
        self.muxer_path = muxer_path(self.path)
        self._head = _PATTERN.search(final.name).start()  # where a frame's number starts in its name
        self._whole = (0, 0)  # frames known to be whole, and their bytes (written_bytes)
        # Frames being moved into place: the staging must not be discarded now (hold). The gate makes
        # "discarded" and "placing" exclusive without a signal handler ever waiting on it.
        self.placing = False
        self._discarded = False
        self._gate = threading.Lock()
        self._outside: Path | None = None  # a frame moved beside the file a link names, not yet renamed onto it
        self._claimed = False

    def prepare(self) -> None:
        from .outfile import claim_temporary, release_temporary, remove_stale_partials

        claim_temporary(self.dir, self.final)
        self._claimed = True  # from here the staging directory is this run's to remove
        remove_stale_partials(self._named)
        try:
            self.dir.mkdir()
        except OSError as e:
            self._claimed = False
            release_temporary(self.dir)
            raise OutputError(f"{self.final}: cannot create output: {e.strerror or e}") from e

    def place(self, overwrite: bool, name) -> None:
        """Every frame moved into place, each destination checked before any is moved: without
        ``overwrite`` none may exist, with it each must be a regular file, and a frame that is a symbolic
        link is written through it, as ffmpeg and a single output file do (the link stays a link). On any
        failure the staging directory is removed; a failure while moving (another process racing) says how
        many were placed."""
        from .outfile import final_path, place_output, release_temporary

        frames, placed = sorted(os.listdir(self.dir), key=self._number), 0
        try:
            targets = []
            for f in frames:
                destination = self.final.parent / f
                if not overwrite and os.path.lexists(destination):
                    raise ConfigError(f"{name}: {f} appeared during the run (another process wrote it); kept as "
                                      "it is, no frame written (use -y/--overwrite to replace them)")
                if overwrite:
                    _check_replaceable(destination)
                targets.append(final_path(destination) if overwrite else destination)
            with self._gate:
                if self._discarded:
                    raise OutputError(f"{name}: the frames were discarded (a second signal); none placed")
                self.placing = True
            for f, target in zip(frames, targets):
                staged = self.dir / f
                if overwrite:
                    _keep_mode(staged, target)
                if target != self.final.parent / f:  # through a link: the file goes beside the one it names
                    staged = self._outside = _beside(staged, target)
                place_output(staged, target, overwrite, name=self.final.parent / f)
                self._outside = None
                placed += 1
        except BaseException as e:
            self.placing = False
            self.discard()
            if placed and isinstance(e, (ConfigError, OutputError)):
                raise type(e)(f"{e} ({placed} of {len(frames)} frames were placed before it)") from e
            if placed and isinstance(e, OSError):  # a frame the directory would not let be replaced
                raise OutputError(f"{name}: cannot place {frames[placed]}: {e.strerror or e} ({placed} of "
                                  f"{len(frames)} frames were placed before it)") from e
            raise
        self.placing = False
        self.dir.rmdir()
        self._claimed = False
        release_temporary(self.dir)

    def _number(self, name: str) -> tuple[int, str]:
        """Frames in the muxer's order, by number (f9.png before f10.png), as ffmpeg writes them."""
        digits = frame_names(self.final).fullmatch(name) and re.search(r"\d+", name[self._head:])
        return (int(digits.group()), name) if digits else (-1, name)

    def discard(self) -> None:
        """Remove the staged frames (those already placed stay), the one on its way beside a link included."""
        from .outfile import release_temporary

        if not self._claimed:  # refused at prepare: the staging directory is another run's
            return
        shutil.rmtree(self.dir, ignore_errors=True)
        release_temporary(self.dir)
        self._claimed = False  # a second discard must not remove what another run has claimed since
        outside = self._outside
        if outside is not None:
            with contextlib.suppress(OSError):
                outside.unlink(missing_ok=True)

    def hold(self) -> bool:
        """Take the gate without waiting, unless the frames are being placed: False then, and nothing held.
        Holding it, the placing cannot start; :meth:`discard_held` or :meth:`release` ends the hold."""
        if not self._gate.acquire(blocking=False):
            return False
        if self.placing:
            self._gate.release()
            return False
        return True

    def release(self) -> None:
        self._gate.release()

    def discard_held(self) -> None:
        """Discard, with the gate held (:meth:`hold`): the frames will never be placed."""
        self._discarded = True
        self._gate.release()
        self.discard()

    def written_bytes(self) -> int | None:
        """The frames' bytes so far (for ``-progress``, once a second): the muxer writes frame 1, 2, ... in
        turn, so each call looks only at the frames after the ones known to be whole (a frame is whole once
        the next exists), not at the whole directory."""
        directory = self.dir if self.dir.exists() else self.final.parent  # placed once the run completed
        whole, counted = self._whole
        sizes = []
        while True:
            try:
                sizes.append((directory / frame_name(self.final, whole + len(sizes) + 1)).stat().st_size)
            except OSError:
                break
        if len(sizes) > 1:
            self._whole = (whole + len(sizes) - 1, counted + sum(sizes[:-1]))
        if not whole and not sizes:  # numbered from elsewhere (--output-opt start_number): look at them all
            return sum((directory / n).stat().st_size for n in existing_frames(directory / self.final.name))
        return counted + sum(sizes)
