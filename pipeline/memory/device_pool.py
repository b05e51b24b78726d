"""The device pool: one arena reserved at start-up, sub-allocated per frame, with counters.

The arena's memory comes from a *backing*: one real cudaMalloc on CUDA, one NumPy buffer on the CPU
backend. Everything else (placement, reuse after events, accounting) is the plain-Python
:class:`~pipeline.memory.arena.ArenaAllocator`, so the CPU backend runs the same bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

import numpy as np

from .arena import ArenaAllocator, Block, align_up
from .host_ring import Event


@dataclass(frozen=True)
class BufferSpec:
    shape: tuple[int, ...]
    dtype: Any

    @cached_property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize


class Backing(Protocol):
    def view(self, offset: int, spec: BufferSpec) -> Any: ...


class NumpyBacking:
    """Host memory standing in for the device (CPU backend)."""

    def __init__(self, nbytes: int):
        self.buffer = commit_pages(np.empty(nbytes, np.uint8))

    def view(self, offset: int, spec: BufferSpec) -> np.ndarray:
        raw = self.buffer[offset : offset + spec.nbytes]
        return raw.view(spec.dtype).reshape(spec.shape)


@dataclass
class FrameBuffers:
    """The device arrays of one frame, in the order of the frame plan's specs."""

    arrays: list[Any]
    blocks: list[Block]


class DevicePool:
    """Per-frame buffer sets carved out of one preallocated arena."""

    def __init__(self, capacity: int, backing: Backing, device_allocs: int = 1):
        self.arena = ArenaAllocator(capacity)
        self.backing = backing
        self.device_allocs = device_allocs  # real allocations made for the arena itself
        # First-fit hands the same offsets out again and again: keep the array views made for them,
        # so the steady state creates no array objects either.
        self._views: dict[tuple[int, tuple[BufferSpec, ...]], list[Any]] = {}
        self._sizes: dict[tuple[BufferSpec, ...], int] = {}

    @classmethod
    def sized_for(cls, frame_bytes: int, in_flight: int, headroom: float, make_backing, extra: int = 0) -> DevicePool:
        capacity = arena_capacity(frame_bytes, in_flight, headroom, extra)
        return cls(capacity, make_backing(capacity))

    def alloc_frame(self, specs: list[BufferSpec]) -> FrameBuffers:
        """One arena block holding all of a frame's buffers, each at an aligned offset inside it."""
        key_specs = tuple(specs)
        size = self._sizes.get(key_specs)
        if size is None:
            size = self._sizes[key_specs] = frame_bytes(specs)
        block = self.arena.alloc(size)
        arrays = self._views.get((block.offset, key_specs))
        if arrays is None:
            arrays, offset = [], block.offset
            for spec in specs:
                arrays.append(self.backing.view(offset, spec))
                offset += align_up(spec.nbytes)
            self._views[(block.offset, key_specs)] = arrays
        return FrameBuffers(arrays, [block])

    def free_frame(self, buffers: FrameBuffers, after: Event | None) -> None:
        self.arena.free(buffers.blocks, after)

    def drain(self) -> None:
        self.arena.drain()

    def close(self) -> None:
        """Give the arena's memory back (end of run; every frame must be done)."""
        self._views.clear()
        close = getattr(self.backing, "close", None)
        if close is not None:
            close()

    def counters(self) -> dict[str, int]:
        a = self.arena
        return {
            "device_allocs": self.device_allocs,
            "device_frees": 0,
            "pool_hits": a.hits,
            "pool_waits": a.waits,
            "bytes_reserved": a.capacity,
            "bytes_in_use": a.in_use,
            "bytes_peak": a.peak,
            "fragmentation": round(a.fragmentation, 4),
            "fragmentation_peak": round(a.fragmentation_peak, 4),
        }


def arena_capacity(frame_bytes: int, in_flight: int, headroom: float, extra: int = 0) -> int:
    """Room for ``in_flight`` frames times ``headroom``, plus ``extra`` bytes kept for the whole run."""
    return align_up(int(frame_bytes * in_flight * headroom)) + align_up(extra)


def commit_pages(buffer: np.ndarray, page: int = 4096) -> np.ndarray:
    """Write one byte per page of a fresh buffer, so the memory is taken now rather than at first use:
    the up-front memory check of the next run then sees it. Cheap (one write per page)."""
    buffer[::page] = 0
    return buffer


def frame_bytes(specs: list[BufferSpec]) -> int:
    return sum(align_up(s.nbytes) for s in specs)
