"""Bounded hand-offs between the pipeline's threads that give up once the run is aborted."""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable

END = object()  # end of stream, passed down the channels


class Aborted(Exception):
    """Another stage failed; this one stops quietly."""


def wait_for(call: Callable[[], Any], abort: threading.Event, poll: float = 0.05) -> Any:
    """Retry a call that blocks with ``timeout=poll`` until it succeeds or the run is aborted."""
    while True:
        try:
            return call()
        except (queue.Empty, queue.Full):
            if abort.is_set():
                raise Aborted from None


class Channel:
    """A bounded queue whose blocking calls give up once the run is aborted."""

    def __init__(self, size: int, abort: threading.Event):
        self._q: queue.Queue = queue.Queue(size)
        self._abort = abort

    def put(self, item: Any) -> None:
        wait_for(lambda: self._q.put(item, timeout=0.05), self._abort)

    def get(self) -> Any:
        return wait_for(lambda: self._q.get(timeout=0.05), self._abort)
