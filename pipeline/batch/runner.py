"""Running a batch: plan the files (resume), submit one task per file, collect results, stop on request.

The client submits the files largest first (the long ones start early, so the batch does not end waiting
on one), as many as the cluster has threads and the next as each ends, and collects results as they come.
A worker so holds one file at a time: Dask would hand a worker its next file in advance, and a worker that
dies (a crash in one file's run, killed) fails every file it holds. A stop request (Ctrl-C) stops the batch
on every worker, which drains and stops its file in progress and starts no other, and cancels the files
not started; the outputs already complete are kept.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ..checks import check_name_length
from ..config import RunConfig, file_url_as_path, path_text, safe_repr
from ..errors import EXIT_INTERNAL, EXIT_USAGE, ConfigError, OutputError
from ..log import log
from ..outfile import remove_stale_partials
from .cluster import check_dashboard_address, check_scheduler_address, connect, plan_workers, survey
from .inputs import check_lists_kept, claim_directory, expand_inputs, outputs_for, prepare_directory
from .jobs import FileResult, Job
from .report import BatchReport
from .resume import marker_path, options_hash, why_incomplete

OnResult = Callable[[FileResult], None]

REFILL_S = 1.0  # while files wait for a thread: how often the cluster is asked for workers that joined


@dataclass(frozen=True)
class BatchSettings:
    """How a batch runs, beside the per-file run options (a :class:`~pipeline.config.RunConfig`)."""

    output: str = "."  # the output directory, or "null": process and discard
    suffix: str = "_processed"  # outputs are DIR/<stem><suffix><ext>
    gpus: str | None = None  # "all" or "0,1": one worker per GPU (see cluster.plan_workers)
    workers: int | None = None  # that many CPU workers
    scheduler: str | None = None  # tcp://host:8786: an existing cluster instead of a local one
    processes: bool = True  # False: local workers as threads of this process (CPU only; tests)
    dashboard: str | None = None  # the local scheduler's dashboard address (":8787"); None: off
    muxer: str | None = None  # -f: the outputs' extension is its own


class StopRequest:
    """Call it (from a signal handler, another thread) to stop a running batch: files in progress are
    stopped, writing nothing, files not started are cancelled, finished outputs are kept."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int | None = None

    def __call__(self, signum: int = 2) -> None:
        if self.signum is None:
            self.signum = signum
        self.event.set()


def run_batch(inputs: Sequence[str | Path], output: str | Path = ".", *, filters: str | None = None,
              device: str = "auto", alloc: str = "pool", suffix: str = "_processed", overwrite: bool = False,
              gpus: str | None = None, workers: int | None = None, scheduler: str | None = None,
              processes: bool = True, dashboard: str | None = None, on_result: OnResult | None = None,
              stop: StopRequest | None = None, **options: Any) -> BatchReport:
    """Process every file of ``inputs`` (paths, globs, ``@list`` files) into ``output`` (a directory, or
    ``"null"``) on a Dask cluster; a complete output from an earlier batch is skipped.

    ``filters``, ``device``, ``alloc`` and ``options`` are those of :func:`pipeline.run`. ``on_result`` is
    called with each file's :class:`FileResult` as it is known; ``stop`` stops the batch. Returns the
    :class:`BatchReport` (``report.exit_code``: the largest of the files' exit codes)."""
    from ..api import check_list, settings as run_settings

    inputs = check_list(inputs, "run_batch", "inputs", "pass [input] (a path, a glob or an @list file)")
    _check_arguments(output, suffix, gpus, dashboard, processes, on_result, stop)
    cfg = run_settings("", None, filters, device, alloc, {"overwrite": overwrite, **options})
    batch = BatchSettings(output=file_url_as_path(path_text(output)), suffix=suffix, gpus=gpus, workers=workers,
                          scheduler=scheduler, processes=processes, dashboard=dashboard, muxer=cfg.output_format)
    return execute(inputs, cfg, batch, on_result=on_result, stop=stop)


