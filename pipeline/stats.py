"""Run statistics: per-frame stage times and latency, memory counters, the summary table and JSON."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

STAGES = ("decode", "upload", "kernels", "download", "encode")


@dataclass
class RunStats:
    device: str = "cpu"
    strategy: str = "pool"
    started: float = field(default_factory=time.perf_counter)
    wall_s: float = 0.0
    frames_in: int = 0
    frames_out: int = 0
    audio_packets: int = 0
    # Damaged input survived (see source.py): packets skipped, frames concealed by the decoder,
    # timestamps moved forward to stay increasing.
    decode_errors: int = 0
    corrupt_frames: int = 0
    retimed_frames: int = 0
    stage_ms: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in STAGES})
    latency_ms: list[float] = field(default_factory=list)
    done_at: list[float] = field(default_factory=list)  # perf_counter when each frame left the encoder
    memory: dict[str, Any] = field(default_factory=dict)
    # Counters sampled after warm-up, to show what the steady state allocates.
    memory_warm: dict[str, Any] = field(default_factory=dict)
    input: str = ""
    output: str = ""
    width: int = 0
    height: int = 0
    filters: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_frame(self, timings: dict[str, float], latency_ms: float) -> None:
        with self._lock:
            for stage, ms in timings.items():
                self.stage_ms[stage].append(ms)
            self.latency_ms.append(latency_ms)
            self.done_at.append(time.perf_counter())
            self.frames_out += 1

    def finish(self) -> None:
        self.wall_s = time.perf_counter() - self.started

    @property
    def fps(self) -> float:
        return self.frames_out / self.wall_s if self.wall_s > 0 else 0.0

    def steady_fps(self, skip: int = 8) -> float:
        """Frames per second after the first ``skip`` frames (start-up and kernel compilation excluded)."""
        t = self.done_at
        if len(t) <= skip + 1:
            return self.fps
        return (len(t) - 1 - skip) / (t[-1] - t[skip])

    def steady_allocs_per_frame(self) -> float | None:
        """Device allocations per frame after warm-up (the pooled path must show 0)."""
        if not self.memory_warm or self.frames_out <= self.memory_warm.get("frames", 0):
            return None
        frames = self.frames_out - self.memory_warm["frames"]
        return (self.memory["device_allocs"] - self.memory_warm["device_allocs"]) / frames

    def to_dict(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "output": self.output,
            "device": self.device,
            "alloc": self.strategy,
            "size": [self.width, self.height],
            "filters": self.filters,
            "frames_in": self.frames_in,
            "frames_out": self.frames_out,
            "audio_packets": self.audio_packets,
            "decode_errors": self.decode_errors,
            "corrupt_frames": self.corrupt_frames,
            "retimed_frames": self.retimed_frames,
            "wall_s": round(self.wall_s, 4),
            "fps": round(self.fps, 2),
            "stage_ms": {s: _summary(v) for s, v in self.stage_ms.items()},
            "latency_ms": _summary(self.latency_ms),
            "memory": self.memory,
            "steady_device_allocs_per_frame": self.steady_allocs_per_frame(),
        }

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    def table(self) -> Table:
        d = self.to_dict()
        t = Table(title=f"pipeline: {d['frames_out']} frames in {d['wall_s']:.2f} s ({d['fps']:.1f} fps)",
                  title_justify="left")
        t.add_column("stage")
        t.add_column("mean ms", justify="right")
        t.add_column("p50 ms", justify="right")
        t.add_column("p99 ms", justify="right")
        for stage, s in d["stage_ms"].items():
            if s["count"]:
                t.add_row(stage, f"{s['mean']:.3f}", f"{s['p50']:.3f}", f"{s['p99']:.3f}")
        lat = d["latency_ms"]
        if lat["count"]:
            t.add_row("latency (decoded to encoded)", f"{lat['mean']:.2f}", f"{lat['p50']:.2f}", f"{lat['p99']:.2f}",
                      style="bold")
        if self.decode_errors or self.corrupt_frames or self.retimed_frames:
            t.caption = (f"damaged input: {self.decode_errors} packets skipped, {self.corrupt_frames} frames "
                         f"concealed, {self.retimed_frames} timestamps moved")
            t.caption_justify = "left"
        return t

    def memory_table(self) -> Table:
        m = self.memory
        t = Table(title=f"memory ({self.device}, alloc={self.strategy})", title_justify="left")
        t.add_column("what")
        t.add_column("value", justify="right")
        for key, label in (("bytes_reserved", "device arena reserved"), ("bytes_peak", "device peak in use"),
                           ("pinned_bytes", "pinned host bytes"), ("host_bytes", "host ring bytes")):
            if key in m:
                t.add_row(label, _mib(m[key]))
        for key, label in (("device_allocs", "device allocations"), ("device_frees", "device frees"),
                           ("pool_hits", "pool allocations (hits)")):
            if key in m:
                t.add_row(label, str(m[key]))
        steady = self.steady_allocs_per_frame()
        if steady is not None:
            t.add_row("device allocations per frame after warm-up", f"{steady:g}")
        return t


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0, "mean": 0.0, "p50": 0.0, "p99": 0.0, "max": 0.0}
    a = np.asarray(values)
    return {
        "count": int(a.size),
        "mean": round(float(a.mean()), 4),
        "p50": round(float(np.percentile(a, 50)), 4),
        "p99": round(float(np.percentile(a, 99)), 4),
        "max": round(float(a.max()), 4),
    }


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"
