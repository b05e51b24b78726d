"""The command line's stdout and stderr when what they lead to goes away: a closed terminal (EIO), a reader
that left (EPIPE), a full disk (ENOSPC).

stdout holds a command's result (a table, JSON): failing to write it is an output error, one line and
exit 4, as coreutils and ffmpeg end on a write error. stderr only reports: once it cannot be written (the
terminal closed, which is also a SIGHUP), the run goes on without it and ends with its own exit code.

Either way the stream is then pointed at /dev/null, so that what is still buffered, and Python's flush
at exit, go nowhere instead of failing again (a failed flush at exit makes the exit status 120).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from typing import Iterator, TextIO

from rich.console import Console

from .errors import OutputError


def say(line: str) -> None:
    """A line on stderr from a signal handler, which must go on if stderr is gone (a closed terminal): by
    its descriptor, unbuffered, nothing raised."""
    try:
        os.write(2, line.encode())
    except OSError:
        pass


def hold_closed_descriptors() -> None:
    """Where the process started with stdin, stdout or stderr closed (``2>&-``), put /dev/null there, opened
    the wrong way round (reading for stdout and stderr, writing for stdin), so each stays unusable, as
    it was. Otherwise the first file opened would get the number: the input or the temporary output
    would then receive what the codecs print to stderr themselves."""
    for fd, flags in ((0, os.O_WRONLY), (1, os.O_RDONLY), (2, os.O_RDONLY)):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, flags)  # the lowest free number: fd, the ones below it are open by now


def escape_unencodable() -> None:
    """Write what stdout and stderr's encoding cannot hold (a file name's é under ``PYTHONIOENCODING=ascii``
    or a C locale) as backslash escapes: a UnicodeEncodeError in the summary line failed a finished run."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None and stream.errors == "strict":
                stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):  # not a TextIOWrapper, or closed: nothing to change
            pass


def silence(stream: TextIO) -> None:
    """Point ``stream``'s file descriptor at /dev/null."""
    try:
        fd = stream.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError, AttributeError):  # no descriptor (a test's capture): nothing to flush at exit
        return
    try:
        os.dup2(devnull, fd)
    except OSError:  # the descriptor is gone already: Python's own flush fails quietly then
        pass
    finally:
        os.close(devnull)


@contextlib.contextmanager
def stdout_errors(after: str = "") -> Iterator[None]:
    """A write error on stdout in here is an OutputError (its line ends with ``after``: what was done
    before, when that is complete). Flushed before leaving, so that an error shows here, not at exit.
    Only writes belong in here: any OSError is taken for stdout's."""
    if sys.stdout is None:  # closed when the process started
        raise OutputError(f"stdout: write failed: it is closed{after}")
    try:
        yield
        sys.stdout.flush()
    except OSError as e:
        silence(sys.stdout)
        raise OutputError(f"stdout: write failed: {e.strerror or e}{after}") from None


class StdoutConsole(Console):
    """rich's console on stdout, its broken pipe an OSError like any other write error (for
    :func:`stdout_errors`): rich itself would leave with exit 1 and nothing said. Names are shown as they
    are: no emoji for ``:smile:`` in a file name."""

    def __init__(self, **options) -> None:
        super().__init__(**{"emoji": False, **options})

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


class Unfailing:
    """``stream`` (stderr, under the CLI's console) whose write errors are dropped: a report that cannot be
    shown must not end, or change the outcome of, the run it reports on."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError:
            silence(self._stream)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError:
            silence(self._stream)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)