def _check_arguments(output, suffix, gpus, dashboard, processes, on_result, stop) -> None:
    """run_batch's own arguments, of the types the command line would give (ConfigError before any work)."""
    if not isinstance(output, (str, os.PathLike)) or not os.fspath(output):
        raise ConfigError(f"Invalid output ({safe_repr(output)}). Supported values are a directory (str or "
                          "os.PathLike) or \"null\".")
    for name, value, what in (("suffix", suffix, "text (\"_processed\")"),
                              ("gpus", gpus, "None, \"all\" or GPU indexes or UUIDs as text (\"0,1\")"),
                              ("dashboard", dashboard, "None or an address as text (\":8787\")")):
        if not (isinstance(value, str) or value is None and name != "suffix"):
            raise ConfigError(f"Invalid {name} ({safe_repr(value)}). Supported values are {what}.")
    if not isinstance(processes, bool):
        raise ConfigError(f"Invalid processes ({safe_repr(processes)}). Supported values are True and False.")
    if on_result is not None and not callable(on_result):
        raise ConfigError(f"Invalid on_result ({safe_repr(on_result)}). Supported values are None and a function "
                          "taking each FileResult.")
    if stop is not None and not isinstance(stop, StopRequest):
        raise ConfigError(f"Invalid stop ({safe_repr(stop)}). Supported values are None and a StopRequest.")


def execute(inputs: Sequence[str | Path], cfg: RunConfig, batch: BatchSettings, *,
            on_result: OnResult | None = None, stop: StopRequest | None = None) -> BatchReport:
    """The batch of ``inputs`` with run options ``cfg`` (its input and output are set per file)."""
    check_options(cfg)
    check_cluster(batch)
    stop = stop or StopRequest()
    notify = on_result or (lambda result: None)
    lists: list[Path] = []
    sources = expand_inputs(inputs, lists)
    specs = [] if batch.scheduler else plan_workers(batch.gpus, batch.workers, cfg.device)
    if specs and cfg.device.startswith("cuda:"):  # the worker on that GPU sees it as its only one
        cfg = cfg.replace(device="cuda")
    outputs = planned_outputs(sources, batch)
    check_lists_kept(lists, outputs)
    directory = None if batch.output == "null" else Path(batch.output)
    if directory is not None:
        prepare_directory(directory)
    digest = options_hash(cfg)
    report = BatchReport([FileResult(i, str(s), str(o) if o else None) for i, (s, o) in
                          enumerate(zip(sources, outputs))], settings=_describe(cfg, batch, digest))
    with claim_directory(directory):  # from the resume check to the last marker
        jobs = plan(report, cfg, digest, notify)
        specs = specs[:len(jobs)]  # a worker more than the files to run would only start and wait
        if jobs and not stop.event.is_set():
            with connect(specs, scheduler=batch.scheduler, processes=batch.processes,
                         dashboard=batch.dashboard) as client:
                Collector(client, report, stop, notify).run(jobs, own_cluster=batch.scheduler is None)
    for r in report.results:
        if r.status == "pending":  # stopped before it was submitted
            _cancelled(r, stop.signum or 2)
    report.signum = stop.signum
    report.finish()
    return report


def planned_outputs(sources: Sequence[Path], batch: BatchSettings) -> list[Path | None]:
    """Each input's output (absolute), or None for each with ``-o null``."""
    if batch.output == "null":
        return [None] * len(sources)
    return list(outputs_for(sources, Path(batch.output).absolute(), batch.suffix, batch.muxer))


def check_options(cfg: RunConfig) -> None:
    if cfg.stats_json:
        raise ConfigError("--stats-json is one run's; a batch writes its results with --json PATH")
    if cfg.preview:
        raise ConfigError("--preview shows one run; batch workers have no window")
    if cfg.output_format == "image2":  # its outputs are pictures, whose frames no resume marker can vouch for
        raise ConfigError("-f image2: a batch writes one file per input, not pictures; pipeline run -o "
                          "DIR/%04d.png writes one input's frames")
    if not cfg.plugins:  # a plugin's filters are known once the workers load it
        from ..filters import parse_chain

        parse_chain(cfg.filters)  # a bad chain (or a missing LUT) is the whole batch's, before any work


