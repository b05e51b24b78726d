"""A file output's temporary name, and the last step: moving the finished temporary file onto the target.

The temporary file sits beside the target (beside the file it points to, for a symbolic link: see
:func:`final_path`), so the move is atomic, and keeps its suffix (so the muxer is
chosen from it); its name must fit the filesystem's limit however long the target's is.

The target is checked before the run, but a run takes time: another process may create the same name
meanwhile (two runs into one output). Without ``-y`` the move must then fail rather than replace that
file, atomically: ``renameat2(RENAME_NOREPLACE)``, or where the filesystem lacks it, ``link`` (which
never replaces) then ``unlink``. With ``-y`` only a regular file (or nothing) is replaced, and the new
file has its permissions from the start (:func:`create_like`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import shutil
import stat
import threading
from pathlib import Path

from .checks import special_kind
from .errors import ConfigError, OutputError
from .log import log
from .startup import libc

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
# The filesystem (FUSE without rename2, 9p, NFS) or the kernel cannot do it: try link + unlink instead.
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP}
_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS}  # link() on a filesystem without hard links


PARTIAL = ".partial-"
_PID_DIGITS = 7  # pid_max is at most 2**22 on Linux


def name_max(directory: Path) -> int:
    """The longest file name, in bytes, that ``directory``'s filesystem takes."""
    try:
        return os.pathconf(directory if str(directory) else ".", "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def partial_prefix(target: Path) -> str:
    """``.<stem>.partial-``, the stem shortened (and a digest of it added) when the whole temporary name
    would pass the limit: a 250-byte output name must still get a temporary file."""
    stem, suffix = target.stem, target.suffix
    room = name_max(target.parent) - len(os.fsencode(f".{PARTIAL}{suffix}")) - _PID_DIGITS
    return f".{fit_name(stem, room)}{PARTIAL}"


def fit_name(stem: str, room: int) -> str:
    """``stem``, or where it is longer than ``room`` bytes, its start (whole characters) and a digest of
    all of it, so that two long names cut alike stay apart."""
    if len(os.fsencode(stem)) <= room:
        return stem
    digest = "~" + hashlib.sha1(os.fsencode(stem)).hexdigest()[:10]
    return os.fsencode(stem)[: max(0, room - len(digest))].decode(errors="ignore") + digest


def final_path(target: Path) -> Path:
    """The file a finished run replaces: ``target`` itself, or, where it is a symbolic link, the file the
    link points to (through any chain of links), as ffmpeg writes through a link. The temporary file goes
    beside that file and is renamed onto it, so the link stays a link.

    A dangling link is followed too, as ffmpeg and a shell's ``>`` follow it: the run creates the file it
    names (its directory must exist), which is what a link made in advance for the output is for. A link
    that cannot be followed (a loop) is refused: renaming onto its name would replace the link."""
    if not target.is_symlink():
        return target
    try:
        return Path(os.path.realpath(target, strict=True))
    except FileNotFoundError:
        return Path(os.path.realpath(target))
    except OSError as e:
        raise OutputError(f"{target}: a symbolic link that cannot be followed ({e.strerror or e})") from None


def temp_path_for(target: Path, pid: int | None = None) -> Path:
    return target.with_name(f"{partial_prefix(target)}{pid or os.getpid()}{target.suffix}")


# Temporary names this process writes now. They carry the process id only (its other runs' files are not
# stale), so two runs of one process into one output (two threads, a stage running a run) would share one.
_WRITING: set[str] = set()
_WRITING_LOCK = threading.Lock()


def claim_temporary(tmp: Path, name) -> None:
    """Take ``tmp`` for this run; ConfigError where another run of this process has it."""
    key = os.path.abspath(tmp)
    with _WRITING_LOCK:
        if key in _WRITING:
            raise ConfigError(f"{name}: another run in this process is writing it now")
        _WRITING.add(key)


def release_temporary(tmp: Path) -> None:
    with _WRITING_LOCK:
        _WRITING.discard(os.path.abspath(tmp))


def abandon_temporaries() -> None:
    """Just before the process exits on a second signal: every temporary output of this process removed,
    that of a run still being set up (its output made, its stop not yet wired) too. A snapshot taken without
    the lock: this runs in a signal handler, which may have interrupted the lock's holder."""
    for path in tuple(_WRITING):
        with contextlib.suppress(OSError):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)  # an image sequence's staging directory
            else:
                os.unlink(path)


def _renameat2():
    try:
        function = libc().renameat2  # glibc >= 2.28
    except AttributeError:
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_RENAMEAT2 = _renameat2()


