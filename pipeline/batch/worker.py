"""The worker side of a batch: a state kept for the worker's whole life, and the task run per file.

A worker is one long-lived process (one per GPU by default) that runs one file at a time. It stays up
between files, so the imported modules, the CUDA context and the compiled kernels (cached per device
by ``gpu/cuda.py`` and CuPy) are made once and serve every file: only the first file on a worker pays
for them (its result says ``warm: false``).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import traceback
from pathlib import Path
from typing import Callable

from distributed import get_worker
from distributed.diagnostics.plugin import WorkerPlugin

from ..checks import as_pipeline_error
from ..engine import Pipeline, RunControl
from ..errors import EXIT_GPU, EXIT_INTERNAL, EXIT_OUTPUT, GPUStalled, Interrupted, PipelineError
from ..log import log
from ..many import SharedBackend, SharedMemory
from ..nvdec import DecoderPool
from ..stats import RunStats
from .cluster import LEFT_TO_THE_BATCH
from .jobs import FileResult, Job
from .resume import forget, input_identity, restore, write_marker

PLUGIN = "pipeline-batch"
MAX_NOTICES = 20  # per file: a damaged input can warn on every packet; the first ones say enough


class WorkerState:
    """What a worker keeps between files: how many it ran, the device it is bound to, the run in
    progress (so the client can stop it), the batches stopped, and the memory its pooled runs share
    (a device arena and a pinned pool per backend, as several inputs of one process share them): a
    file of a size the worker has run takes its frames from there without a cudaMalloc or cudaHostAlloc.
    Its NVDEC decoders stay open too, for the next file of the same codec and parameter sets."""

    def __init__(self, name: str):
        self.name = name
        self.files = 0
        self.gpu: str | None = None
        self._memory: dict[tuple[str, int], SharedMemory] = {}  # (backend, GPU): what its pooled runs borrow
        self.decoders = DecoderPool()
        self._stopped: dict[str, int] = {}  # batch id: the signal that stopped it
        self._current: tuple[Job, RunControl] | None = None
        self._lock = threading.Lock()
        self.notices: list[str] = []
        self.handler = _NoticeHandler(self)
        self.stalled: str | None = None  # a run's GPU work never completed: its threads are stuck for good

    def begin(self, job: Job, control: RunControl) -> int | None:
        """Mark ``job`` as running; the signal number instead when its batch was stopped already."""
        with self._lock:
            signum = self._stopped.get(job.batch_id)
            if signum is None:
                self._current = (job, control)
                self.notices = []
            return signum

    def end(self) -> None:
        with self._lock:
            self._current = None

    def stop(self, batch_id: str, signum: int) -> int | None:
        """Stop ``batch_id`` here: its file in progress drains and stops, later ones do not start.
        Returns the index of the file that was running, if any."""
        with self._lock:
            self._stopped[batch_id] = signum
            if self._current is None or self._current[0].batch_id != batch_id:
                return None
            job, control = self._current
        control.stop(signum)
        return job.index

    def device_label(self, device: str) -> str:
        """Where a run that used ``device`` ran: ``cpu``, or the GPU with its PCI bus id."""
        if device != "cuda":
            return "cpu"
        if self.gpu is None:
            self.gpu = _cuda_label()
        return self.gpu

    def memory_for(self, backend, cfg) -> SharedMemory:
        """The memory this worker's pooled runs on ``backend`` (and its GPU) share, made by the first of
        them; the pinned cap is the current file's (a later batch on a long-lived cluster may set another)."""
        from ..memory.shared import default_pinned_cap

        key = (backend.name, getattr(backend, "device_id", 0))
        with self._lock:
            memory = self._memory.get(key)
            if memory is None:
                memory = self._memory[key] = SharedMemory(backend.name)
            if backend.name == "cuda":
                memory.pinned.max_bytes = cfg.pinned_cap_mib * 2**20 if cfg.pinned_cap_mib else default_pinned_cap()
            return memory

    def close_memory(self) -> None:
        """Give the shared memory back (the worker is going away). Not while a file runs (Dask tears its
        plugins down before the task ends; that run still holds blocks) nor after a stall, whose frames
        are still on the device: freeing would pull memory from under them, or wait on them for good. The
        process's exit frees it then."""
        with self._lock:
            if self._current is not None or self.stalled is not None:
                return
            memories, self._memory = list(self._memory.values()), {}
        self.decoders.close()
        for memory in memories:
            memory.close()

    def binding(self) -> str:
        """What the worker is pinned to, before any run told which device it used."""
        if self.gpu is not None:
            return self.gpu
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        return "cpu" if visible == "" else f"cuda:{visible}" if visible else ""


