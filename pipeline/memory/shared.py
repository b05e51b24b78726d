"""Memory shared by many streams in one process: one device arena and one pinned host pool.

Streams of different resolutions start and stop at any time, and a warm worker runs file after file;
each borrows from the same :class:`SharedArena` through an :class:`ArenaLease` (the interface the
processor already uses for :class:`~pipeline.memory.device_pool.DevicePool`), and builds its host
rings from the same :class:`PinnedPool`.

Scheme: segregated fit over growable chunks (:class:`~pipeline.memory.arena.FreeSpace`). Each chunk
(one cudaMalloc, from an injected ``make_backing``) serves one size class at a time. A class's frames
are one size, so the hole a frame leaves always fits the next one, and a class grows only when more of
its frames are in flight than it has room for. Memory moves between classes a whole chunk at a time:
a chunk left wholly free by stopped streams goes to the next class that needs room (up to twice the
chunk that class would grow, so small frames do not strand a chunk made for big ones), and a 4K
stream reuses what 720p streams gave back. A class grows by whole frames, at least ``granularity``
bytes, so no tail is left that only another class could use.

Why not plain best fit with coalescing over all chunks (the classic low-fragmentation policy, kept
here as the fallback when the arena may not grow): with streams of 4 resolutions, two of each,
starting and stopping at random for 1500 cycles, it reserved about as much (8% over the peak in use)
but still added chunks after cycle 250 in 14 of 60 runs, up to cycle 1338, whenever small frames had
settled in the middle of a hole a big frame needed; this scheme stopped growing by cycle 282 in all
of them. A buddy scheme would waste up to half of every frame (frame sizes are not powers of two).

Memory goes back to the device only on :meth:`SharedArena.trim` or :meth:`SharedArena.close`, so a
warm process reaches a flat reservation after its first mix of streams and then makes no device
allocations at all.

Plain Python with injected backings and events (anything with ``done`` and ``synchronize()``), so it
is testable on any machine.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable


from ..errors import ConfigError, GPUError
from ..log import log
from .arena import ALIGN, Block, FreeSpace, align_up, size_class
from .device_pool import Backing, BufferSpec
from .host_ring import Event
from .lease import ArenaLease, _Client  # noqa: F401  (ArenaLease re-exported)

MiB = 1 << 20
DEFAULT_GRANULARITY = 64 * MiB
DEVICE_PAGE = 2 * MiB  # cudaMalloc rounds large allocations up to this anyway
# A class claims a wholly free chunk only up to this many times the chunk it would grow: a 360p stream
# settling in a chunk made for 4K frames would strand it until that stream stops.
CLAIM_RATIO = 2


def _mib(n: int) -> str:
    return f"{n / MiB:.1f} MiB"


@dataclass(eq=False)
class _Pending:
    seq: int
    event: Event
    blocks: list[Block]
    client: _Client


@dataclass(eq=False)
class _Chunk:
    size: int
    backing: Backing


class SharedArena:
    """Thread-safe device arena over growable chunks, shared by many leases.

    ``make_backing(nbytes)`` makes one chunk (a cudaMalloc, or a NumPy buffer on the CPU backend);
    a class grows by at least ``granularity`` bytes at a time; ``max_bytes`` caps the total reserved;
    ``view_cache`` bounds the number of cached array-view lists.
    """

    def __init__(self, make_backing: Callable[[int], Backing], *, granularity: int = DEFAULT_GRANULARITY,
                 max_bytes: int | None = None, view_cache: int = 256):
        if granularity < ALIGN:
            raise ConfigError(f"Invalid arena granularity ({granularity}). Supported values are >= {ALIGN}.")
        if max_bytes is not None and max_bytes < ALIGN:
            raise ConfigError(f"Invalid arena cap ({max_bytes}). Supported values are >= {ALIGN}, or None.")
        if view_cache < 1:
            raise ConfigError(f"Invalid view cache size ({view_cache}). Supported values are >= 1.")
        self._make_backing = make_backing
        self.granularity = align_up(granularity)
        self.max_bytes = max_bytes
        self._view_cache = view_cache
        self._lock = threading.Lock()
        self._space = FreeSpace()
        self._chunks: dict[int, _Chunk] = {}
        self._chunk_ids = itertools.count()
        self._pending: dict[int, _Pending] = {}  # insertion order is age order
        self._seq = itertools.count()
        self._clients: set[_Client] = set()
        # A class's frames land in the same slots again and again: keep the views made for them, so the
        # steady state creates no array objects. LRU-bounded, as slots change when the mix of streams does.
        self._views: OrderedDict[tuple[int, int, tuple[BufferSpec, ...]], list[Any]] = OrderedDict()
        self._total = _Client("arena")
        self.reserved = 0
        self.device_allocs = 0
        self.device_frees = 0
        self.view_misses = 0
        self.fragmentation_peak = 0.0  # the worst fragmentation any allocation left
        self.closed = False
        self._refused = ""  # the device's last refusal to grow, for the out-of-memory message

    # --- public -----------------------------------------------------------------------------------------

    def lease(self, name: str = "") -> ArenaLease:
        return ArenaLease(self, name)

    @property
    def in_use(self) -> int:
        return self._total.in_use

    @property
    def free_bytes(self) -> int:
        return self._space.total

    @property
    def largest_free(self) -> int:
        return self._space.largest

    @property
    def chunks(self) -> int:
        return len(self._chunks)

    @property
    def fragmentation(self) -> float:
        """1 - largest free block / free bytes: 0 when the free space is one block (or none)."""
        with self._lock:
            return self._fragmentation()

    def counters(self) -> dict[str, Any]:
        with self._lock:
            t = self._total
            return {
                "device_allocs": self.device_allocs,
                "device_frees": self.device_frees,
                "pool_hits": t.allocs,
                "pool_waits": t.waits,
                "bytes_reserved": self.reserved,
                "bytes_in_use": t.in_use,
                "bytes_peak": t.peak,
                "fragmentation": self._fragmentation(),
                "fragmentation_peak": self.fragmentation_peak,
                "largest_free": self._space.largest,
                "free_bytes": self._space.total,
                "chunks": len(self._chunks),
                "leases": len(self._clients),
                "view_misses": self.view_misses,
            }

    def trim(self) -> int:
        """Give wholly free chunks back to the device (completed frees first); returns the bytes released."""
        with self._lock:
            self._reclaim_completed()
            return self._release_free_chunks(need=None)

    def close(self) -> None:
        """Wait for every pending frame and free every chunk (end of the process; all work must be done)."""
        with self._lock:
            if self.closed:
                return
            for entry in self._pending.values():
                entry.event.synchronize()
            for chunk in self._chunks.values():
                _close_backing(chunk.backing)
            self.device_frees += len(self._chunks)
            self._pending.clear()
            self._chunks.clear()
            self._views.clear()
            self._clients.clear()
            self._space = FreeSpace()
            self.reserved = 0
            self.closed = True

    def check(self) -> None:
        """Raise AssertionError unless every chunk is tiled exactly by free, held and pending blocks and the
        byte counts agree with them."""
        with self._lock:
            self._space.check()
            used = [b for c in self._clients for b in c.held] + [b for p in self._pending.values() for b in p.blocks]
            per_chunk: dict[int, list[Block]] = {cid: [] for cid in self._chunks}
            for b in used + self._space.blocks():
                per_chunk[b.chunk].append(b)
            for cid, blocks in per_chunk.items():
                end = 0
                for b in sorted(blocks, key=lambda b: b.offset):
                    if b.offset != end:
                        raise AssertionError(f"chunk {cid}: {'gap' if b.offset > end else 'overlap'} at {end}")
                    end = b.offset + b.size
                if end != self._chunks[cid].size:
                    raise AssertionError(f"chunk {cid}: blocks end at {end}, chunk is {self._chunks[cid].size}")
            in_use = sum(b.size for b in used)
            if in_use != self._total.in_use or in_use + self._space.total != self.reserved:
                raise AssertionError(f"in use {self._total.in_use} (blocks say {in_use}), "
                                     f"free {self._space.total}, reserved {self.reserved}")
            for c in self._clients:
                mine = sum(b.size for b in c.held) + sum(b.size for p in self._pending.values() if p.client is c
                                                         for b in p.blocks)
                if mine != c.in_use:
                    raise AssertionError(f"lease {c.name!r} counts {c.in_use} bytes in use, its blocks {mine}")

    # --- for ArenaLease ---------------------------------------------------------------------------------

    def _register(self, client: _Client) -> None:
        with self._lock:
            self._ensure_open()
            self._clients.add(client)

    def _alloc(self, nbytes: int, client: _Client, specs: tuple[BufferSpec, ...] = ()) -> tuple[Block, list[Any]]:
        """A block of at least ``nbytes``, and the array views of ``specs`` laid out in it (cached)."""
        size = align_up(max(nbytes, 1))
        with self._lock:
            self._ensure_open()
            if self.max_bytes is not None and size > self.max_bytes:
                raise GPUError(self._no_room_message(size))
            self._reclaim_completed()
            cls, claim = size_class(size), CLAIM_RATIO * self._growth(size)
            while (block := self._space.take(size, cls, claim)) is None:
                if (block := self._make_room(size, cls, claim, client)) is not None:
                    break
            client.held.add(block)
            for tally in (client, self._total):
                tally.allocs += 1
                tally.in_use += size
                tally.peak = max(tally.peak, tally.in_use)
            self.fragmentation_peak = max(self.fragmentation_peak, self._fragmentation())
            return block, self._views_at(block, specs) if specs else []

    def _views_at(self, block: Block, specs: tuple[BufferSpec, ...]) -> list[Any]:
        key = (block.chunk, block.offset, specs)
        views = self._views.get(key)
        if views is None:
            self.view_misses += 1
            views = self._views[key] = _frame_views(self._chunks[block.chunk].backing, block.offset, specs)
            if len(self._views) > self._view_cache:
                self._views.popitem(last=False)
        self._views.move_to_end(key)
        return views

    def _free(self, blocks: list[Block], after: Event | None, client: _Client) -> None:
        with self._lock:
            if self.closed:
                return
            for b in blocks:
                if b not in client.held:
                    raise ValueError(f"block {b} is not held by lease {client.name!r} (freed twice?)")
            client.held.difference_update(blocks)
            if after is None or after.done:
                self._give(blocks, client)
            else:
                seq = next(self._seq)
                self._pending[seq] = _Pending(seq, after, list(blocks), client)

    def _drain(self, client: _Client) -> None:
        """Wait for the client's pending blocks and return them (not counted as waits)."""
        with self._lock:
            while (entry := next((p for p in self._pending.values() if p.client is client), None)) is not None:
                self._wait(entry, counted_for=None)

    def _unregister(self, client: _Client) -> None:
        """Return what the client still holds (its work must be done) and forget it."""
        with self._lock:
            if client.held:
                log.warning("lease %r closed holding %d blocks (%s); returning them",
                            client.name, len(client.held), _mib(sum(b.size for b in client.held)))
                blocks, client.held = list(client.held), set()
                if not self.closed:
                    self._give(blocks, client)
            self._clients.discard(client)

    # --- internals (called with the lock held) ----------------------------------------------------------

    def _ensure_open(self) -> None:
        if self.closed:
            raise GPUError("the shared device arena is closed")

    def _fragmentation(self) -> float:
        free = self._space.total
        return 0.0 if free == 0 else 1.0 - self._space.largest / free

    def _make_room(self, size: int, cls: int, claim: int, client: _Client) -> Block | None:
        """Make room for ``size`` bytes of class ``cls``, or return a block found by the fallbacks.

        In order: wait on the oldest pending frame if its blocks would make room; grow; claim any wholly
        free chunk, or take a block in another class's chunk; give wholly free chunks (all too small by
        then) back to the device to grow one that fits; wait on the oldest pending frame; raise.
        Only the oldest pending frame is waited on before growing: it is the one most likely to be
        complete already. Waiting on a younger one to avoid growing would stall this stream for up to a
        frame's time again and again, keeping the arena smaller than the frames in flight; growing
        happens once.
        """
        self._ensure_open()
        oldest = next(iter(self._pending.values()), None)
        if oldest is not None and self._space.would_fit(oldest.blocks, size, cls, claim):
            self._wait(oldest, counted_for=client)
            return None
        if self._grow(size, cls, client):
            return None
        if (block := self._space.take(size, cls) or self._space.take(size)) is not None:
            return block
        if self._release_free_chunks(self._room_short_of(size)) and self._grow(size, cls, client):
            return None
        if oldest is None:
            raise GPUError(self._no_room_message(size))
        self._wait(oldest, counted_for=client)
        return None

    def _wait(self, entry: _Pending, counted_for: _Client | None) -> None:
        """Synchronize on the entry's event without the lock, so other streams keep allocating and freeing."""
        if counted_for is not None:
            counted_for.waits += 1
            self._total.waits += 1
        self._lock.release()
        try:
            entry.event.synchronize()
        finally:
            self._lock.acquire()
        # The work waited for is complete even if the event has been recorded again since.
        if self._pending.pop(entry.seq, None) is not None and not self.closed:
            self._give(entry.blocks, entry.client)
        self._reclaim_completed()

    def _reclaim_completed(self) -> None:
        # Every entry, not just the oldest: streams complete out of order.
        for seq, entry in list(self._pending.items()):
            if entry.event.done:
                del self._pending[seq]
                self._give(entry.blocks, entry.client)

    def _give(self, blocks: list[Block], client: _Client) -> None:
        for b in blocks:
            self._space.give(b)
            client.in_use -= b.size
            self._total.in_use -= b.size

    def _growth(self, size: int) -> int:
        """The chunk a class grows by: whole blocks of ``size`` (no tail only another class could use), at
        least the granularity, in whole device pages."""
        return align_up(size * -(-self.granularity // size), min(DEVICE_PAGE, self.granularity))

    def _grow(self, size: int, cls: int, client: _Client) -> bool:
        """Add a chunk for class ``cls``; False if the cap or the device says no."""
        chunk_size = self._growth(size)
        if self.max_bytes is not None:
            room = (self.max_bytes - self.reserved) // ALIGN * ALIGN
            if room < size:
                return False
            chunk_size = min(chunk_size, room)
        try:
            backing = self._make_backing(chunk_size)
        except GPUError as e:  # the device is full for other reasons (another process)
            self._refused = str(e)
            return False
        self._refused = ""
        cid = next(self._chunk_ids)
        self._chunks[cid] = _Chunk(chunk_size, backing)
        self._space.add_chunk(cid, chunk_size, home=cls)
        self.reserved += chunk_size
        self.device_allocs += 1
        client.device_allocs += 1
        log.debug("shared arena grew by %s for %r to %s in %d chunks",
                  _mib(chunk_size), client.name, _mib(self.reserved), len(self._chunks))
        return True

    def _room_short_of(self, size: int) -> int | None:
        """Bytes the cap lacks for ``size`` (None when it is the device that refused: free all we can)."""
        if self.max_bytes is None or self.max_bytes - self.reserved >= size:
            return None
        return size - (self.max_bytes - self.reserved)

    def _release_free_chunks(self, need: int | None) -> int:
        """Free wholly free chunks, largest first, until ``need`` bytes are released (all if None).

        Releases nothing when the free chunks together are less than ``need``, as that would not help.
        """
        free = sorted((c for c in self._chunks if self._space.is_wholly_free(c)),
                      key=lambda c: self._chunks[c].size, reverse=True)
        if need is not None and sum(self._chunks[c].size for c in free) < need:
            return 0
        released = 0
        for cid in free:
            if need is not None and released >= need:
                break
            size = self._space.remove_chunk(cid)
            _close_backing(self._chunks.pop(cid).backing)
            for key in [k for k in self._views if k[0] == cid]:
                del self._views[key]  # they point into memory the device is getting back
            self.reserved -= size
            self.device_frees += 1
            released += size
        return released

    def _no_room_message(self, size: int) -> str:
        cap = "no cap" if self.max_bytes is None else f"a cap of {_mib(self.max_bytes)} (max_bytes)"
        why = f"; the device refused more: {self._refused}" if self._refused else ""
        return (f"out of device memory: the shared arena cannot fit {_mib(size)} more: "
                f"{_mib(self.reserved)} reserved in {len(self._chunks)} chunks, {_mib(self._total.in_use)} in use, "
                f"largest free block {_mib(self._space.largest)}, {cap}{why}; "
                f"raise max_bytes or run fewer streams at once")


def _close_backing(backing: Backing) -> None:
    close = getattr(backing, "close", None)
    if close is not None:
        close()


def _frame_views(backing: Backing, offset: int, specs: tuple[BufferSpec, ...]) -> list[Any]:
    """The arrays of one frame, each at an aligned offset inside its block (as DevicePool lays them out)."""
    arrays = []
    for spec in specs:
        arrays.append(backing.view(offset, spec))
        offset += align_up(spec.nbytes)
    return arrays


# The pinned host pool lives in .pinned; re-exported so that one import gives both shared pools.
from .pinned import PinnedPool, default_pinned_cap  # noqa: E402,F401
