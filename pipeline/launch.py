"""The ``pipeline`` command's first lines (and ``python -m pipeline``'s).

The program's modules take tens of milliseconds to import (hundreds on a busy machine); a Ctrl-C meanwhile
ends it as one at any later point of the set-up does, exit 130 and one line, not with the interpreter's
traceback of whichever import it interrupted.
"""

from __future__ import annotations

import os

from .errors import EXIT_SIGINT  # the package imported it already


def entry() -> None:
    try:
        from .cli import entry as run
    except KeyboardInterrupt:
        try:  # by its descriptor: sys.stderr is None under pythonw and may be closed by now
            os.write(2, b"pipeline: interrupted\n")
        except OSError:
            pass
        # Not SystemExit: a KeyboardInterrupt inside code a module runs through exec() of a string (each
        # dataclass, each namedtuple) marks the interpreter to end itself by SIGINT at its exit, whatever
        # exit code it was given. Nothing is open or written yet.
        os._exit(EXIT_SIGINT)
    run()
