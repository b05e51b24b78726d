"""Start-up: where the time before the first frame goes, phase by phase.

``pipeline run`` reports ``time_to_first_frame_ms`` (process start to the first packet out) and a
``startup_ms`` breakdown: imports, CUDA context, kernels (compiled, or loaded from CuPy's on-disk cache),
decoder and encoder open, pinned ring and arena. Phases that run at the same time overlap: their sum
can exceed the wall time they took together.
"""

from __future__ import annotations

import contextlib
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
