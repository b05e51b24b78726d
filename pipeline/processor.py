"""The GPU stage: per frame, upload, colour conversion, the filter chain, conversion back, download.

Backend-neutral: ``ops`` is :class:`~pipeline.gpu.streams.CudaOps` or :class:`~pipeline.cpu.CpuOps`,
``memory`` one of the allocation strategies. Everything for a frame is issued on its own stream, and
buffers are handed back with the event of their last use, so nothing waits on the whole device.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

import numpy as np

from .channels import wait_for
from .frames import VideoFormat, WorkItem
from .memory.device_pool import BufferSpec, frame_bytes


@dataclass(frozen=True)
class FramePlan:
    """The device buffers one frame needs, computed once from the input format and the chain.

    specs[0] is the I420 input, specs[1] the first RGB image, then for each filter its output and
    scratch buffers, and last the I420 output.
    """

    in_format: VideoFormat
    out_format: VideoFormat
    specs: tuple[BufferSpec, ...]
    steps: tuple[tuple[int, int, tuple[int, ...]], ...]  # per filter: (src index, dst index, scratch indices)
    state: tuple[tuple[BufferSpec, ...], ...] = ()  # per filter: buffers kept across frames

    @classmethod
    def build(cls, fmt: VideoFormat, chain) -> FramePlan:
        specs = [BufferSpec((fmt.nbytes,), np.uint8), BufferSpec((3, fmt.height, fmt.width), np.float32)]
        steps = []
        w, h, src = fmt.width, fmt.height, 1
        state = []
        for f in chain:
            state.append(tuple(BufferSpec(tuple(s), np.float32) for s in f.state_shapes(w, h)))
            scratch = []
            for shape in f.scratch_shapes(w, h):
                scratch.append(len(specs))
                specs.append(BufferSpec(tuple(shape), np.float32))
            w, h = f.output_size(w, h)
            specs.append(BufferSpec((3, h, w), np.float32))
            steps.append((src, len(specs) - 1, tuple(scratch)))
            src = len(specs) - 1
        out = fmt.resized(w, h)
        specs.append(BufferSpec((out.nbytes,), np.uint8))
        return cls(fmt, out, tuple(specs), tuple(steps), tuple(state))

    @property
    def frame_bytes(self) -> int:
        return frame_bytes(list(self.specs))

    @property
    def state_bytes(self) -> int:
        return frame_bytes([s for specs in self.state for s in specs])

    @property
    def last_rgb(self) -> int:
        return self.steps[-1][1] if self.steps else 1


class Processor:
    def __init__(self, ops, memory, plan: FramePlan, chain, in_flight: int, abort: threading.Event | None = None):
        self.ops, self.memory, self.plan, self.chain = ops, memory, plan, list(chain)
        self.abort = abort or threading.Event()
        self._contexts: queue.Queue = queue.Queue()
        for i in range(in_flight):
            self._contexts.put(ops.context(i))
        self._bind_state()
        self._head, self._tail = self._folded() if getattr(ops, "folds_pointwise", False) else ((), ())
        # Temporal filters read what the previous frame wrote, possibly on another stream: order them.
        self._stateful = any(plan.state)
        self._previous = None

    def _folded(self) -> tuple[tuple, tuple]:
        """Pointwise filters at the ends of the chain, to run inside the colour conversion kernels."""
        from .filters.fuse import is_pointwise, members_of

        chain = self.chain
        head = tuple(members_of(chain[0])) if chain and _foldable(chain[0], is_pointwise) else ()
        tail = ()
        if len(chain) > 1 and _foldable(chain[-1], is_pointwise):
            tail = tuple(members_of(chain[-1]))
        return head, tail

    def _bind_state(self) -> None:
        """Reserve every filter's cross-frame state once, from the same device memory as the frames."""
        self._state_buffers = []
        for f, specs in zip(self.chain, self.plan.state):
            if specs:
                buffers = self.memory.device.alloc_frame(list(specs))
                self._state_buffers.append(buffers)
                f.bind_state(buffers.arrays)

    def submit(self, item: WorkItem) -> None:
        """Issue the frame's work asynchronously; the host slot goes back once the upload has completed."""
        ops, mem, plan = self.ops, self.memory, self.plan
        ctx = item.ctx = wait_for(lambda: self._contexts.get(timeout=0.05), self.abort)  # bounds frames in flight
        item.out_slot = wait_for(lambda: mem.out_host.acquire(timeout=0.05), self.abort)
        item.out_format = plan.out_format
        with ops.scope(ctx):
            # Allocated under the frame's stream: stream-ordered allocators (CuPy's pools) key reuse on it.
            bufs = item.device = mem.device.alloc_frame(plan.specs)
            a = bufs.arrays
            ops.mark(ctx, "start")
            ops.upload(ctx, a[0], item.in_slot.array)
            ops.mark(ctx, "uploaded")
            if self._stateful and self._previous is not None:
                ops.after(ctx, self._previous)
            self._kernels(a)
            ops.mark(ctx, "filtered")
            self._previous = ctx
            ops.download(ctx, item.out_slot.array, a[-1])
            ops.mark(ctx, "done")
        # The events belong to the context, which a later frame re-records once this one is complete; a
        # waiter holding them then waits for that later frame instead, later but never too early, since
        # contexts come back in frame order.
        mem.in_host.release(item.in_slot, after=ctx.uploaded)
        item.in_slot = None
        mem.device.free_frame(bufs, after=ctx.done)

    def _kernels(self, a: list) -> None:
        """Colour conversion, the chain, conversion back; end filters folded into the conversions when possible."""
        ops, plan, steps = self.ops, self.plan, self.plan.steps
        first, last = (1 if self._head else 0), len(steps) - (1 if self._tail else 0)
        if self._head:
            ops.yuv_to_rgb(a[0], plan.in_format, a[steps[0][1]], self._head)
        else:
            ops.yuv_to_rgb(a[0], plan.in_format, a[1])
        for f, (src, dst, scratch) in zip(self.chain[first:last], steps[first:last]):
            ops.run_filter(f, a[src], a[dst], [a[i] for i in scratch])
        if self._tail:
            ops.rgb_to_yuv(a[steps[-1][0]], plan.out_format, a[-1], self._tail)
        else:
            ops.rgb_to_yuv(a[plan.last_rgb], plan.out_format, a[-1])

    def complete(self, item: WorkItem) -> dict[str, float]:
        """Wait for this frame only (its ``done`` event) and return its stage times in ms."""
        item.ctx.done.synchronize()
        timings = item.ctx.timings_ms()
        self._contexts.put(item.ctx)
        item.ctx = item.device = None
        return timings

    def close(self) -> None:
        """Wait for the frames still in flight, then give every buffer back."""
        self.ops.synchronize_all()
        for buffers in self._state_buffers:
            self.memory.device.free_frame(buffers, after=None)
        self._state_buffers.clear()
        self.memory.close()


def _foldable(f, is_pointwise) -> bool:
    from .filters.fuse import FusedPointwise

    return isinstance(f, FusedPointwise) or is_pointwise(f)
