"""Logging: every notice and warning of the library goes to the ``pipeline`` logger.

A library user sees nothing unless they configure logging (the package installs a ``NullHandler``).
The command line installs :class:`LineHandler`: one line per message on stderr, ``pipeline: ...``
(``pipeline: warning: ...`` for warnings), its level set by ``--loglevel`` (FFmpeg's names).
FFmpeg's own lines arrive here at debug level (``pipeline: ffmpeg: [context] ...``, see
:mod:`pipeline.avlib`): shown with ``--loglevel debug`` only.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Callable

log = logging.getLogger("pipeline")
# A library prints nothing on its own: notices are shown only where the application configures logging
# (the command line does). Every module that logs imports this one.
log.addHandler(logging.NullHandler())

_said: set[tuple[int, str]] = set()
_said_lock = threading.Lock()


def once(level: int, message: str) -> None:
    """Log ``message`` the first time only, in this process: a notice about the machine or the settings
    that streams side by side (and a batch's files) would each give again."""
    with _said_lock:
        if (level, message) in _said:
            return
        _said.add((level, message))
    log.log(level, message)

# FFmpeg's -loglevel names, as users type them.
LEVELS = {
    "quiet": logging.CRITICAL + 10,
    "panic": logging.CRITICAL,
    "fatal": logging.CRITICAL,
    "error": logging.ERROR,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "verbose": logging.INFO,
    "debug": logging.DEBUG,
    "trace": logging.DEBUG,
}


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` for a terminal as it is: control characters (a line break, a tab, an ESC in a file name)
    escaped, nothing else changed (a name's double space stays, unlike :func:`one_line`)."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def one_line(text: str) -> str:
    """``text`` as one line of a terminal: line breaks and tabs as spaces (a library's message holds some, a
    file name may), any other control character escaped (an ESC in a name would drive the terminal)."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], " ".join(text.split()))


class LineHandler(logging.Handler):
    """``pipeline: message`` lines through ``write`` (the CLI's console, so a progress bar stays intact)."""

    def __init__(self, write: Callable[[str], None], level: int = logging.INFO):
        super().__init__(level)
        self._write = write

    def emit(self, record: logging.LogRecord) -> None:
        try:
            label = "warning: " if record.levelno == logging.WARNING else ""
            if record.levelno >= logging.ERROR:
                label = "error: "
            self._write(f"pipeline: {label}{one_line(record.getMessage())}")
        except Exception:  # a broken stderr must not end the run
            self.handleError(record)


_before: tuple[int, bool] | None = None  # the logger's level and propagation before install()


def install(write: Callable[[str], None], level: int) -> LineHandler:
    """Route the ``pipeline`` logger to ``write`` at ``level`` (replacing an earlier CLI handler)."""
    global _before
    uninstall()
    _before = (log.level, log.propagate)
    handler = LineHandler(write, level)
    log.addHandler(handler)
    log.setLevel(min(level, logging.INFO) if level <= logging.CRITICAL else level)
    log.propagate = False  # the CLI owns stderr: no second copy through the root logger
    return handler


def uninstall() -> None:
    """Give the ``pipeline`` logger back as it was before :func:`install` (the command line run in a process
    that goes on: its console may write to a stream that is gone by the next message)."""
    global _before
    for handler in list(log.handlers):
        if isinstance(handler, LineHandler):
            log.removeHandler(handler)
    if _before is not None:
        log.setLevel(_before[0])
        log.propagate = _before[1]
        _before = None