def rename_noreplace(src: Path | str, dst: Path | str, dir_fd: int | None = None) -> None:
    """Move ``src`` to ``dst`` unless ``dst`` exists (FileExistsError then, both left as they were); with
    ``dir_fd``, both names are taken in that directory."""
    if _RENAMEAT2 is not None:
        at = _AT_FDCWD if dir_fd is None else dir_fd
        if _RENAMEAT2(at, os.fsencode(src), at, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        code = ctypes.get_errno()
        if code not in _UNSUPPORTED:
            raise OSError(code, os.strerror(code), os.fspath(src), None, os.fspath(dst))
    _link_then_unlink(src, dst, dir_fd)


def replaced_mode(target: Path) -> int | None:
    """The permission bits of the regular file ``target`` (links followed), which what replaces it keeps;
    None when there is no such file."""
    try:
        mode = os.stat(target).st_mode
    except OSError:
        return None
    return stat.S_IMODE(mode) if stat.S_ISREG(mode) else None


def create_like(tmp: Path, target: Path) -> None:
    """Create the empty temporary file with the permissions of the file it will replace, before the muxer
    opens it (FFmpeg opens an existing file as it is): a private file replaced with -y is never readable
    by others while it is being written. Nothing to do when there is no such file."""
    mode = replaced_mode(target)
    if mode is None:
        return
    try:
        os.close(open_temporary(tmp, mode, truncate=True))
    except OSError:  # the muxer's own open says what is wrong
        return


def open_temporary(tmp: Path, mode: int | None, truncate: bool = False) -> int:
    """``tmp`` opened for writing, never through a link, with the permission bits ``mode`` (those of the
    file it will replace; None: a new file's) from its creation. Without ``truncate`` it must be new
    (FileExistsError otherwise)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    handle = os.open(tmp, flags | (os.O_TRUNC if truncate else os.O_EXCL), 0o666 if mode is None else mode & 0o600)
    if mode is not None:
        try:
            os.fchmod(handle, mode & 0o777)
        except OSError:
            pass
    return handle


def _link_then_unlink(src: Path | str, dst: Path | str, dir_fd: int | None = None) -> None:
    at = {"src_dir_fd": dir_fd, "dst_dir_fd": dir_fd}
    try:
        os.link(src, dst, **at)  # never replaces: FileExistsError if dst appeared
    except OSError as e:
        if e.errno not in _NO_LINKS:
            raise
        # No hard links here (FAT, exFAT, some SMB and FUSE mounts): claim the name (FileExistsError if it
        # appeared), then move onto the claim; only a process replacing files between the two steps slips by.
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        os.close(os.open(dst, flags, 0o600, dir_fd=dir_fd))
        os.replace(src, dst, **at)
        return
    os.unlink(src, dir_fd=dir_fd)


def place_output(tmp: Path, target: Path, overwrite: bool, name: Path | str | None = None,
                 dir_fd: int | None = None) -> None:
    """Put the finished ``tmp`` in place of ``target`` (a :func:`final_path`; ``name``, what the user
    called it, for the messages); on refusal ``tmp`` is removed and the target kept. With ``dir_fd`` (the
    directory both are in, opened when the run began) the two are its entries, wherever it is now.

    Without ``overwrite``, a target that appeared during the run is a ConfigError (exit 2, as for one that
    existed before); with it, one that became a FIFO or a device is an OutputError (only regular files are
    replaced)."""
    name = target if name is None else name
    try:
        move_into_place(tmp, target, overwrite, name, dir_fd)
    except FileExistsError:
        _unlink(tmp, dir_fd)
        raise ConfigError(f"{name}: appeared during the run (another process wrote it); kept as it is, "
                          "nothing written (use -y/--overwrite to replace it)") from None
    except OutputError:
        _unlink(tmp, dir_fd)
        raise
    except OSError:  # the rename refused (a sticky directory, an immutable target): the work is lost, not left
        with contextlib.suppress(OSError):
            _unlink(tmp, dir_fd)
        raise


def move_into_place(tmp: Path, target: Path, overwrite: bool, name: Path | str, dir_fd: int | None = None) -> None:
    """``tmp`` renamed onto ``target``: without ``overwrite`` never over a file that exists by now
    (FileExistsError), with it only over a regular file (OutputError for one that became a FIFO or a
    device). A video's output (:func:`place_output`) and a report (:func:`pipeline.reportfile.report_file`).
    With ``dir_fd``, the names of the two in that directory."""
    src, dst = (tmp, target) if dir_fd is None else (tmp.name, target.name)
    if not overwrite:
        rename_noreplace(src, dst, dir_fd)
        return
    kind = special_kind(dst, dir_fd)
    if kind is not None:
        raise OutputError(f"{name}: became a {kind} during the run; only regular files are replaced")
    os.replace(src, dst, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def _unlink(path: Path, dir_fd: int | None) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path if dir_fd is None else path.name, dir_fd=dir_fd)


def remove_stale_partials(target: Path) -> int:
    """Delete temporary files of earlier runs into ``target`` whose process is gone (killed mid-run); an
    image sequence's is a directory of frames (:class:`pipeline.sequence.StagedSequence`). Returns how many
    other processes' temporary files were kept: their process runs."""
    prefix, suffix = partial_prefix(target), target.suffix
    try:
        names = os.listdir(target.parent if str(target.parent) else ".")
    except OSError:
        return 0  # the output check reports an unusable directory
    kept = 0
    for name in names:  # not glob: a stem may hold glob metacharacters
        if not (name.startswith(prefix) and name.endswith(suffix)):
            continue
        pid = name[len(prefix):len(name) - len(suffix)]
        # Ours carry a process id: ASCII digits, at most pid_max. Another number is no process's: not ours, kept
        # (os.kill raised OverflowError on twenty digits).
        if not (pid.isascii() and pid.isdigit() and len(pid) <= _PID_DIGITS):
            continue
        if int(pid) == os.getpid():
            continue
        if process_alive(int(pid)):
            kept += 1
            continue
        stale = target.parent / name
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
    return kept


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie (exited, not yet reaped by its parent) does not: a batch learns that a
    worker died before the worker's nanny reaps it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, someone else's; anything else: do not guess, keep the file
        return True
    return _proc_state(pid) not in ("Z", "X")


def _proc_state(pid: int) -> str | None:
    """The state letter in Linux's /proc/PID/stat; None where there is none to read."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 1:].split()  # after the command name, which may hold spaces and ")"
    return fields[0] if fields else None


class StagedFile:
    """Where a file output is written until the run completes (a temporary file beside it), and how it is
    put in place; :class:`pipeline.sequence.StagedSequence` is the same for an image sequence.

    The directory is held open from the start: one moved or renamed during the run still gets its
    finished output, under the target's name (as ffmpeg's output file moves with its directory), or,
    when the run fails, loses its temporary file."""

    def __init__(self, final: Path):
        self.final = final
        self.path = temp_path_for(final)
        self.muxer_path = str(self.path)  # what the muxer is given
        self._dir: int | None = None
        self._claimed = False

    def prepare(self) -> None:
        claim_temporary(self.path, self.final)
        self._claimed = True  # from here the temporary file is this run's to remove
        try:
            remove_stale_partials(self.final)
            self._dir = open_directory(self.final.parent)
            create_like(self.path, self.final)
        except BaseException:
            self._close()
            raise

    def place(self, overwrite: bool, name) -> None:
        try:
            place_output(self.path, self.final, overwrite, name=name, dir_fd=self._dir)
            _say_if_moved(self._dir, self.final, name)
        finally:
            self._close()

    def discard(self) -> None:
        if not self._claimed:  # refused at prepare: the temporary file is another run's
            return
        try:
            _unlink(self.path, self._dir)
        except OSError:  # already failing or stopping: that error says more than a file left to clean
            pass
        finally:
            self._close()

    def _close(self) -> None:
        if self._claimed:
            release_temporary(self.path)
            self._claimed = False
        held, self._dir = self._dir, None
        if held is not None:
            os.close(held)

    def written_bytes(self) -> int | None:
        """How many bytes the output holds so far: the temporary file, then (renamed) the target."""
        for path in (self.path, self.final):
            try:
                return os.stat(path.name if self._dir is not None else path, dir_fd=self._dir).st_size
            except OSError:
                continue
        return None


def open_directory(directory: Path) -> int | None:
    """``directory`` held open to name its entries by (not to read it); None where it cannot be (the
    entries are then named by their paths)."""
    try:
        return os.open(directory if str(directory) else ".", _DIRECTORY_FLAGS)
    except OSError:
        return None


_DIRECTORY_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC


def _say_if_moved(dir_fd: int | None, final: Path, name) -> None:
    """A warning when the output's directory is no longer where it was when the run began."""
    if dir_fd is None:
        return
    held = os.fstat(dir_fd)
    try:
        here = os.stat(final.parent if str(final.parent) else ".")
        if (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino):
            return
    except OSError:
        pass
    try:
        now = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), final.name)
    except OSError:
        now = "its new place"
    log.warning(f"{name}: its directory was moved during the run; the output was written in it, now {now}")


def staged(final: Path, output_format: str | None = None):
    """The staging for the output ``final``: a temporary file, or a directory for an image sequence."""
    from .sequence import StagedSequence, is_sequence

    return StagedSequence(final) if is_sequence(final, output_format) else StagedFile(final)
