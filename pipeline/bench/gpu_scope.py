"""The ``gpu`` benchmark scope: upload, kernels, download and memory management alone.

Frames are decoded once into ordinary host memory, as a decoder leaves them. Each strategy then runs
the engine of ``pipeline run`` on them: copy into a host slot (the pinned ring, or a fresh buffer),
upload, kernels, download into a host slot, and a null sink. The copies into host slots run on several
threads (``copy_threads``; NumPy releases the GIL), because one thread's memcpy, not the GPU, would
otherwise bound the pooled path.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..config import RunConfig
from ..video import VideoFormat


@dataclass
class ScopeRun:
    frames: int
    seconds: float
    latency_ms: list[float] = field(default_factory=list)
    memory_before: dict = field(default_factory=dict)
    memory_after: dict = field(default_factory=dict)

    @property
    def fps(self) -> float:
        return self.frames / self.seconds

    @property
    def allocs_per_frame(self) -> float:
        return (self.memory_after["device_allocs"] - self.memory_before["device_allocs"]) / self.frames


def decode_to_host(path: str, limit: int | None) -> tuple[VideoFormat, list[np.ndarray]]:
    """Decode once into plain NumPy I420 frames (outside any timing)."""
    from ..source import DecodedFrame, Source

    source = Source(path)
    try:
        frames = []
        for entry in source.items(limit):
            if isinstance(entry, DecodedFrame):
                buf = np.empty(source.format.nbytes, np.uint8)
                source.copy_into(entry.frame, buf)
                frames.append(buf)
        return source.format, frames
    finally:
        source.close()


class GpuScope:
    """One strategy, its memory set up once, then timed over any number of frames: each run is the
    engine itself, fed by an in-memory source and drained by a null sink."""

    def __init__(self, fmt: VideoFormat, frames: list[np.ndarray], chain, strategy: str, cfg: RunConfig,
                 copy_threads: int = 4):
        from ..build import make_backend
        from ..engine import plan_for

        self.fmt, self.frames, self.chain = fmt, frames, chain
        self.cfg = cfg.replace(alloc=strategy, copy_threads=copy_threads, frames=None)
        self.backend = make_backend("cuda", strategy, cfg.streams)
        plan = plan_for(self._source(1), chain, self.backend, "i420", None)
        self.memory = self.backend.memory(plan.request(self.cfg))

    def _source(self, count: int):
        from ..adapters import ArraySource

        return ArraySource(self.frames, layout="i420", size=(self.fmt.width, self.fmt.height),
                           colour=self.fmt.colour, repeat=count, name="frames in memory")

    def run(self, count: int) -> ScopeRun:
        from ..adapters import NullSink
        from ..engine import Pipeline

        before = self.memory.counters()
        pipeline = Pipeline(self._source(count), NullSink(), self.chain, self.backend, self.cfg, memory=self.memory)
        stats = pipeline.run()
        return ScopeRun(stats.frames_out, stats.wall_s, list(stats.latency_ms.values()), before,
                        self.memory.counters())

    def close(self) -> None:
        self.memory.close()