def check_cluster(batch: BatchSettings) -> None:
    """Addresses Dask cannot use are refused before any work; the options of a local cluster mean
    nothing on a joined one: refused rather than ignored."""
    if batch.scheduler is None:
        if batch.dashboard is not None:
            check_dashboard_address(batch.dashboard)
        return
    check_scheduler_address(batch.scheduler)
    local = [name for name, value in (("--gpus", batch.gpus), ("--workers", batch.workers),
                                      ("--dashboard", batch.dashboard)) if value is not None]
    if local:
        raise ConfigError(f"{', '.join(local)} with --scheduler: those set up a cluster here; the joined "
                          "cluster's own workers run the files")


def plan(report: BatchReport, cfg: RunConfig, digest: str, notify: OnResult) -> list[Job]:
    """Skip complete outputs; refuse, without -y, outputs that exist but are not complete; a job each
    for the rest."""
    batch_id = uuid.uuid4().hex[:12]
    jobs = []
    for r in report.results:
        out = Path(r.output) if r.output else None
        refused = _name_refused(out)
        if refused is not None:
            r.status, r.exit_code, r.error = "failed", refused.exit_code, str(refused)
            notify(r)
            continue
        reason = why_incomplete(Path(r.input), out, digest) if out is not None else "not kept"
        if reason is None:
            remove_stale_partials(out)  # of a run stopped at once, whose file a later batch finished
            r.status = "skipped"
            notify(r)
        elif out is not None and out.exists() and not cfg.overwrite:
            r.status, r.exit_code = "failed", EXIT_USAGE
            r.error = (f"{out}: already exists and is not complete for this input and options ({reason}); "
                       "-y replaces it")
            notify(r)
        else:
            # Absolute paths (outputs are already): a worker's current directory is its own.
            source = str(Path(r.input).absolute())
            run_cfg = cfg.replace(input=source, output=r.output or "null", quiet=True)
            jobs.append(Job(r.index, batch_id, source, r.output, run_cfg, digest))
    return jobs


def _name_refused(out: Path | None) -> OutputError | None:
    """An output, or the resume marker beside it, whose name is longer than the filesystem takes: that
    file fails alone, before it runs."""
    if out is None:
        return None
    try:
        check_name_length(out)
        check_name_length(marker_path(out), "resume marker")
    except OutputError as e:
        return e
    return None


def _describe(cfg: RunConfig, batch: BatchSettings, digest: str) -> dict[str, Any]:
    output = batch.output if batch.output == "null" else str(Path(batch.output).resolve())
    return {"output": output, "suffix": batch.suffix, "scheduler": batch.scheduler or "local",
            "filters": cfg.filters, "device": cfg.device, "codec": cfg.codec, "options_hash": digest}


def _cancelled(r: FileResult, signum: int) -> None:
    r.status, r.exit_code, r.error = "cancelled", 128 + signum, "cancelled before it started"


