"""Where every report goes (``--stats-json``, ``pipeline batch --json``, ``pipeline bench --json`` and its
chart, ``pipeline probe --json``): a file replaced as the caller decides, or a FIFO or a device written into.

A file is written whole or not at all, as a video output is: into a temporary file beside it, renamed onto
it once complete (:func:`report_file`), so a full disk or a stop mid-write leaves the old report as it was
and never half a JSON document. ``-progress``, read while the run goes on, is the one written in place.

A FIFO has to be opened before it is written, and opening one for writing blocks until a process opens it
for reading, beyond the reach of a signal handler that only asks the run to stop. So a FIFO is opened
without blocking, tried again until a reader comes, and refused after :data:`FIFO_WAIT_S` seconds: with the
error an unwritable file gives (ENXIO), so each caller reports it as it reports a full disk.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Callable, Iterator, TypeVar

from .checks import open_fd, real_path, special_kind
from .errors import ConfigError, OutputError

T = TypeVar("T")
FIFO_WAIT_S = 10.0  # as long as `pipeline run` waits for a FIFO input's writer (--timeout's default)


def open_report(path: str | Path, exclusive: bool = False, binary: bool = False) -> IO:
    """``path`` opened for writing. ``exclusive``: fail (FileExistsError) rather than replace a file that
    exists by now. A FIFO or a device is written into either way; a FIFO nobody reads within
    :data:`FIFO_WAIT_S` seconds raises OSError(ENXIO)."""
    mode = "wb" if binary else "w"
    kind = special_kind(path)
    if kind == "FIFO":  # a named one, or /dev/stdout into a pipe: /proc's name for that pipe cannot be opened
        return os.fdopen(_open_fifo(Path(path)), mode)
    if kind is not None:  # a device or a socket: written into where it is
        return open(path, mode)
    path = real_path(path)  # a link's target is what is created or replaced (a dangling link's too)
    return open(path, mode.replace("w", "x") if exclusive else mode)


@contextmanager
def report_file(path: str | Path, exclusive: bool = False, binary: bool = False) -> Iterator[IO]:
    """A file to write the report ``path`` into whole: a regular file appears (or replaces the old one)
    only when the ``with`` block completes; an error inside it removes what was written and keeps the old
    file. ``exclusive``: fail (FileExistsError) rather than replace a file that exists by now. A FIFO or a
    device is written into, as :func:`open_report` does."""
    from .outfile import final_path, move_into_place, replaced_mode, temp_path_for

    fd = open_fd(path)
    if fd is not None:  # /dev/stdout and its kin: into the descriptor, which a shell may have sent to a file
        with os.fdopen(os.dup(fd), "wb" if binary else "w") as f:
            yield f
        return
    if special_kind(path) is not None:
        with open_report(path, exclusive, binary) as f:
            yield f
        return
    target = final_path(Path(path))  # a link's file is created or replaced (a dangling link's too); a loop refused
    tmp = temp_path_for(target)
    handle = _create(tmp, replaced_mode(target))
    try:
        with os.fdopen(handle, "wb" if binary else "w") as f:
            yield f
        move_into_place(tmp, target, not exclusive, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _create(tmp: Path, mode: int | None) -> int:
    """The temporary file, new (never a file or a link already under its name), with the permissions of the
    file it replaces (``mode``) from the start: a private report stays private while it is written."""
    from .outfile import open_temporary

    try:
        return open_temporary(tmp, mode)
    except FileExistsError:  # this process's own name: another thread writes the same report right now
        raise OSError(errno.EBUSY, "another write of this report is under way", str(tmp)) from None


def write_report(path: str | Path, text: str, exclusive: bool = False) -> None:
    with report_file(path, exclusive) as f:
        f.write(text)


def save_report(path: str | Path, option: str, write: Callable[[str | Path], T], during: str) -> T:
    """``write(path)``, its failures as the user reads them: a file that appeared during the ``during`` (the
    check before it saw none, and ``write`` opened exclusively) is kept, a ConfigError; any other OSError is an
    OutputError; one line each."""
    try:
        return write(path)
    except FileExistsError as e:
        raise ConfigError(f"{path}: {option} file appeared during the {during}; kept, not written "
                          "(use -y/--overwrite to replace it)") from e
    except OSError as e:
        raise OutputError(f"{path}: cannot write {option}: {e.strerror or e}") from e


def save_json(report, path: str | Path, option: str, overwrite: bool, during: str) -> None:
    """``report.write_json`` (a run's, several streams' or a batch's statistics) into ``path``, as
    :func:`save_report` reports its failures; an existing file is replaced only with ``overwrite``."""
    save_report(path, option, lambda p: report.write_json(p, exclusive=not overwrite), during)


def _open_fifo(path: Path) -> int:
    deadline = time.monotonic() + FIFO_WAIT_S
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            if e.errno != errno.ENXIO or time.monotonic() > deadline:
                if e.errno == errno.ENXIO:
                    raise OSError(errno.ENXIO, f"a FIFO no process read within {FIFO_WAIT_S:g} s") from None
                raise
            time.sleep(0.05)
            continue
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)  # a reader: write as usual
        return fd