class _NoticeHandler(logging.Handler):
    """The run's warnings, kept with its result (a worker's stderr is often on another machine)."""

    def __init__(self, state: WorkerState):
        super().__init__(logging.WARNING)
        self._state = state

    def emit(self, record: logging.LogRecord) -> None:
        if len(self._state.notices) < MAX_NOTICES:
            self._state.notices.append(record.getMessage())


class BatchPlugin(WorkerPlugin):
    """Gives every worker its :class:`WorkerState`, including workers that join later."""

    # Registered again by each batch on a long-lived cluster: keep the state (and what it will hold).
    idempotent = True

    def __init__(self, ignore_sigint: bool = False):
        self.ignore_sigint = ignore_sigint

    def setup(self, worker) -> None:
        self.state = WorkerState(str(worker.name))
        log.addHandler(self.state.handler)
        if self.ignore_sigint and threading.current_thread() is threading.main_thread():
            # A worker of the batch's own cluster leaves Ctrl-C, SIGHUP and SIGTERM to the batch process (see
            # cluster.py), also when its Nanny restarted it after a crash, with the batch's own handler in place.
            for sig in LEFT_TO_THE_BATCH:
                signal.signal(sig, signal.SIG_IGN)

    def teardown(self, worker) -> None:
        log.removeHandler(self.state.handler)
        self.state.close_memory()


_UNPLUGGED: dict[str, WorkerState] = {}


def state_of(worker) -> WorkerState:
    state = getattr(worker.plugins.get(PLUGIN), "state", None)
    if state is None:  # the plugin is not there (yet): a state of the module's own, per worker
        state = _UNPLUGGED.setdefault(str(worker.name), WorkerState(str(worker.name)))
    return state


def process_file(job: Job) -> FileResult:
    """The task: run one file in this worker, write its resume marker, return what happened."""
    started = time.time()
    worker = get_worker()
    state = state_of(worker)
    result = FileResult(job.index, job.input, job.output, worker=state.name, address=worker.address)
    control = RunControl()
    control.keep_partial = False  # a batch's outputs are whole files or none: an earlier one is never replaced by less
    signum = state.begin(job, control)
    if signum is not None:
        result.status, result.exit_code, result.error = "cancelled", 128 + signum, "cancelled before it started"
    elif state.stalled is not None:  # a stuck CUDA call holds this worker's GPU: another run would stall too
        state.end()
        result.status, result.exit_code = "failed", EXIT_GPU
        result.error = f"not run: this worker's GPU stalled on an earlier file ({state.stalled})"
    else:
        try:
            _run(job, control, state, result)
        finally:
            state.end()
    result.started = started
    result.ended = time.time()
    result.task_s = result.ended - started
    return result


def _run(job: Job, control: RunControl, state: WorkerState, result: FileResult) -> None:
    out = Path(job.output) if job.output else None
    identity = input_identity(Path(job.input))
    before = _file_identity(out)
    t0 = time.perf_counter()
    kept = None
    try:
        if out is not None:
            kept = forget(out)
        stats, allocations = _run_pipeline(job, control, state)
    except BaseException as e:
        _drop_new_output(out, before, kept)
        _record_failure(result, e)  # raises again what is not an Exception: the worker itself is going away
        # The traceback's frames hold the run's parts (its decoder, surfaces, memory); they let go now, in
        # the file's time, as `_run_pipeline` lets go of a run that succeeded.
        traceback.clear_frames(e.__traceback__)
        result.seconds = time.perf_counter() - t0
        if isinstance(e, GPUStalled):
            state.stalled = Path(job.input).name
        result.gpu = state.binding()
    else:
        result.seconds = time.perf_counter() - t0
        result.status, result.frames, result.fps = "done", stats.frames_out, round(stats.fps, 2)
        result.gpu = state.device_label(stats.device)
        result.device_allocs, result.pinned_allocs = allocations()
        result.decoders_reused = stats.decoders_reused
        if out is not None:
            _mark_complete(out, identity, job, result)
    finally:
        result.warm = state.files > 0
        result.notices = list(state.notices)
        state.files += 1


