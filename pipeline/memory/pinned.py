"""The pinned host pool many streams share: page-locked buffers kept by size class, reused after a stream
stops, under a cap.

Pinned (page-locked) memory is what makes host<->device copies asynchronous, but pinning too much starves the
page cache and every other process, and cudaHostAlloc costs milliseconds per frame-sized buffer: so buffers
are allocated once, kept when a ring closes, handed to the next ring of a size close enough, and the total is
capped (:func:`default_pinned_cap`: half of the RAM).
"""

from __future__ import annotations

import bisect
import threading
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import ConfigError, GPUError
from .arena import size_class
from .host_ring import HostRing

MiB = 2**20
PAGE = 4096  # pinned buffers are page-locked whole pages


def _mib(n: int) -> str:
    return f"{n / MiB:.1f} MiB"


def default_pinned_cap(meminfo: str | Path = "/proc/meminfo") -> int | None:
    """Half of physical memory: pinning more starves the page cache and every other process. None if unknown."""
    try:
        text = Path(meminfo).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        fields = line.split()
        if fields[:1] == ["MemTotal:"] and len(fields) >= 2 and fields[1].isdigit():
            unit = 1024 if fields[2:3] == ["kB"] else 1
            return int(fields[1]) * unit // 2
    return None


class PinnedPool:
    """Page-locked host buffers shared by the host rings of many streams.

    Idle buffers are kept by size class. A request takes the smallest idle buffer of its class or of a
    larger one up to ``reuse_ratio`` times the request (so a 720p ring reuses what a stopped 1080p ring
    gave back), and allocates (``allocate(nbytes)``, cudaHostAlloc on CUDA) only when none is idle.
    Past ``max_bytes`` pinned in all, idle buffers are freed (``free``) to make room, then GPUError.
    """

    def __init__(self, allocate: Callable[[int], np.ndarray], *, free: Callable[[np.ndarray], None] | None = None,
                 max_bytes: int | None = None, reuse_ratio: float = 4.0):
        if reuse_ratio < 1:
            raise ConfigError(f"Invalid reuse ratio ({reuse_ratio}). Supported values are >= 1.")
        self._allocate = allocate
        self._free = free or (lambda buffer: None)  # by default the buffer is freed when collected
        self.max_bytes = max_bytes
        self.reuse_ratio = reuse_ratio
        self._lock = threading.Lock()
        self._idle: dict[int, list[np.ndarray]] = {}  # class size -> idle buffers
        self._idle_sizes: list[int] = []  # sorted keys of _idle
        self._lent: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # id(view) -> (view, buffer); the view keeps the id
        self.host_allocs = 0
        self.host_frees = 0
        self.hits = 0
        self.reserved = 0
        self.in_use = 0
        self.peak = 0

    def allocate(self, nbytes: int) -> np.ndarray:
        """A buffer of exactly ``nbytes`` (a view of a pooled one); give it back with :meth:`release`."""
        need = size_class(nbytes, PAGE)
        with self._lock:
            buffer = self._take_idle(need)
            if buffer is None:
                buffer = self._new(need)
            else:
                self.hits += 1
            view = buffer[:nbytes]
            self._lent[id(view)] = (view, buffer)
            self.in_use += buffer.nbytes
            self.peak = max(self.peak, self.in_use)
        return view

    def release(self, array: np.ndarray) -> None:
        """Take a buffer back; its last use must have completed (HostRing.close waits for that)."""
        with self._lock:
            entry = self._lent.pop(id(array), None)
            if entry is None:
                raise ValueError("not a buffer lent by this pinned pool (released twice?)")
            buffer = entry[1]
            self.in_use -= buffer.nbytes
            if buffer.nbytes not in self._idle:
                bisect.insort(self._idle_sizes, buffer.nbytes)
            self._idle.setdefault(buffer.nbytes, []).append(buffer)

    def check_room(self, size: int, *nbytes: int) -> None:
        """Refuse, before pinning anything, rings of ``size`` buffers of each of ``nbytes`` that cannot fit
        under the cap beside what other rings hold (idle buffers can be freed for them)."""
        need = size * sum(size_class(n, PAGE) for n in nbytes if n)
        with self._lock:
            room = None if self.max_bytes is None else self.max_bytes - self.in_use
        if room is not None and need > room:
            raise GPUError(f"pinned host memory: the host rings need {_mib(need)}, over what the cap of "
                           f"{_mib(self.max_bytes)} leaves ({_mib(self.in_use)} in use by other rings); raise the "
                           f"cap (--pinned-cap-mib, pinned_cap_mib=), or run fewer streams or smaller rings (--ring-size)")

    def ring(self, size: int, nbytes: int) -> HostRing:
        """A host ring whose buffers come from this pool and go back to it on ``close()``."""
        got: list[np.ndarray] = []

        def allocate(n: int) -> np.ndarray:
            got.append(self.allocate(n))
            return got[-1]

        try:
            return HostRing(size, nbytes, allocate, release=self.release)
        except BaseException:
            for array in got:  # a ring that could not be built must not keep half of its buffers
                self.release(array)
            raise

    def trim(self) -> int:
        """Free every idle buffer; returns the bytes unpinned."""
        with self._lock:
            return self._free_idle(None)

    close = trim

    def counters(self) -> dict[str, int]:
        with self._lock:
            return {
                "host_allocs": self.host_allocs,
                "host_frees": self.host_frees,
                "pool_hits": self.hits,
                "bytes_reserved": self.reserved,
                "bytes_in_use": self.in_use,
                "bytes_peak": self.peak,
                "idle_buffers": sum(len(v) for v in self._idle.values()),
            }

    def _take_idle(self, need: int) -> np.ndarray | None:
        i = bisect.bisect_left(self._idle_sizes, need)
        if i == len(self._idle_sizes) or self._idle_sizes[i] > need * self.reuse_ratio:
            return None
        size = self._idle_sizes[i]
        buffers = self._idle[size]
        buffer = buffers.pop()
        if not buffers:
            del self._idle[size]
            del self._idle_sizes[i]
        return buffer

    def _new(self, need: int) -> np.ndarray:
        if self.max_bytes is not None and self.reserved + need > self.max_bytes:
            self._free_idle(self.reserved + need - self.max_bytes)
            if self.reserved + need > self.max_bytes:
                raise GPUError(
                    f"pinned host memory cap reached: a {_mib(need)} buffer would make {_mib(self.reserved + need)} "
                    f"pinned, over the {_mib(self.max_bytes)} cap ({_mib(self.in_use)} in use by host rings); "
                    f"raise the cap (--pinned-cap-mib, pinned_cap_mib=), or run fewer streams or smaller rings "
                    f"(--ring-size)"
                )
        buffer = self._allocate(need)
        self.host_allocs += 1
        self.reserved += need
        return buffer

    def _free_idle(self, need: int | None) -> int:
        """Free idle buffers, largest first, until ``need`` bytes (all if None); nothing if that cannot suffice."""
        if need is not None and sum(s * len(self._idle[s]) for s in self._idle_sizes) < need:
            return 0
        freed = 0
        while self._idle_sizes and (need is None or freed < need):
            size = self._idle_sizes[-1]
            buffers = self._idle[size]
            self._free(buffers.pop())
            if not buffers:
                del self._idle[size]
                self._idle_sizes.pop()
            self.host_frees += 1
            self.reserved -= size
            freed += size
        return freed
