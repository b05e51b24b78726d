"""The memory of one run (:class:`Memory`) and the per-frame allocators the naive strategies use.

Which strategies exist, and how each is built, is :mod:`pipeline.memory.registry`. Plain Python and
NumPy: the CUDA allocation functions are injected by :mod:`pipeline.gpu.memory`.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .device_pool import BufferSpec, DevicePool, FrameBuffers
from .host_ring import Event, HostRing, HostSlot


class PerFrameHost:
    """A 'ring' that allocates a fresh host buffer at every acquire (the naive host sides).

    A released buffer is freed only once the event of its last use has completed: freeing pinned
    memory under an in-flight copy would be a use-after-free, and waiting at release would stall
    the submitting thread, which no real per-frame allocator does either.
    """

    def __init__(self, nbytes: int, allocate: Callable[[int], np.ndarray], free: Callable[[Any], None] | None = None):
        self.nbytes = nbytes
        self._allocate = allocate
        self._free = free or (lambda array: None)
        self._pending: deque[tuple[Event | None, np.ndarray]] = deque()
        self._lock = threading.Lock()  # several copy threads may acquire at once
        self.acquires = 0
        self.waits = 0
        self.allocs = 0

    bytes_reserved = 0

    def acquire(self, timeout: float | None = None) -> HostSlot:
        with self._lock:
            self._reclaim()
            self.acquires += 1
            self.allocs += 1
            index = self.acquires
        return HostSlot(index, self._allocate(self.nbytes))

    def release(self, slot: HostSlot, after: Event | None = None) -> None:
        with self._lock:
            self._pending.append((after, slot.array))
            self._reclaim()

    def _reclaim(self) -> None:
        while self._pending and (self._pending[0][0] is None or self._pending[0][0].done):
            self._free(self._pending.popleft()[1])

    def drain(self) -> None:
        while self._pending:
            event, array = self._pending.popleft()
            if event is not None:
                event.synchronize()
            self._free(array)


def per_frame_host(nbytes: int, allocate: Callable[[int], np.ndarray]) -> PerFrameHost | None:
    return PerFrameHost(nbytes, allocate) if nbytes else None


@dataclass
class PerFrameDevice:
    """Every buffer of every frame is a real allocation, released when the frame is done.

    Allocation and release stay on one thread, the one that allocates: a frame given back from another
    thread (a consumer that kept it on the device) is queued and freed there, before the next
    allocation. cudaFree waits for the whole device, so the consumer never stalls on it, and the driver
    never sees cudaMalloc and cudaFree racing from two threads; still one cudaMalloc and one cudaFree per
    buffer per frame.
    """

    malloc: Callable[[BufferSpec], Any]
    free: Callable[[Any], None]
    device_allocs: int = 0
    device_frees: int = 0
    bytes_in_use: int = 0
    bytes_peak: int = 0
    _owner: int | None = None
    _queued: deque = field(default_factory=deque)  # (event, buffers) given back from other threads

    def alloc_frame(self, specs: list[BufferSpec]) -> FrameBuffers:
        self._owner = threading.get_ident()
        self._free_queued()
        arrays = [self.malloc(s) for s in specs]
        self.device_allocs += len(specs)
        self.bytes_in_use += sum(s.nbytes for s in specs)
        self.bytes_peak = max(self.bytes_peak, self.bytes_in_use)
        return FrameBuffers(arrays, [s.nbytes for s in specs])

    def free_frame(self, buffers: FrameBuffers, after: Event | None) -> None:
        if self._owner is not None and threading.get_ident() != self._owner:
            self._queued.append((after, buffers))  # deque appends and pops are thread-safe
            return
        self._free_now(buffers, after)

    def _free_now(self, buffers: FrameBuffers, after: Event | None) -> None:
        if after is not None:
            after.synchronize()
        for array in buffers.arrays:
            self.free(array)
        self.device_frees += len(buffers.arrays)
        self.bytes_in_use -= sum(buffers.blocks)

    def _free_queued(self) -> None:
        while self._queued:
            after, buffers = self._queued.popleft()
            self._free_now(buffers, after)

    def drain(self) -> None:
        """Free what other threads gave back (end of run: the allocating thread has finished)."""
        self._free_queued()

    def counters(self) -> dict[str, int]:
        return {
            "device_allocs": self.device_allocs,
            "device_frees": self.device_frees,
            "pool_hits": 0,
            "pool_waits": 0,
            "bytes_reserved": 0,
            "bytes_in_use": self.bytes_in_use,
            "bytes_peak": self.bytes_peak,
        }


@dataclass
class Memory:
    """Everything one run allocates frames from. A host side is None when frames never cross it (decoded
    straight into device memory, or handed over on the device)."""

    strategy: str
    in_host: HostRing | PerFrameHost | None
    out_host: HostRing | PerFrameHost | None
    device: DevicePool | PerFrameDevice
    pinned: bool
    extra: dict[str, Any] = field(default_factory=dict)  # more counters; callables are read at report time
    setup_ms: dict[str, float] = field(default_factory=dict)  # how long building each part took

    @property
    def hosts(self) -> list[HostRing | PerFrameHost]:
        return [h for h in (self.in_host, self.out_host) if h is not None]

    def drain(self) -> None:
        """Wait for and release everything still pending (end of run)."""
        self.device.drain()
        for host in self.hosts:
            if isinstance(host, PerFrameHost):
                host.drain()

    def close(self) -> None:
        """Everything back: the device memory (to the driver, or to a shared arena for a lease) and the
        host rings (to a shared pinned pool, where they came from one)."""
        self.drain()
        for part in (self.device, *self.hosts):
            close = getattr(part, "close", None)
            if close is not None:
                close()

    def counters(self) -> dict[str, Any]:
        hosts = self.hosts
        host_bytes = sum(h.bytes_reserved for h in hosts)
        return {
            "host_allocs": sum(getattr(h, "allocs", 0) for h in hosts),
            "strategy": self.strategy,
            **self.device.counters(),
            "host_bytes": host_bytes,
            "pinned_bytes": host_bytes if self.pinned else 0,
            "host_ring_waits": sum(h.waits for h in hosts),
            **{k: v() if callable(v) else v for k, v in self.extra.items()},
        }
