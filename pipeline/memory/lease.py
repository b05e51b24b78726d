"""One stream's borrowing from a :class:`~pipeline.memory.shared.SharedArena`.

A lease has the interface the processor uses for :class:`~pipeline.memory.device_pool.DevicePool`, so a
stream runs the same whether it owns its pool or shares an arena with other streams; what it holds is
counted per lease (:class:`_Client`) so each stream's statistics show its own allocations and waits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import GPUError
from .arena import Block
from .device_pool import BufferSpec, FrameBuffers, frame_bytes
from .host_ring import Event

if TYPE_CHECKING:
    from .shared import SharedArena


@dataclass(eq=False)
class _Client:
    """One lease's share of the arena: what it holds and its own counters."""

    name: str
    held: set[Block] = field(default_factory=set)
    allocs: int = 0
    waits: int = 0
    device_allocs: int = 0
    in_use: int = 0  # held or pending, as for the arena
    peak: int = 0


class ArenaLease:
    """One stream's borrowing from a :class:`SharedArena`, with the interface of ``DevicePool``.

    ``counters()`` reports this stream's share: its allocations, waits, bytes in use and peak, and as
    ``device_allocs`` the chunks its own allocations made the arena add (0 once the arena is warm);
    ``bytes_reserved`` and the ``arena_*`` keys are the shared arena's. ``close()`` waits for the
    stream's pending frames and returns every block to the arena; the device memory stays reserved.
    """

    def __init__(self, arena: SharedArena, name: str = ""):
        self.arena = arena
        self.name = name
        self.closed = False
        self._client = _Client(name)
        self._sizes: dict[tuple[BufferSpec, ...], int] = {}
        arena._register(self._client)

    def alloc(self, nbytes: int) -> Block:
        self._ensure_open()
        return self.arena._alloc(nbytes, self._client)[0]

    def free(self, blocks: list[Block], after: Event | None = None) -> None:
        """Return blocks; with ``after``, they are reused only once that event has completed."""
        self.arena._free(blocks, after, self._client)

    def alloc_frame(self, specs: list[BufferSpec] | tuple[BufferSpec, ...]) -> FrameBuffers:
        """One block holding all of a frame's buffers, as ``DevicePool.alloc_frame``."""
        self._ensure_open()
        key = tuple(specs)
        size = self._sizes.get(key)
        if size is None:
            size = self._sizes[key] = frame_bytes(list(key))
        block, arrays = self.arena._alloc(size, self._client, key)
        return FrameBuffers(arrays, [block])

    def free_frame(self, buffers: FrameBuffers, after: Event | None) -> None:
        self.free(buffers.blocks, after)

    def drain(self) -> None:
        """Wait for this stream's pending frames (end of run); other streams are not waited on."""
        self.arena._drain(self._client)

    def close(self) -> None:
        """Give everything back to the arena (end of run; the stream's work must be done)."""
        if self.closed:
            return
        self.closed = True
        self.arena._drain(self._client)
        self.arena._unregister(self._client)

    def counters(self) -> dict[str, Any]:
        c, a = self._client, self.arena
        return {
            "device_allocs": c.device_allocs,
            "device_frees": 0,
            "pool_hits": c.allocs,
            "pool_waits": c.waits,
            "bytes_reserved": a.reserved,
            "bytes_in_use": c.in_use,
            "bytes_peak": c.peak,
            "arena_device_allocs": a.device_allocs,
            "arena_bytes_in_use": a.in_use,
            "arena_fragmentation": a.fragmentation,
            "arena_fragmentation_peak": a.fragmentation_peak,
        }

    def _ensure_open(self) -> None:
        if self.closed:
            raise GPUError(f"arena lease {self.name!r} is closed")
