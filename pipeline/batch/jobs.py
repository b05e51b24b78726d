"""What travels between the batch client and its workers: one :class:`Job` out, one :class:`FileResult` back.

Both are small plain dataclasses (paths, a frozen config, numbers): the frames never leave the worker,
so a file costs the scheduler two short messages whatever its size.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..config import RunConfig

# What became of a file (``pending`` until it is known): processed; skipped (a complete output from an
# earlier batch is there); failed (its error and exit code say why); interrupted (stopped mid-run by
# Ctrl-C, nothing written); cancelled (Ctrl-C came before it started).
STATUSES = ("done", "skipped", "failed", "interrupted", "cancelled")


@dataclass(frozen=True)
class Job:
    """One file to process: ``config`` is the run's, with this file's input and output filled in."""

    index: int  # position in the expanded input list: the table's order
    batch_id: str  # which batch a worker's stop request is for (a shared cluster runs several)
    input: str
    output: str | None  # None: -o null, processed and discarded
    config: RunConfig
    options_hash: str  # what the resume marker records (see resume.py)


@dataclass
class FileResult:
    """One file's outcome. Times are seconds on the client's clock since the batch started (a worker's
    own times are moved onto it by its measured clock offset); None where a step did not happen."""

    index: int
    input: str
    output: str | None
    status: str = "pending"
    exit_code: int = 0
    error: str = ""
    frames: int = 0
    fps: float = 0.0
    seconds: float = 0.0  # the file's own run time (building the pipeline, decoding, encoding)
    worker: str = ""
    gpu: str = ""  # what the worker is bound to: "cuda <CUDA_VISIBLE_DEVICES> <PCI bus id>", or "cpu"
    warm: bool = False  # the worker had processed a file before: process, CUDA context and kernels reused
    notices: list[str] = field(default_factory=list)  # the run's warnings (damaged packets, conversions)
    # A pooled run's new device and page-locked allocations in the worker's shared memory (0 once the
    # worker has run a file of that size); None for other strategies, whose memory is their own.
    device_allocs: int | None = None
    pinned_allocs: int | None = None
    decoders_reused: int = 0  # NVDEC decoders an earlier file on the worker left open, used again
    submitted: float | None = None
    started: float | None = None  # the task began on the worker
    ended: float | None = None  # the task returned on the worker
    received: float | None = None  # the client had the result
    task_s: float = 0.0  # worker time inside the task: the run plus the batch layer's own work there
    # The batch layer's cost for this file (report.measure_overhead): from "submitted and its worker
    # free" to the task starting, the task's time outside the run, and from the task's end to the result.
    start_gap_s: float | None = None
    end_gap_s: float | None = None
    overhead_s: float | None = None
    overhead_fraction: float | None = None  # overhead_s / seconds
    address: str = ""  # the worker's address, to find its clock offset

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("address")
        return {k: round(v, 5) if isinstance(v, float) else v for k, v in data.items()}
