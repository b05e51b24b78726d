"""Bounded hand-offs between the pipeline's threads that give up once the run is aborted.

A channel either blocks its producer when full (back-pressure: files, where every frame must come out)
or drops a frame to make room (live and paced sources, which cannot be told to wait): ``drop-oldest``
evicts the frame that has waited longest (latency stays bounded: the freshest frames go through),
``drop-newest`` refuses the arriving one (the queued frames go through, in order). Only items the
``droppable`` predicate accepts (video frames) are ever dropped, and only they count against ``size``
under a drop policy: audio packets and the end marker never displace a frame, and have a bound of
their own (they block only past it, which a source that keeps its audio in step with its video
never reaches). Either way a channel holds a bounded number of items, so memory never grows however
far the consumer falls behind.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from typing import Any, Callable, Protocol

END = object()  # end of stream, passed down the channels

POLICIES = ("block", "drop-oldest", "drop-newest")
POLL_S = 0.05  # how often a blocked call looks at the abort flag


class Aborted(Exception):
    """Another stage failed; this one stops quietly."""


class Flag(Protocol):
    def is_set(self) -> bool: ...


class AnyOf:
    """Set when any of the given events is: one flag for "the run aborted or this reader was stopped"."""

    def __init__(self, *flags: Flag):
        self.flags = flags

    def is_set(self) -> bool:
        return any(f.is_set() for f in self.flags)


def wait_for(call: Callable[[], Any], abort: Flag, poll: float = POLL_S) -> Any:
    """Retry a call that blocks with ``timeout=poll`` until it succeeds or the run is aborted."""
    while True:
        try:
            return call()
        except (queue.Empty, queue.Full):
            if abort.is_set():
                raise Aborted from None


_EMPTY = object()


class Channel:
    """A bounded FIFO whose blocking calls give up once ``abort`` is set.

    ``on_drop(item)`` runs in the producer's thread, outside the channel's lock, for every dropped
    item: it gives the item's resources back (a host slot) and counts the drop.
    """

    def __init__(self, size: int, abort: Flag, *, policy: str = "block",
                 droppable: Callable[[Any], bool] = lambda item: False,
                 on_drop: Callable[[Any], None] = lambda item: None):
        if policy not in POLICIES:
            raise ValueError(f"Invalid drop policy ({policy!r}). Supported values are {', '.join(POLICIES)}.")
        if size < 1:
            raise ValueError(f"Invalid channel size ({size}). Supported values are >= 1.")
        self.size, self.policy = size, policy
        self._other_size = size if policy == "block" else max(16, 4 * size)  # audio, end marker
        self._abort = abort
        self._droppable, self._on_drop = droppable, on_drop
        self._items: deque = deque()
        self._frames = 0  # droppable items held
        self._cond = threading.Condition()
        self.peak = 0  # the most frames (block: items) ever held: the proof that nothing piled up
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: Any) -> None:
        droppable = self.policy != "block" and self._droppable(item)
        victim = _EMPTY
        with self._cond:
            while self._full(droppable):
                if droppable:  # a drop policy: never wait for a frame
                    victim = item if self.policy == "drop-newest" else self._evict_oldest()
                    if victim is item:
                        break
                    continue
                if self._abort.is_set():
                    raise Aborted
                self._cond.wait(POLL_S)
            else:
                self._items.append(item)
                self._frames += droppable
                self.peak = max(self.peak, self._frames if self.policy != "block" else len(self._items))
                self._cond.notify_all()
            if victim is not _EMPTY:
                self.dropped += 1
        if victim is not _EMPTY:
            self._on_drop(victim)

    def _full(self, droppable: bool) -> bool:
        if self.policy == "block":
            return len(self._items) >= self.size
        if droppable:
            return self._frames >= self.size
        return len(self._items) - self._frames >= self._other_size

    def _evict_oldest(self) -> Any:
        for i, queued in enumerate(self._items):
            if self._droppable(queued):
                del self._items[i]
                self._frames -= 1
                return queued
        raise AssertionError("a full channel holds a frame")  # _full(True) counted one

    def get(self) -> Any:
        with self._cond:
            while not self._items:
                if self._abort.is_set():
                    raise Aborted
                self._cond.wait(POLL_S)
            return self._take()

    def poll(self, timeout: float) -> Any:
        """The next item, or ``None`` if none came within ``timeout`` (the caller checks its own clocks)."""
        with self._cond:
            if not self._items:
                self._cond.wait(timeout)
                if not self._items:
                    if self._abort.is_set():
                        raise Aborted
                    return None
            return self._take()

    def _take(self) -> Any:
        item = self._items.popleft()
        if self.policy != "block" and self._droppable(item):
            self._frames -= 1
        self._cond.notify_all()
        return item

    def clear(self) -> list[Any]:
        """Remove and return everything queued (a stopped reader's leftovers)."""
        with self._cond:
            items = list(self._items)
            self._items.clear()
            self._frames = 0
            self._cond.notify_all()
        return items


class Worker(threading.Thread):
    """A daemon thread whose end the main thread can wait for under Ctrl-C.

    ``Thread.join()`` interrupted by KeyboardInterrupt (the API caller's Ctrl-C) can mark a thread that
    still runs as stopped (Python 3.11 and 3.12 release its state lock on the way out), after which
    ``is_alive()`` says False and a later ``join()`` returns at once: the run would close what the
    thread still uses. Waiting on an event the thread sets as its last step is safe to interrupt."""

    def __init__(self, target: Callable[..., Any], args: tuple = (), *, name: str):
        super().__init__(target=target, args=args, name=name, daemon=True)
        self.ended = threading.Event()
        self.entered = threading.Event()
        self.launched = False  # start() was called: a Ctrl-C inside it may leave the thread running, unseen

    def start(self) -> None:
        self.launched = True
        super().start()

    def run(self) -> None:
        self.entered.set()
        try:
            super().run()
        finally:
            self.ended.set()

    def never_ran(self) -> bool:
        """Never started (starting the one before failed), or its start failed: nothing to wait for."""
        return not self.launched or (self.ident is None and not self.entered.wait(1.0))


class Startable(Protocol):
    def start(self) -> None: ...


def start_all(threads: list[Startable]) -> None:
    """Start each thread (or what starts one: a live source's reader). Where the system gives no more (its
    limit on processes, ``ulimit -u``, or memory for a stack): a PipelineError (exit 1) instead of Python's
    RuntimeError, which reads as a bug. Those started before run on: the caller stops them and waits
    (:func:`wait_for_all` skips the ones never started)."""
    from .errors import no_threads

    for t in threads:
        try:
            t.start()
        except RuntimeError as e:
            if "can't start new thread" not in str(e):  # started twice, or at the interpreter's exit: a bug
                raise
            raise no_threads(f"cannot start a thread ({e})") from e


def wait_for_all(threads: list[Worker], poll: float = 0.1, tick: Callable[[], None] | None = None) -> None:
    """Until every thread has ended, waking every ``poll`` seconds (signal handlers run only when the main
    thread wakes) to call ``tick``; each is joined once its ``ended`` is set, a matter of its return."""
    for t in threads:
        if t.never_ran():
            continue
        while not t.ended.wait(poll):
            if tick is not None:
                tick()
        t.join()