def _run_pipeline(job: Job, control: RunControl, state: WorkerState) -> tuple[RunStats, Callable[[], tuple]]:
    """Run the file's pipeline, which lets go of its parts (NVDEC's sessions free their surfaces) as this
    returns: in the file's time. A failed run's frames are cleared by the caller, with the same effect."""
    pipeline, allocations = _pipeline(job, control, state)
    return pipeline.run(), allocations


ALLOCATIONS = ("arena_device_allocs", "pinned_host_allocs")


def _pipeline(job: Job, control: RunControl, state: WorkerState) -> tuple[Pipeline, Callable[[], tuple]]:
    """The file's pipeline, built as ``pipeline run`` builds it (checks first, the backend beside the
    decoder's open), a pooled one borrowing the worker's shared memory; and what tells, once it has run,
    the device and pinned allocations that memory made for it (None, None when not pooled)."""
    counted: list = []  # the shared memory and its counters before the file's memory was taken

    def share(backend):
        if backend.strategy.name != "pool":
            return backend
        shared = state.memory_for(backend, job.config)
        counted[:] = [shared, shared.counters()]
        return SharedBackend(backend, shared)

    def allocations() -> tuple:
        if not counted:
            return None, None
        shared, start = counted
        now = shared.counters()
        return tuple(now[k] - start[k] for k in ALLOCATIONS)

    pipeline = Pipeline.from_config(job.config, control=control, wrap_backend=share, decoders=state.decoders)
    return pipeline, allocations


def _mark_complete(out: Path, identity: tuple[int, int] | None, job: Job, result: FileResult) -> None:
    try:
        write_marker(out, identity, job.options_hash, result.frames)
    except OSError as e:  # the output is whole, but a next batch could not know it: not complete, removed
        out.unlink(missing_ok=True)  # as any failed file's (a batch's outputs are whole files or none)
        result.status, result.exit_code = "failed", EXIT_OUTPUT
        result.error = f"{out}: cannot write its resume marker ({e.strerror or e}); output removed"


def _record_failure(result: FileResult, error: BaseException) -> None:
    error = as_pipeline_error(error)  # a CUDA or memory error surfacing raw is the command's exit 5, not a bug
    if isinstance(error, Interrupted):
        result.status, result.exit_code = "interrupted", error.exit_code
        result.error = "stopped mid-run; nothing written"
    elif isinstance(error, PipelineError):
        result.status, result.exit_code, result.error = "failed", error.exit_code, str(error)
    elif isinstance(error, Exception):  # a bug: one line, as the command line reports it
        result.status, result.exit_code = "failed", EXIT_INTERNAL
        result.error = f"internal error: {type(error).__name__}: {error}"
    else:
        raise error  # KeyboardInterrupt, SystemExit: the worker itself is going away


def _file_identity(path: Path | None) -> tuple[int, int] | None:
    try:
        st = path.stat() if path is not None else None
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns) if st is not None else None


def _drop_new_output(out: Path | None, before: tuple[int, int] | None, kept_marker: str | None) -> None:
    """A batch's run that fails or is stopped leaves its target alone (``RunControl.keep_partial``); should
    anything have been put there all the same, it is not complete, so it goes, while a file that was there
    before the run and was left alone stays, with the marker it had (a rerun then skips it as before)."""
    if out is None:
        return
    now = _file_identity(out)
    if now is not None and now != before:
        out.unlink(missing_ok=True)
    elif now is not None:
        restore(out, kept_marker)


def stop_batch(batch_id: str, signum: int = 2, dask_worker=None) -> int | None:
    """Run on every worker by the client (``Client.run``) when the batch is stopped."""
    return state_of(dask_worker).stop(batch_id, signum)


def _cuda_label() -> str:
    """``cuda:<CUDA_VISIBLE_DEVICES> <PCI bus id>``: the device this worker process is pinned to."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    try:
        from ..gpu.cuda import cupy

        runtime = cupy().cuda.runtime
        bus = runtime.deviceGetPCIBusId(runtime.getDevice())
    except Exception:  # the label is a report, never a reason to fail a finished file
        bus = ""
    name = f"cuda:{visible}" if visible else "cuda"
    return f"{name} {bus}".strip()


def worker_facts(dask_worker=None) -> dict[str, object]:
    """Run on every worker when a batch starts (``Client.run``): its clock, name and pinned GPU."""
    return {"time": time.time(), "host": socket.gethostname(),
            "name": str(dask_worker.name) if dask_worker is not None else "",
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