class Collector:
    """Submits the jobs and gathers their results into the report, stopping the batch on request."""

    def __init__(self, client, report: BatchReport, stop: StopRequest, notify: OnResult):
        self.client, self.report, self.stop, self.notify = client, report, stop, notify
        self.done: queue.Queue = queue.Queue()
        self.pending: dict[str, tuple[Any, Job]] = {}  # submitted, not collected
        self.queued: list[Job] = []  # not submitted yet, the largest first
        self.offsets: dict[str, float] = {}

    def run(self, jobs: list[Job], own_cluster: bool = True) -> None:
        from .worker import PLUGIN, BatchPlugin

        self.client.register_plugin(BatchPlugin(ignore_sigint=own_cluster), name=PLUGIN)
        self.offsets, self.report.workers = survey(self.client)
        if not self.report.workers:  # a joined cluster's workers may be on their way: wait, but say so
            log.warning("the scheduler has no workers yet: the files wait for one to join (Ctrl-C stops "
                        "the batch)")
        sizes = {job.index: _size(job.input) for job in jobs}
        self.queued = sorted(jobs, key=lambda j: -sizes[j.index])
        stopping, looked = False, time.monotonic()
        self._refill()
        while self.pending or self.queued:
            if self.stop.event.is_set() and not stopping:
                stopping = True
                self._stop_batch(jobs[0].batch_id)
            try:
                future = self.done.get(timeout=0.1)  # short: the stop request is polled between
            except queue.Empty:
                if self.queued and time.monotonic() - looked > REFILL_S:  # workers that joined
                    looked = time.monotonic()
                    self._refill()
                continue
            entry = self.pending.pop(future.key, None)
            result = _outcome(future, entry[1]) if entry is not None else None
            received = time.time()
            # The next file before this one's key is released: the client's stream to the scheduler holds a
            # message sent within 10 ms of the one before (it batches them), a submission too.
            try:
                self._refill()
            finally:  # this file's result is recorded whatever the next submission met
                if entry is not None:
                    self._collect(future, entry[1], result, received)

    def _refill(self) -> None:
        """Submit queued files while the cluster has a thread without one (none once the batch stops)."""
        if self.stop.event.is_set() or not self.queued:
            return
        try:
            threads = sum(self.client.nthreads().values())
        except Exception:  # the scheduler unreachable: the files submitted fail and say so
            threads = 0
        while self.queued and len(self.pending) < threads:
            self._submit(self.queued.pop(0))

    def _submit(self, job: Job) -> None:
        from .worker import process_file

        future = self.client.submit(process_file, job, key=f"pipeline-batch-{job.batch_id}-{job.index}",
                                    pure=False)
        self.report.results[job.index].submitted = time.time() - self.report.started
        self.pending[future.key] = (future, job)
        future.add_done_callback(self.done.put)  # called on the client's event loop thread

    def _collect(self, future, job: Job, result: FileResult, received: float) -> None:
        start = self.report.started
        previous = self.report.results[job.index]
        future.release()
        if result.started is not None:
            offset = self._offset(result.address)
            result.started -= offset + start
            result.ended -= offset + start
        result.submitted, result.received = previous.submitted, received - start
        result.input = previous.input  # as given (the worker had it made absolute)
        self.report.results[job.index] = result
        self.notify(result)

    def _offset(self, address: str) -> float:
        if address not in self.offsets:  # a worker that joined the cluster after the batch started
            offsets, workers = survey(self.client)
            self.offsets.update(offsets)
            self.report.workers = workers
        return self.offsets.get(address, 0.0)

    def _stop_batch(self, batch_id: str) -> None:
        """Stop the batch's run on every worker first (from then on no file of it starts anywhere),
        then cancel what the scheduler has not handed to a worker yet. Files a worker holds come back
        by themselves: stopped mid-run, or cancelled as they were about to start."""
        from .worker import stop_batch

        signum = self.stop.signum or 2
        try:
            self.client.run(stop_batch, batch_id, signum)
            on_workers = {key for keys in self.client.processing().values() for key in keys}
        except Exception:  # a worker unreachable: whatever it runs is cut off with the cluster
            on_workers = set()
        queued = [(key, f, job) for key, (f, job) in self.pending.items() if key not in on_workers and not f.done()]
        self.client.cancel([f for _, f, _ in queued])
        for key, _, job in queued:
            del self.pending[key]
        for job in [job for _, _, job in queued] + self.queued:
            _cancelled(self.report.results[job.index], signum)
            self.notify(self.report.results[job.index])
        self.queued = []


def _outcome(future, job: Job) -> FileResult:
    """The file's result, fetched from its worker; a failed one where the worker died or lost contact."""
    try:
        return future.result()
    except Exception as e:  # the worker died during the file (a crash, killed), or lost contact
        died = type(e).__name__ == "KilledWorker"
        if died and job.output:  # its temporary file, which no process will finish or remove now
            _remove_dead_workers_partial(Path(job.output))
        why = ("its worker process died while processing it (a crash in its run, or killed)"
               if died else f"worker failed while processing it: "
               f"{type(e).__name__}: {e}")  # (Dask's own words on a dead worker run to a paragraph)
        return FileResult(job.index, job.input, job.output, status="failed", exit_code=EXIT_INTERNAL, error=why)


def _remove_dead_workers_partial(target: Path, wait_s: float = 2.0) -> None:
    """The scheduler reports a worker dead when its connection drops, which can come before the process
    has finished exiting: its temporary file counts as a running process's until then, so this waits for
    that, ``wait_s`` at most (as long as another live process's temporary file for ``target`` stays)."""
    deadline = time.monotonic() + wait_s
    while remove_stale_partials(target) and time.monotonic() < deadline:
        time.sleep(0.05)


def _size(path: str) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0
