"""The CUDA backend: streams and per-frame events, the GPU clock, and memory for each strategy."""

from __future__ import annotations

from typing import Any

from ..memory.registry import MemoryRequest, Strategy
from ..memory.strategies import Memory
from .clock import GpuClock
from .cuda import cupy
from .failures import creating
from .streams import CudaOps


class CudaBackend:
    name = "cuda"

    def __init__(self, strategy: Strategy, streams: int, device_id: int = 0):
        self.strategy = strategy
        self.device_id = device_id
        self.make_current()
        # A strategy written as stream-unaware code would be (naive) runs on the legacy default stream.
        self.ops = CudaOps(streams, default_stream=strategy.default_stream)
        self.clock = creating("creating the GPU clock's stream and events", GpuClock)

    def memory(self, request: MemoryRequest) -> Memory:
        return self.strategy.build("cuda", request)

    def array_module(self) -> Any:
        return cupy()

    def make_current(self) -> None:
        """This backend's device, its context current in the calling thread."""
        cupy().cuda.Device(self.device_id).use()
