"""CUDA event completion times on the host clock, for the per-frame latency report.

cudaEventElapsedTime gives the time between two completed events, not when either completed. A
reference event, recorded on an idle stream of our own and waited for, ties the two clocks: it
completed between the host times just before its record and just after its wait (some 10 to 30 µs
apart; the midpoint is taken). Any event's host time is then that reference plus the elapsed time
from it. The reference is renewed every few seconds, so the drift between the GPU timer and the host
clock and the float32 resolution of the elapsed time stay far below a microsecond.
"""

from __future__ import annotations

import time
from typing import Any

from .cuda import cupy

RESYNC_S = 5.0


class GpuClock:
    def __init__(self):
        cp = cupy()
        self._stream = cp.cuda.Stream(non_blocking=True)  # never has work: its events complete at once
        self._elapsed = cp.cuda.get_elapsed_time
        self._sync()

    def _sync(self, tries: int = 3) -> None:
        best = None
        for _ in range(tries):  # the tightest of a few: a wake-up delayed by the scheduler is not kept
            ref = cupy().cuda.Event()
            before = time.perf_counter()
            ref.record(self._stream)
            ref.synchronize()
            after = time.perf_counter()
            if best is None or after - before < best[2] - best[1]:
                best = (ref, before, after)
        ref, before, after = best
        self._ref, self._t0 = ref, (before + after) / 2
        self.uncertainty_s = (after - before) / 2

    def stamps(self, ctx: Any) -> dict[str, float]:
        """Host times of the frame's uploaded/filtered/done events; ``done`` must have completed."""
        if time.perf_counter() - self._t0 > RESYNC_S:
            self._sync()
        e = ctx.events
        at = self._host_time
        return {"uploaded": at(e["uploaded"]), "filtered": at(e["filtered"]), "downloaded": at(e["done"])}

    def _host_time(self, event: Any) -> float:
        # Negative when the event completed before the reference: the arithmetic holds either way.
        return self._t0 + self._elapsed(self._ref, event) / 1e3
