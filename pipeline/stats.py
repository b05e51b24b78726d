"""Run statistics: per-frame stage times and latency, drops, memory counters, the summary table and JSON.

Per-frame series are kept in fixed-size rings (the last 262,144 frames, see :mod:`pipeline.latency`),
so a live run of any length holds its statistics in constant memory; summaries cover those frames.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from .latency import LatencyLog, Ring, hop_label, summary
from .reportfile import report_file

STAGES = ("decode", "upload", "kernels", "download", "encode")
# Where a frame can be dropped (see engine.py): before the decode stage copied it into a host slot,
# and in its host slot before the GPU submit stage took it. The encode stage never drops: frames
# there hold GPU work, and its back-pressure reaches the submit stage's queue within a few frames.
DROP_STAGES = ("decode", "submit")
# Version of the --stats-json layout (docs/stats-schema.md): raised when a key is renamed, removed or
# changes meaning; new keys may appear without a change.
SCHEMA_VERSION = 1


@dataclass
class RunStats:
    device: str = "cpu"
    decode: str = "cpu"  # cpu or nvdec
    decode_sessions: int = 1  # NVDEC sessions sharing the input's GOPs (pipeline.gops)
    decoders_reused: int = 0  # of them, decoders a previous run left open (pipeline.nvdec.DecoderPool)
    layouts: dict[str, str] = field(default_factory=dict)  # the frames' layout in and out (i420, i420p10, ...)
    pix_fmt: str | None = None  # the encoder's pixel format (None: no encoder)
    strategy: str = "pool"
    started: float = field(default_factory=time.perf_counter)
    wall_s: float = 0.0
    finish_ms: float | None = None  # after wall_s: the encoder flushed, the output placed, memory given back
    frames_in: int = 0
    frames_out: int = 0
    audio_packets: int = 0
    # Damaged input survived (see source.py): packets skipped, frames concealed by the decoder,
    # timestamps moved forward to stay increasing.
    decode_errors: int = 0
    corrupt_frames: int = 0
    retimed_frames: int = 0
    stage_ms: dict[str, Ring] = field(default_factory=lambda: {s: Ring() for s in STAGES})
    latency_ms: Ring = field(default_factory=Ring)  # decoded to encoded (write_video returned)
    done_at: Ring = field(default_factory=Ring)  # perf_counter when each frame left the encoder
    mode: str = "file"  # file, paced (--realtime) or live
    drop_policy: str = "block"
    drops: dict[str, int] = field(default_factory=lambda: {s: 0 for s in DROP_STAGES})
    first_drop_s: float | None = None  # seconds into the run of the first drop, and of the last
    last_drop_s: float | None = None
    queues: dict[str, dict[str, int]] = field(default_factory=dict)  # channel: size and peak occupancy
    reconnects: int = 0
    latency: LatencyLog | None = None  # per-hop timestamps (set by the engine)
    memory: dict[str, Any] = field(default_factory=dict)
    startup_ms: dict[str, float] = field(default_factory=dict)  # set-up phase by phase (see pipeline.startup)
    first_output_at: float | None = None  # perf_counter when the first packet (or frame) came out
    # Timestamps (seconds) of the first and latest frames out: how much of the video is done (-progress).
    first_pts_s: float | None = None
    last_pts_s: float | None = None
    origin: float | None = None  # where time to first frame counts from: the process's start (CLI), else the run's
    # Counters sampled after warm-up, to show what the steady state allocates.
    memory_warm: dict[str, Any] = field(default_factory=dict)
    input: str = ""
    output: str = ""
    width: int = 0
    height: int = 0
    filters: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_frame(self, timings: dict[str, float], latency_ms: float, pts_s: float | None = None) -> None:
        with self._lock:
            if pts_s is not None:
                self.last_pts_s = pts_s
                if self.first_pts_s is None:
                    self.first_pts_s = pts_s
            for stage, ms in timings.items():
                self.stage_ms[stage].append(ms)
            self.latency_ms.append(latency_ms)
            self.done_at.append(time.perf_counter())
            self.frames_out += 1

    def count_in(self) -> None:
        with self._lock:
            self.frames_in += 1

    def drop(self, stage: str, *, received: bool = False) -> None:
        """Count a dropped frame; ``received``: it had not been counted in frames_in yet."""
        with self._lock:
            self.drops[stage] += 1
            self.last_drop_s = round(time.perf_counter() - self.started, 3)
            if self.first_drop_s is None:
                self.first_drop_s = self.last_drop_s
            self.frames_in += received

    @property
    def dropped(self) -> int:
        return sum(self.drops.values())

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

    def first_output(self, at: float) -> None:
        if self.first_output_at is None:
            self.first_output_at = at

    def time_to_first_frame_ms(self) -> float | None:
        """From the process's start (the CLI) or the run's (the API) to the first packet out."""
        if self.first_output_at is None:
            return None
        origin = self.origin if self.origin is not None else self.started
        return round((self.first_output_at - origin) * 1e3, 1)

    def steady_allocs_per_frame(self) -> float | None:
        """Device allocations per frame after warm-up (the pooled path must show 0)."""
        if not self.memory_warm or self.frames_out <= self.memory_warm.get("frames", 0):
            return None
        frames = self.frames_out - self.memory_warm["frames"]
        return (self.memory["device_allocs"] - self.memory_warm["device_allocs"]) / frames

    def to_dict(self, per_frame: bool = True) -> dict[str, Any]:
        """Everything the JSON holds; ``per_frame``: with the per-frame latency series (large)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "input": self.input,
            "output": self.output,
            "device": self.device,
            "decode": self.decode,
            "decode_sessions": self.decode_sessions,
            "decoders_reused": self.decoders_reused,
            "alloc": self.strategy,
            "size": [self.width, self.height],
            "layouts": self.layouts,
            "pix_fmt": self.pix_fmt,
            "filters": self.filters,
            "frames_in": self.frames_in,
            "frames_out": self.frames_out,
            "audio_packets": self.audio_packets,
            "decode_errors": self.decode_errors,
            "corrupt_frames": self.corrupt_frames,
            "retimed_frames": self.retimed_frames,
            "started_at": round(time.time() - (time.perf_counter() - self.started), 4),
            "wall_s": round(self.wall_s, 4),
            "finish_ms": self.finish_ms,
            "fps": round(self.fps, 2),
            "steady_fps": round(self.steady_fps(), 2),
            "time_to_first_frame_ms": self.time_to_first_frame_ms(),
            "startup_ms": self.startup_ms,
            "stage_ms": {s: summary(v.values()) for s, v in self.stage_ms.items()},
            "latency_ms": summary(self.latency_ms.values()),
            "memory": self.memory,
            "steady_device_allocs_per_frame": self.steady_allocs_per_frame(),
            **self._realtime_dict(),
            **({"per_frame": self.latency.series() if self.latency else {}} if per_frame else {}),
        }

    def _realtime_dict(self) -> dict[str, Any]:
        lat = self.latency
        return {
            "mode": self.mode,
            "drop_policy": self.drop_policy,
            "drops": {**self.drops, "total": self.dropped},
            "drops_at_s": {"first": self.first_drop_s, "last": self.last_drop_s},
            "queues": self.queues,
            "reconnects": self.reconnects,
            "latency_budget_ms": lat.budget_ms if lat else None,
            "over_budget": lat.over_budget if lat else 0,
            "latency_hops_ms": lat.hops() if lat else {},
        }

    def write_json(self, path: str | Path, exclusive: bool = False) -> None:
        """Indented, except the per-frame series: one line per column keeps a long run's file compact.

        ``exclusive``: fail (FileExistsError) rather than replace a file that exists by now."""
        body = json.dumps(self.to_dict(per_frame=False), indent=2)
        series = self.latency.series() if self.latency else {}
        columns = ",\n".join(f"    {json.dumps(name)}: {json.dumps(values)}" for name, values in series.items())
        body = body[:-2] + ',\n  "per_frame": {' + (f"\n{columns}\n  " if columns else "") + "}\n}"
        with report_file(path, exclusive) as f:
            f.write(body + "\n")

    def table(self) -> Table:
        d = self.to_dict(per_frame=False)
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
        notes = []
        ttff = self.time_to_first_frame_ms()
        if ttff is not None:
            phases = ", ".join(f"{name.replace('_', ' ')} {ms:.0f}" for name, ms in self.startup_ms.items())
            finish = f"; then {self.finish_ms:.0f} ms to finish" if self.finish_ms is not None else ""
            notes.append(f"first frame out after {ttff:.0f} ms (set-up ms: {phases}); steady "
                         f"{self.steady_fps():.1f} fps{finish}")
        if self.decode_errors or self.corrupt_frames or self.retimed_frames:
            notes.append(f"damaged input: {self.decode_errors} packets skipped, {self.corrupt_frames} frames "
                         f"concealed, {self.retimed_frames} timestamps moved")
        if self.mode != "file" or self.dropped:
            per_stage = ", ".join(f"{n} before {stage}" for stage, n in self.drops.items())
            notes.append(f"{self.mode} input, {self.drop_policy}: {self.frames_in} frames in, {self.frames_out} out, "
                         f"{self.dropped} dropped ({per_stage})"
                         + (f"; {self.reconnects} reconnects" if self.reconnects else ""))
        if notes:
            t.caption = "\n".join(notes)
            t.caption_justify = "left"
        return t

    def hops_table(self) -> Table | None:
        """p50/p95/p99/max of every hop of a frame and end to end (see pipeline/latency.py)."""
        if self.latency is None:
            return None
        t = Table(title="latency by hop (ms)", title_justify="left")
        for name in ("hop", "p50", "p95", "p99", "max"):
            t.add_column(name, justify="left" if name == "hop" else "right")
        for hop, s in self.latency.hops().items():
            if s["count"]:
                bold = "bold" if hop in ("decoded_to_encoder", "end_to_end") else None
                t.add_row(hop_label(hop), *(f"{s[k]:.2f}" for k in ("p50", "p95", "p99", "max")), style=bold)
        lat = self.latency
        if lat.budget_ms is not None:
            t.caption = f"{lat.over_budget} frames over the {lat.budget_ms:g} ms budget (decoded to packet)"
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


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"
