"""Allocation strategies: where each frame's host and device buffers come from.

``pool`` (default): a fixed host ring and one preallocated device arena, nothing allocated per frame.
``naive``: fresh pageable host arrays and a real device allocation per buffer, per frame, freed when the
frame is done. The kernels, copies and encoder are the same; only memory management differs.
The allocation functions are injected (CUDA ones from :mod:`pipeline.gpu.memory`, NumPy on the CPU),
so this module stays plain Python.
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


@dataclass
class PerFrameDevice:
    """Every buffer of every frame is a real allocation, released when the frame is done."""

    malloc: Callable[[BufferSpec], Any]
    free: Callable[[Any], None]
    device_allocs: int = 0
    device_frees: int = 0
    bytes_in_use: int = 0
    bytes_peak: int = 0

    def alloc_frame(self, specs: list[BufferSpec]) -> FrameBuffers:
        arrays = [self.malloc(s) for s in specs]
        self.device_allocs += len(specs)
        self.bytes_in_use += sum(s.nbytes for s in specs)
        self.bytes_peak = max(self.bytes_peak, self.bytes_in_use)
        return FrameBuffers(arrays, [s.nbytes for s in specs])

    def free_frame(self, buffers: FrameBuffers, after: Event | None) -> None:
        if after is not None:
            after.synchronize()
        for array in buffers.arrays:
            self.free(array)
        self.device_frees += len(buffers.arrays)
        self.bytes_in_use -= sum(buffers.blocks)

    def drain(self) -> None:
        pass

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
    """Everything one run allocates frames from."""

    strategy: str
    in_host: HostRing | PerFrameHost
    out_host: HostRing | PerFrameHost
    device: DevicePool | PerFrameDevice
    pinned: bool
    extra: dict[str, Any] = field(default_factory=dict)  # more counters; callables are read at report time

    def drain(self) -> None:
        """Wait for and release everything still pending (end of run)."""
        self.device.drain()
        for host in (self.in_host, self.out_host):
            if isinstance(host, PerFrameHost):
                host.drain()

    def close(self) -> None:
        self.drain()
        close = getattr(self.device, "close", None)
        if close is not None:
            close()

    def counters(self) -> dict[str, Any]:
        host_bytes = self.in_host.bytes_reserved + self.out_host.bytes_reserved
        host_allocs = sum(getattr(h, "allocs", 0) for h in (self.in_host, self.out_host))
        return {
            "host_allocs": host_allocs,
            "strategy": self.strategy,
            **self.device.counters(),
            "host_bytes": host_bytes,
            "pinned_bytes": host_bytes if self.pinned else 0,
            "host_ring_waits": self.in_host.waits + self.out_host.waits,
            **{k: v() if callable(v) else v for k, v in self.extra.items()},
        }
