"""The allocation strategies: the one list the command line, the config check, the backends and the
benchmark read.

Each names how it is built on CUDA and on the CPU backend (``module:function``, imported only when
used, so this module imports nothing heavy) and whether its copies run on the legacy default stream.
The kernels, copies and encoder are the same for all; only memory management differs.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..log import once


@dataclass(frozen=True)
class MemoryRequest:
    """What one run needs: bytes per host slot each way, per frame on the device, and its settings."""

    in_bytes: int  # one input host slot (0: frames arrive in device memory, no upload)
    out_bytes: int  # one output host slot (0: frames stay in device memory, no download)
    frame_bytes: int  # every device buffer of one frame, aligned
    state_bytes: int  # device buffers kept across frames (temporal filters)
    ring_size: int
    in_flight: int
    headroom: float
    held: int = 0  # frames a consumer may hold past their completion (the frames() iterator holds one)
    pinned_cap: int | None = None  # most page-locked bytes the run may take (None: half of the RAM)
    write_combined: bool = False  # input slots write-combined (cudaHostAllocWriteCombined): written, never read
    lazy_ring: bool = False  # pinned rings start with one slot and grow as frames need (CUDA; not for live sources)


@dataclass(frozen=True)
class Strategy:
    name: str
    summary: str
    cuda: str  # "module:function" building Memory from a MemoryRequest on CUDA
    cpu: str | None = None  # the same on the CPU backend; None: CUDA only
    default_stream: bool = False  # copies and kernels on the legacy default stream, as stream-unaware code does

    def build(self, device: str, request: MemoryRequest) -> Any:
        target = self.cuda if device == "cuda" else self.cpu
        if target is None:
            raise ConfigError(f"--alloc {self.name} needs a CUDA GPU; the CPU backend has "
                              f"{', '.join(n for n, s in STRATEGIES.items() if s.cpu)}")
        if device != "cuda" or self.name != "pool":
            write_combined_ignored(request, f"--alloc {self.name}" if device == "cuda" else "the CPU backend")
        module, _, function = target.partition(":")
        return getattr(importlib.import_module(module), function)(request)


def write_combined_ignored(request: MemoryRequest, where: str) -> None:
    """Where ``request`` asks for write-combined input slots that ``where`` does not make: say so, once per
    process and reason (streams build their memory concurrently)."""
    if request.write_combined and request.in_bytes:
        once(logging.WARNING, "--write-combined applies to the pooled input ring of a single stream on a GPU; "
                              f"ignored with {where}")


STRATEGIES: dict[str, Strategy] = {s.name: s for s in (
    Strategy("pool", "pinned host ring and one preallocated device arena: nothing allocated per frame",
             "pipeline.gpu.memory:pooled", "pipeline.cpu:pooled_memory"),
    Strategy("naive", "pageable host memory, cudaMalloc/cudaFree per buffer per frame, default stream",
             "pipeline.gpu.memory:naive", "pipeline.cpu:naive_memory", default_stream=True),
    Strategy("cupy", "CuPy's caching memory pool (per-stream free lists) and pinned memory pool",
             "pipeline.gpu.memory:cupy_pool"),
    Strategy("async", "cudaMallocAsync/cudaFreeAsync per frame (stream-ordered allocator)",
             "pipeline.gpu.memory:async_pool"),
    Strategy("pinned-per-frame", "the device arena, but cudaHostAlloc/cudaFreeHost per frame",
             "pipeline.gpu.memory:pinned_per_frame"),
)}


def strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ConfigError(f"Invalid alloc ({name!r}). Supported values are {', '.join(STRATEGIES)}.") from None
