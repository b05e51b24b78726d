"""A fixed ring of host buffers, reused only once the event of their last use has completed.

Plain Python and NumPy: the buffers come from an allocator passed in (pinned memory on CUDA, ordinary
memory on the CPU backend), and "events" are anything with ``done`` and ``synchronize()``, so the
bookkeeping is testable on any machine.
"""

from __future__ import annotations

import logging
import queue
import weakref
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np


class Event(Protocol):
    @property
    def done(self) -> bool: ...

    def synchronize(self) -> None: ...


@dataclass(eq=False)
class HostSlot:
    """One host buffer and the event of the last operation that reads or writes it."""

    index: int
    array: np.ndarray
    last_use: Event | None = None
    _lent: weakref.ref | None = field(default=None, repr=False)

    def wait(self) -> None:
        """Block until the last use has finished (waits on that one event, never the device)."""
        if self.last_use is not None:
            if not self.last_use.done:
                self.last_use.synchronize()
            self.last_use = None

    def lend(self, shape: tuple[int, ...] | None = None, dtype=None) -> np.ndarray:
        """A view of the buffer for a consumer that may keep it (an encoder holding a frame), as ``dtype``
        (uint16 samples of a 10-bit frame) and ``shape``.

        The slot stays busy while that very view object is alive: ``in_use_elsewhere`` tells.
        """
        view = self.array if dtype is None or self.array.dtype == dtype else self.array.view(dtype)
        view = view.reshape(shape) if shape else view.view()
        self._lent = weakref.ref(view)
        return view

    @property
    def in_use_elsewhere(self) -> bool:
        return self._lent is not None and self._lent() is not None


class HostRing:
    """``size`` buffers of ``nbytes`` each, allocated once; ``acquire`` blocks when all are in use."""

    def __init__(self, size: int, nbytes: int, allocate: Callable[[int], np.ndarray],
                 release: Callable[[np.ndarray], None] | None = None):
        if size < 1:
            raise ValueError(f"Invalid ring size ({size}). Supported values are >= 1.")
        self.nbytes = nbytes
        self.slots = [HostSlot(i, allocate(nbytes)) for i in range(size)]
        self._free: queue.Queue[HostSlot] = queue.Queue()
        for slot in self.slots:
            self._free.put(slot)
        self.acquires = 0
        self.waits = 0
        self._release = release  # gives a buffer back to a shared pool on close(); None: nothing to give back
        self._closed = False

    @property
    def bytes_reserved(self) -> int:
        return self.nbytes * len(self.slots)

    def acquire(self, timeout: float | None = None) -> HostSlot:
        """A free slot whose last use has completed; blocks (back-pressure) until one is."""
        try:
            slot = self._free.get_nowait()
        except queue.Empty:
            slot = self._free.get(timeout=timeout)  # raises Empty on timeout; callers may retry
            self.waits += 1  # counted once it is served, so a caller's retries count as one wait
        slot.wait()
        self.acquires += 1
        return slot

    def release(self, slot: HostSlot, after: Event | None = None) -> None:
        """Give the slot back; the next ``acquire`` of it waits for ``after`` first."""
        slot.last_use = after
        self._free.put(slot)

    def free_count(self) -> int:
        return self._free.qsize()

    def close(self) -> None:
        """Hand the buffers back through ``release`` (to a shared pool), each once its last use has completed.

        Only slots back in the ring go, and not those still lent to a consumer: another ring reusing a
        buffer under a live view would corrupt that frame, so such a buffer is left out of the pool.
        """
        if self._closed:
            return
        self._closed = True
        returned = 0
        while True:
            try:
                slot = self._free.get_nowait()
            except queue.Empty:
                break
            if slot.in_use_elsewhere:
                continue
            slot.wait()
            if self._release is not None:
                self._release(slot.array)
            returned += 1
        if self._release is not None and returned < len(self.slots):
            logging.getLogger("pipeline").warning(
                "host ring closed with %d of its %d buffers still in use; they are not returned to the pool",
                len(self.slots) - returned, len(self.slots))
