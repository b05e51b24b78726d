"""Stop requests for a run, from signal handlers and the other threads: :class:`RunControl`.

Kept apart from :mod:`pipeline.engine` because the command line installs its signal handlers on one before
any part of the run exists, and because what a second signal may drop (``discard_output``) is decided here
for every run a process has side by side.
"""

from __future__ import annotations

import sys
import threading
import weakref
from typing import TYPE_CHECKING

from .errors import Interrupted, PipelineError

if TYPE_CHECKING:
    from .engine import Pipeline


class RunControl:
    """Stop requests for one run, which may come before its parts exist (a signal while a live source
    is being opened): the command line installs its signal handlers on this, then builds the run."""

    def __init__(self):
        self.stop_event = threading.Event()  # graceful: drain and finalise
        self.signum: int | None = None
        # Several when streams run side by side (pipeline.many); weak, or each run would sit in a reference
        # cycle (it holds its control) with its buffers and codecs until the next full collection.
        # (The list is copied at once in a signal handler, where a WeakSet's iteration could see it change.)
        self.pipelines: list[weakref.ref[Pipeline]] = []
        # Set-up, before any output exists: a signal handler may end it at once (raise Interrupted)
        # instead of waiting for a step that reads or computes for long.
        self.interruptible = False
        # The process ends right after its runs (the command line): a source whose close only frees what
        # the process's exit frees anyway is left to the exit (see Pipeline._close_source).
        self.process_ends = False
        # A run stopped on purpose, by the GPU mid-run or by a live source that stalled keeps a playable file
        # of the frames done. A batch, whose outputs are whole files or nothing, turns this off: such a run
        # then leaves the target as it was (an earlier output of the same name included).
        self.keep_partial = True
        self.failure: BaseException | None = None  # set by fail()

    def before_output(self) -> None:
        """Called by the set-up just before it creates the output: from here on a stop is a graceful
        one (the run sees the event), and one requested already ends the set-up now."""
        self.interruptible = False
        if self.stop_event.is_set():
            raise self.stop_error("no output written")

    def fail(self, cause: BaseException) -> None:
        """Stop every run of this control because the call running them failed (streams side by side: no
        thread to be had, the caller's ``on_start`` raising): each stops as for a signal but keeps no
        output, and raises :meth:`stop_error`. Safe from any thread."""
        if self.failure is None:
            self.failure = cause
        self.keep_partial = False
        self.stop_event.set()

    def stop_error(self, detail: str) -> PipelineError:
        """What a run stopped through this control raises: Interrupted by its signal, or, after
        :meth:`fail`, the failure that stopped it."""
        if self.failure is None:
            return Interrupted(self.signum, detail)
        cause = self.failure
        why = str(cause) if isinstance(cause, PipelineError) else f"{type(cause).__name__}: {cause}"
        return PipelineError(f"stopped: {why}; {detail}")

    def stop(self, signum: int | None = None) -> None:
        """Safe from a signal handler: it only sets an event the stages poll."""
        if signum is not None and self.signum is None:
            self.signum = signum
        self.stop_event.set()

    def discard_output(self, force: bool = False) -> bool:
        """Drop every run's partial output, or, while a run is placing its frames, nothing (False): an image
        sequence is not placed in one rename, and stopping half-way would leave new frames beside old ones,
        while the other runs must then finish as after a first signal. ``force``: drop every run's staged
        output regardless (the frames already placed stay)."""
        pipelines = [p for ref in list(self.pipelines) if (p := ref()) is not None]
        if not force:  # every sequence held first (none placing), so that none can start while others go
            held = []
            for sequence in filter(None, (p.staged_sequence() for p in pipelines)):
                if not sequence.hold():
                    for h in held:
                        h.release()
                    return False
                held.append(sequence)
            for sequence in held:
                sequence.discard_held()
        for pipeline in pipelines:
            pipeline.discard_output()
        outfile = sys.modules.get("pipeline.outfile")  # not imported: nothing claimed (no import in a handler)
        if outfile is not None:
            outfile.abandon_temporaries()
        return True

    def placing(self) -> bool:
        """Whether a run is moving its frames into place."""
        return any(p.placing() for ref in list(self.pipelines) if (p := ref()) is not None)
