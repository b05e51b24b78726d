"""Start-up: where the time before the first frame goes, phase by phase.

``pipeline run`` reports ``time_to_first_frame_ms`` (process start to the first packet out) and a
``startup_ms`` breakdown: imports, CUDA context, kernels (compiled, or loaded from CuPy's on-disk cache),
decoder and encoder open, pinned ring and arena. Phases that run at the same time overlap: their sum
can exceed the wall time they took together.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import threading
import time
from typing import Iterator


def process_started() -> float | None:
    """When this process started, on the ``perf_counter`` clock (Linux; 10 ms resolution), else None."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        age = uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: start time, in clock ticks
    except (OSError, ValueError, IndexError):
        return None
    return time.perf_counter() - max(age, 0.0)


PROCESS_STARTED = process_started()

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 128 * 1024


@functools.cache
def libc():
    """The C library, loaded once (a CDLL left per run sits in a reference cycle). The process's own symbols
    hold it wherever Python links it dynamically, so no ldconfig lookup (find_library) is needed."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def trim_heap() -> None:
    """Give the pages of freed heap memory back to the system (glibc's malloc_trim), at the end of a run.

    FFmpeg's decoder threads and x264's encoder threads each allocate from their own malloc arenas;
    what a run frees there stays mapped, and a process running one file after another (a batch worker)
    grew by tens to hundreds of KiB a run while the bytes in use stayed flat (mallinfo2). Trimming after
    each run keeps it flat (measured: 1000 runs, see docs/benchmarks.md); it takes about a millisecond."""
    try:
        lib = libc()
        if lib is not None:
            lib.malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: its allocator returns memory its own way
        pass


def steady_malloc() -> bool:
    """Keep glibc's malloc from growing a long-lived process run after run (the soak scripts call this; a
    library user may too). glibc raises its mmap threshold each time a large block is
    freed, up to 32 MiB, after which frame-sized buffers (host slots, decoded frames) come from the heap
    instead of their own mappings, and the heap fragments: a process running one clip after another grew
    about 0.2 MiB per run for hundreds of runs. Fixing the threshold (which also turns the adjustment off)
    gives every large buffer back to the system when it is freed. True where it was set (glibc).

    The price: a frame-sized buffer allocated again after a free is a fresh mapping, its pages faulted in
    and zeroed (a 1080p I420 buffer allocated, filled and freed: 0.94 ms against 0.24 ms on the CPU machine).
    The pooled strategies' host buffers are allocated once, the naive one's every frame, so a process that
    compares them must not call this (nor should a single run pay it for whatever else allocates per frame):
    ``pipeline run`` and ``pipeline bench`` leave malloc as an application has it."""
    try:
        lib = libc()
        return bool(lib is not None and lib.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    except (OSError, AttributeError):  # not glibc
        return False


EARLY_CONTEXT_EXIT_WAIT_S = 5.0


def create_cuda_context_early(device: str) -> threading.Thread | None:
    """Create the GPU's CUDA context in the background while the rest of start-up imports.

    Creating the context is the driver's work (0.4-0.5 s on the H200, as long as the imports) and holds no
    lock of Python's; CuPy later finds the device's primary context made and only takes it. Called by
    ``pipeline run`` as soon as it knows the device; where there is no driver or no such GPU it does
    nothing, and the run reports that as it always does."""
    if device == "cpu":
        return None
    index = device.partition(":")[2] or "0"
    if not index.isdigit():
        return None
    thread = threading.Thread(target=_retain_primary_context, args=(int(index),), name="pipeline-cuda-context",
                              daemon=True)
    thread.start()
    # a run that fails at once would otherwise exit while the driver initialises on this thread
    atexit.register(thread.join, EARLY_CONTEXT_EXIT_WAIT_S)
    return thread


def _retain_primary_context(index: int) -> None:
    from .gpu.driver import retain_primary_context

    retain_primary_context(index)


class Phases:
    """Named durations of set-up (thread-safe: phases may run in parallel)."""

    def __init__(self):
        self.t0 = time.perf_counter()
        self.ms: dict[str, float] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, (time.perf_counter() - t0) * 1e3)

    def add(self, name: str, ms: float) -> None:
        with self._lock:
            self.ms[name] = round(self.ms.get(name, 0.0) + ms, 2)
