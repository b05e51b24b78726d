"""A ring of host buffers, reused only once the event of their last use has completed.

Plain Python and NumPy: the buffers come from an allocator passed in (pinned memory on CUDA, ordinary
memory on the CPU backend), and "events" are anything with ``done`` and ``synchronize()``, so the
bookkeeping is testable on any machine.

A ring is either allocated whole when it is made, or made with one slot and filled as frames need more
(``eager``): cudaHostAlloc takes 5-11 ms per 4K buffer, so a ring of eight made before the first frame
delays that frame by 40-70 ms, and a run rarely has all eight in use. Either way a ring never holds more
than ``size`` buffers and allocates each once: at most ``size`` allocations in a run, however long, and
nothing per frame. (A page-locked allocation is also a point where CUDA streams synchronise: a ring
that grows pays that at most ``size - 1`` times.)
"""

from __future__ import annotations

import queue
import threading
import weakref
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from ..log import log


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

    @property
    def ready(self) -> bool:
        """Whether the last use has completed (reusing the slot would not wait)."""
        return self.last_use is None or self.last_use.done

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
    """At most ``size`` buffers of ``nbytes`` each, each allocated once; ``acquire`` blocks when all are in use.

    ``eager``: the slots allocated now (all by default). The others are added one at a time, when an
    ``acquire`` finds no slot whose last use has completed, until the ring has ``size``: the ring grows to
    what the run keeps in flight, and a slot still being copied is not waited on while the ring may grow.
    """

    # A consumer may hold a slot (an encoder keeping a frame) while the next one is filled: a ring that cannot
    # reach this many slots fails rather than going on with fewer.
    MIN_SLOTS = 2

    def __init__(self, size: int, nbytes: int, allocate: Callable[[int], np.ndarray],
                 release: Callable[[np.ndarray], None] | None = None, eager: int | None = None):
        if size < 1:
            raise ValueError(f"Invalid ring size ({size}). Supported values are >= 1.")
        self.size = size
        self.nbytes = nbytes
        self._allocate = allocate
        self._grow_lock = threading.Lock()
        self.slots: list[HostSlot] = []
        self._free: queue.Queue[HostSlot] = queue.Queue()
        self._eager = size if eager is None else max(1, min(eager, size))
        for _ in range(self._eager):
            self._free.put(self._new_slot())
        self.acquires = 0
        self.waits = 0
        self._release = release  # gives a buffer back to a shared pool on close(); None: nothing to give back
        self._closed = False

    @property
    def bytes_reserved(self) -> int:
        return self.nbytes * len(self.slots)

    @property
    def allocs(self) -> int:
        """Slots added after the ring was made."""
        return len(self.slots) - self._eager

    def acquire(self, timeout: float | None = None) -> HostSlot:
        """A free slot whose last use has completed; blocks (back-pressure) until one is."""
        try:
            slot = self._free.get_nowait()
        except queue.Empty:
            slot = self._grow()
            if slot is None:
                slot = self._free.get(timeout=timeout)  # raises Empty on timeout; callers may retry
                self.waits += 1  # counted once it is served, so a caller's retries count as one wait
        else:
            if not slot.ready and (added := self._grow()) is not None:
                self._free.put(slot)  # still being copied: a new slot instead of waiting for it
                slot = added
        slot.wait()
        self.acquires += 1
        return slot

    def release(self, slot: HostSlot, after: Event | None = None) -> None:
        """Give the slot back; the next ``acquire`` of it waits for ``after`` first."""
        slot.last_use = after
        self._free.put(slot)

    def free_count(self) -> int:
        return self._free.qsize()

    def _new_slot(self) -> HostSlot:
        slot = HostSlot(len(self.slots), self._allocate(self.nbytes))
        self.slots.append(slot)
        return slot

    def _grow(self) -> HostSlot | None:
        """One more slot, if the ring may still grow; None when it is full."""
        with self._grow_lock:
            if len(self.slots) >= self.size or self._closed:
                return None
            try:
                slot = self._new_slot()
            except Exception as e:  # out of pinned memory mid-run: go on with the slots there are
                if len(self.slots) < min(self.size, self.MIN_SLOTS):
                    raise  # as it would have failed, allocated whole before the first frame
                log.warning(
                    "host ring: allocating slot %d of %d failed (%s); going on with %d",
                    len(self.slots) + 1, self.size, e, len(self.slots))
                self.size = len(self.slots)
                return None
            return slot

    def close(self) -> None:
        """Hand the buffers back through ``release`` (to a shared pool), each once its last use has completed.

        Only slots back in the ring go, and not those still lent to a consumer: another ring reusing a
        buffer under a live view would corrupt that frame, so such a buffer is left out of the pool.
        """
        with self._grow_lock:  # no slot is added once the buffers are being handed back
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
            log.warning(
                "host ring closed with %d of its %d buffers still in use; they are not returned to the pool",
                len(self.slots) - returned, len(self.slots))
