"""The command line's stderr when what it leads to goes away: a closed terminal (EIO), a reader that left
(EPIPE), a full disk (ENOSPC).

stderr only reports: once it cannot be written (the terminal closed, which is also a SIGHUP), the run
goes on without it and ends with its own exit code. The stream is then pointed at /dev/null, so that
what is still buffered, and Python's flush at exit, go nowhere instead of failing again (a failed flush
at exit makes the exit status 120).
"""

from __future__ import annotations

import os
from typing import TextIO


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
