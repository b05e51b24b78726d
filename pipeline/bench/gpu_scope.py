"""The ``gpu`` benchmark scope: upload, kernels, download and memory management alone.

Frames are decoded once into ordinary host memory, as a decoder leaves them. Each strategy then
moves them its own way, exactly as in ``pipeline run``: copy into a host slot (the pinned ring, or a
fresh buffer), upload, kernels, download into a host slot, and a sink that discards the result.
The copies into host slots run on several threads (NumPy releases the GIL), because one thread's
memcpy, not the GPU, would otherwise bound the pooled path.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..channels import END, Aborted, Channel, wait_for
from ..config import RunConfig
from ..frames import FrameMeta, VideoFormat, WorkItem
from ..processor import FramePlan, Processor


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
    """One strategy, set up once, then timed over any number of frames."""

    def __init__(self, fmt: VideoFormat, chain, strategy: str, cfg: RunConfig, copy_threads: int = 4):
        from ..gpu.memory import cuda_memory
        from ..gpu.streams import CudaOps

        plan = FramePlan.build(fmt, chain)
        self.memory = cuda_memory(strategy, fmt.nbytes, plan.out_format.nbytes, plan.frame_bytes, cfg, plan.state_bytes)
        ops = CudaOps(cfg.streams, default_stream=strategy == "naive")
        self.abort = threading.Event()
        self.processor = Processor(ops, self.memory, plan, chain, cfg.in_flight, self.abort)
        self.copiers = ThreadPoolExecutor(copy_threads, thread_name_prefix="pipeline-copy")
        self.depth = max(cfg.ring_size, cfg.in_flight)
        self.error: BaseException | None = None

    def run(self, frames: list[np.ndarray], count: int) -> ScopeRun:
        before = self.memory.counters()
        latencies: list[float] = []
        pending: Channel = Channel(self.depth, self.abort)
        submitted: Channel = Channel(self.depth, self.abort)
        t0 = time.perf_counter()
        threads = [
            threading.Thread(target=self._guard, args=(self._submit_loop, pending, submitted), name="pipeline-submit"),
            threading.Thread(target=self._guard, args=(self._sink_loop, submitted, latencies), name="pipeline-sink"),
        ]
        for t in threads:
            t.start()
        try:
            for i in range(count):
                # Slots are taken here, in frame order: the submit thread consumes frames in order,
                # so letting copy threads race for slots could leave it waiting on a frame with none.
                slot = wait_for(lambda: self.memory.in_host.acquire(timeout=0.05), self.abort)
                pending.put(self.copiers.submit(self._fill, slot, frames[i % len(frames)], i))
            pending.put(END)
        except Aborted:
            pass
        for t in threads:
            t.join()
        if self.error is not None:
            raise self.error
        seconds = time.perf_counter() - t0
        return ScopeRun(count, seconds, latencies, before, self.memory.counters())

    def _guard(self, loop, *args) -> None:
        try:
            loop(*args)
        except Aborted:
            pass
        except BaseException as e:  # reported by run(); the other loops stop through the abort flag
            self.error = self.error or e
            self.abort.set()

    @staticmethod
    def _fill(slot, frame: np.ndarray, index: int) -> WorkItem:
        meta = FrameMeta(index, index, None)
        np.copyto(slot.array, frame)
        return WorkItem(meta, in_slot=slot)

    def _submit_loop(self, pending: Channel, submitted: Channel) -> None:
        while (future := pending.get()) is not END:
            item = future.result() if isinstance(future, Future) else future
            self.processor.submit(item)
            submitted.put(item)
        submitted.put(END)

    def _sink_loop(self, submitted: Channel, latencies: list[float]) -> None:
        out = self.memory.out_host
        while (item := submitted.get()) is not END:
            self.processor.complete(item)
            out.release(item.out_slot)
            latencies.append((time.perf_counter() - item.meta.decoded_at) * 1e3)

    def close(self) -> None:
        self.copiers.shutdown()
        self.processor.close()
