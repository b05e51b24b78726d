"""Sub-allocators over reserved ranges: offsets only, no CUDA, so they are testable anywhere.

:class:`ArenaAllocator` is the single-stream arena: first fit over one range. A block freed with an
event returns to the free list only once that event has completed; an allocation that does not fit
waits on the oldest pending event instead of asking for more memory.

:class:`FreeSpace` is the free-block index of the shared arena (:mod:`pipeline.memory.shared`):
segregated fit over several chunks, each serving one size class, with best fit and coalescing inside
a chunk; its owner does the locking, events and growth.
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
    chunk: int = 0  # which backing the offset is in; a single-range arena has only chunk 0


class ArenaAllocator:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self._free: list[tuple[int, int]] = [(0, capacity)]  # (offset, size), sorted by offset
        self._pending: deque[tuple[Event, list[Block]]] = deque()
        self.in_use = 0
        self.peak = 0
        self.hits = 0
        self.waits = 0
        self.fragmentation_peak = 0.0  # the worst :attr:`fragmentation` any allocation left

    @property
    def fragmentation(self) -> float:
        """1 - largest free block / free bytes: 0 when the free space is one block (or none)."""
        return fragmentation(self._free)

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
        if len(self._free) > 1:  # one free block (or none) is no fragmentation: the common case costs nothing
            self.fragmentation_peak = max(self.fragmentation_peak, fragmentation(self._free))
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


def fragmentation(free: list[tuple[int, int]]) -> float:
    """1 - largest / total of the free blocks ``(offset, size)``: how much of the free memory a frame as
    large as all of it could not use."""
    total = sum(size for _, size in free)
    return 0.0 if total == 0 else 1.0 - max(size for _, size in free) / total


def size_class(nbytes: int, unit: int = ALIGN) -> int:
    """``nbytes`` rounded up to one of eight steps per power of two (at most 12.5% more), in whole ``unit``s.

    Frames of one resolution are one size and near resolutions (1920x1080, 1920x1088) share a class.
    """
    n = max(nbytes, unit)
    step = max(1 << max((n - 1).bit_length() - 4, 0), unit)
    return -(-n // step) * step


class FreeSpace:
    """The free blocks of several chunks, each chunk serving one size class at a time (segregated fit).

    A chunk's *home* is the class of the request that made it or last claimed it while wholly free.
    ``take(size, cls)`` looks only in chunks of that class, then claims the smallest wholly free
    chunk: inside a class the frames are (nearly) one size, so the hole a frame leaves fits the next
    one and a class hardly fragments; memory moves between classes a whole chunk at a time, when the
    streams using it have stopped. Plain best fit over every chunk (``cls=None``) is the fallback when
    the arena may not grow. Within a chunk, placement is address-ordered best fit with coalescing.
    The index is one list sorted by (size, chunk, offset): a search is one bisect and a short scan, as
    frames are megabytes and the lists hold tens of blocks.
    """

    def __init__(self) -> None:
        self._by_size: list[tuple[int, int, int]] = []  # (size, chunk, offset), sorted
        self._size_at: dict[tuple[int, int], int] = {}  # (chunk, offset) -> size
        self._start_before: dict[tuple[int, int], int] = {}  # (chunk, end) -> offset: the block ending there
        self._chunks: dict[int, int] = {}  # chunk -> size
        self._home: dict[int, int | None] = {}  # chunk -> size class it serves (None: not claimed yet)
        self.total = 0

    @property
    def largest(self) -> int:
        return self._by_size[-1][0] if self._by_size else 0

    def add_chunk(self, chunk: int, size: int, home: int | None = None) -> None:
        self._chunks[chunk] = size
        self._home[chunk] = home
        self._insert(chunk, 0, size)

    def remove_chunk(self, chunk: int) -> int:
        """Forget a wholly free chunk; returns its size."""
        if not self.is_wholly_free(chunk):
            raise ValueError(f"chunk {chunk} still has blocks in use")
        size = self._chunks.pop(chunk)
        del self._home[chunk]
        self._remove(chunk, 0, size)
        return size

    def is_wholly_free(self, chunk: int) -> bool:
        return self._size_at.get((chunk, 0)) == self._chunks[chunk]

    def home(self, chunk: int) -> int | None:
        return self._home[chunk]

    def take(self, size: int, cls: int | None = None, claim_up_to: int | None = None) -> Block | None:
        """The smallest fitting hole (lowest address among equals) in a chunk of class ``cls``, else the
        smallest wholly free chunk of at most ``claim_up_to`` bytes (which then serves ``cls``); with
        ``cls=None``, in any chunk."""
        i = bisect.bisect_left(self._by_size, (size, -1, -1))
        claim = None
        for j in range(i, len(self._by_size)):
            free_size, chunk, offset = self._by_size[j]
            if cls is None or self._home[chunk] == cls:
                return self._cut(j, size)
            if (claim is None and offset == 0 and free_size == self._chunks[chunk]
                    and (claim_up_to is None or free_size <= claim_up_to)):
                claim = j
        if claim is None:
            return None
        self._home[self._by_size[claim][1]] = cls
        return self._cut(claim, size)

    def give(self, block: Block) -> None:
        chunk, offset, size = block.chunk, block.offset, block.size
        after = self._size_at.get((chunk, offset + size))
        if after is not None:
            self._remove(chunk, offset + size, after)
            size += after
        before = self._start_before.get((chunk, offset))
        if before is not None:
            self._remove(chunk, before, offset - before)
            size += offset - before
            offset = before
        self._insert(chunk, offset, size)

    def would_fit(self, blocks: list[Block], size: int, cls: int | None = None,
                  claim_up_to: int | None = None) -> bool:
        """Whether giving ``blocks`` back would let ``take(size, cls, claim_up_to)`` succeed, counting coalescing."""
        run: tuple[int, int, int] | None = None  # (chunk, start, end) of adjacent blocks and the free gaps between
        for b in sorted(blocks, key=lambda b: (b.chunk, b.offset)):
            if run is not None and b.chunk == run[0] and self._joins(run[0], run[2], b.offset):
                run = (run[0], run[1], b.offset + b.size)
                continue
            if run is not None and self._run_fits(run, size, cls, claim_up_to):
                return True
            run = (b.chunk, b.offset, b.offset + b.size)
        return run is not None and self._run_fits(run, size, cls, claim_up_to)

    def _run_fits(self, run: tuple[int, int, int], size: int, cls: int | None, claim_up_to: int | None) -> bool:
        chunk, start, end = run
        extent = self._extent(chunk, start, end)
        if cls is None or self._home[chunk] == cls:
            return extent >= size
        whole = self._chunks[chunk]
        return extent == whole >= size and (claim_up_to is None or whole <= claim_up_to)

    def _joins(self, chunk: int, end: int, offset: int) -> bool:
        return offset == end or end + self._size_at.get((chunk, end), 0) == offset

    def _extent(self, chunk: int, start: int, end: int) -> int:
        """Size of the range with the free blocks on either side of it."""
        return end + self._size_at.get((chunk, end), 0) - self._start_before.get((chunk, start), start)

    def blocks(self) -> list[Block]:
        return [Block(offset, size, chunk) for size, chunk, offset in self._by_size]

    def check(self) -> None:
        """Raise AssertionError if the index is inconsistent (used by the tests and SharedArena.check)."""
        def fail(msg: str) -> None:
            raise AssertionError(f"free space: {msg}")

        if self._by_size != sorted(self._by_size):
            fail("size index out of order")
        if {(c, o): s for s, c, o in self._by_size} != self._size_at:
            fail("size index and offset index disagree")
        if {(c, o + s): o for (c, o), s in self._size_at.items()} != self._start_before:
            fail("end index and offset index disagree")
        if self._home.keys() != self._chunks.keys():
            fail("a chunk without a home entry, or a home entry without a chunk")
        for (chunk, offset), size in self._size_at.items():
            if (chunk, offset + size) in self._size_at:
                fail(f"adjacent free blocks not coalesced at chunk {chunk} offset {offset + size}")
            if offset % ALIGN or size % ALIGN or offset + size > self._chunks[chunk]:
                fail(f"block ({chunk}, {offset}, {size}) misaligned or past its chunk")
        if self.total != sum(self._size_at.values()):
            fail(f"total {self.total} != {sum(self._size_at.values())}")

    def _cut(self, j: int, size: int) -> Block:
        """Take ``size`` bytes from the low end of the j-th hole in size order."""
        free_size, chunk, offset = self._by_size[j]
        self._remove(chunk, offset, free_size)
        if free_size > size:
            self._insert(chunk, offset + size, free_size - size)
        return Block(offset, size, chunk)

    def _insert(self, chunk: int, offset: int, size: int) -> None:
        bisect.insort(self._by_size, (size, chunk, offset))
        self._size_at[(chunk, offset)] = size
        self._start_before[(chunk, offset + size)] = offset
        self.total += size

    def _remove(self, chunk: int, offset: int, size: int) -> None:
        del self._by_size[bisect.bisect_left(self._by_size, (size, chunk, offset))]
        del self._size_at[(chunk, offset)]
        del self._start_before[(chunk, offset + size)]
        self.total -= size
