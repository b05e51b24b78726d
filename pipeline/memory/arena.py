"""First-fit sub-allocator over one reserved range: offsets only, no CUDA, so it is testable anywhere.

A block freed with an event returns to the free list only once that event has completed; an
allocation that does not fit waits on the oldest pending event instead of asking for more memory.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass

from ..errors import GPUError
from .host_ring import Event

ALIGN = 256  # cudaMalloc's own alignment: every sub-allocation keeps it for coalesced access


def align_up(n: int, alignment: int = ALIGN) -> int:
    return (n + alignment - 1) // alignment * alignment


@dataclass(frozen=True)
class Block:
    offset: int
    size: int


class ArenaAllocator:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self._free: list[tuple[int, int]] = [(0, capacity)]  # (offset, size), sorted by offset
        self._pending: deque[tuple[Event, list[Block]]] = deque()
        self.in_use = 0
        self.peak = 0
        self.hits = 0
        self.waits = 0

    def alloc(self, nbytes: int) -> Block:
        size = align_up(max(nbytes, 1))
        if size > self.capacity:
            raise GPUError(f"out of device memory: a {size}-byte buffer exceeds the {self.capacity}-byte arena")
        self._reclaim_completed()
        while (block := self._take(size)) is None:
            if not self._pending:
                raise GPUError(
                    f"out of device memory: arena of {self.capacity} bytes has {self.in_use} in use, "
                    f"cannot fit {size} more"
                )
            self._wait_oldest()
        self.hits += 1
        self.in_use += size
        self.peak = max(self.peak, self.in_use)
        return block

    def free(self, blocks: list[Block], after: Event | None = None) -> None:
        """Return blocks; with ``after``, only once that event has completed."""
        if after is None or after.done:
            self._insert_all(blocks)
        else:
            self._pending.append((after, blocks))

    def _take(self, size: int) -> Block | None:
        for i, (offset, free_size) in enumerate(self._free):
            if free_size >= size:
                if free_size == size:
                    del self._free[i]
                else:
                    self._free[i] = (offset + size, free_size - size)
                return Block(offset, size)
        return None

    def _reclaim_completed(self) -> None:
        while self._pending and self._pending[0][0].done:
            self._insert_all(self._pending.popleft()[1])

    def _wait_oldest(self) -> None:
        self.waits += 1
        event, blocks = self._pending.popleft()
        event.synchronize()
        self._insert_all(blocks)

    def _insert_all(self, blocks: list[Block]) -> None:
        for block in blocks:
            self.in_use -= block.size
            self._insert(block.offset, block.size)

    def _insert(self, offset: int, size: int) -> None:
        i = bisect.bisect_left(self._free, (offset, 0))
        # Coalesce with the neighbours so the arena does not fragment into frame-sized crumbs.
        if i < len(self._free) and offset + size == self._free[i][0]:
            size += self._free[i][1]
            del self._free[i]
        if i > 0 and self._free[i - 1][0] + self._free[i - 1][1] == offset:
            offset, size = self._free[i - 1][0], self._free[i - 1][1] + size
            del self._free[i - 1]
            i -= 1
        self._free.insert(i, (offset, size))

    def drain(self) -> None:
        """Wait for every pending block (end of run); not counted as waits, which measure back-pressure."""
        while self._pending:
            event, blocks = self._pending.popleft()
            event.synchronize()
            self._insert_all(blocks)
