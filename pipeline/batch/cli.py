"""``pipeline batch``: many files on a Dask cluster, with the run options of ``pipeline run``."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
from pathlib import Path
from typing import Iterator

from rich.console import Console

from ..checks import check_reads_kept, check_report_path, real_path, report_on_stdout
from ..errors import ConfigError, Interrupted, OutputError, PipelineError, SignalEchoes, stop_signals
from ..ffmpeg_args import file_name
from ..log import one_line
from ..numbers import integer
from ..reportfile import save_json
from ..stdio import StdoutConsole, say, stdout_errors
from .inputs import check_lists_kept, expand_inputs
from .jobs import FileResult
from .report import BatchReport, summary_line, table
from .runner import BatchSettings, StopRequest, execute, planned_outputs

NOTES = """Process many files, each as `pipeline run` would, on a Dask cluster: by default one worker
process per GPU on this machine (each pinned with CUDA_VISIBLE_DEVICES), or CPU workers where no GPU is
visible; --scheduler joins a cluster of several machines (docs/batch.md). Workers stay up between
files, so the CUDA context and the compiled kernels are made once per worker.

  Inputs: files, globs (quote them: 'clips/**/*.mp4') and @LIST (a text file or a pipe, at most
    16 MiB, one path or glob per line; blank lines and # comments skipped).
  Outputs: DIR/<stem><suffix><ext>, or -o null. One batch at a time writes into a DIR.
  Resume: a complete output (its marker DIR/.<name>.done.json matches the input's size and time and
    these options) is skipped; an output that exists but is not complete needs -y to be replaced.
  A file that fails fails alone: its error is in the table, the others go on. The exit code is the
    largest of the files' codes (below).
  Ctrl-C (SIGTERM, SIGHUP alike): files in progress are stopped, writing nothing (a file already at
    their output's name stays as it was), queued ones cancelled, finished ones kept; exit 130 (143,
    129): for a batch, that is what those codes below mean. A second one exits at once (temporary
    files are removed by the next run)."""

_BATCH_DESTS = ("inputs", "output_dir", "suffix", "gpus", "workers", "scheduler", "dashboard", "results_json")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..cli import add_run_arguments
    from ..config import RunConfig

    p.add_argument("inputs", nargs="+", metavar="INPUT", type=file_name,
                   help="input files, globs, or @LIST (a text file listing inputs, one per line)")
    p.add_argument("-o", "--output", dest="output_dir", default=".", metavar="DIR", type=file_name,
                   help="output directory, created if needed; 'null' processes and discards (default: .)")
    p.add_argument("--suffix", default="_processed",
                   help="outputs are DIR/<stem><suffix><ext> (default: _processed); no path separator")
    p.add_argument("--json", dest="results_json", metavar="PATH", type=file_name,
                   help="write per-file results and totals as JSON (docs/batch.md has the schema); an existing "
                        "file is replaced only with -y, an input or an output never")
    g = p.add_argument_group("cluster")
    g.add_argument("--gpus", metavar="all|IDS",
                   help="one worker per GPU: 'all' (default when a GPU is visible) or ids as nvidia-smi "
                        "shows them, e.g. 0,1 (an id twice: two workers on that GPU; in all at most one "
                        "worker per core, or one per GPU)")
    g.add_argument("--workers", type=integer, metavar="N",
                   help="N CPU workers instead (default without a GPU: half the cores; at most one per core, and "
                        "never more than the files to run)")
    g.add_argument("--scheduler", metavar="ADDRESS",
                   help="join an existing Dask cluster (tcp://host:8786) instead of starting one here; exit 2 "
                        "when no Dask scheduler answers there within 20 s")
    g.add_argument("--dashboard", metavar="ADDRESS", nargs="?", const=":8787",
                   help="serve the local scheduler's dashboard (default address :8787; needs bokeh)")
    add_run_arguments(p, RunConfig(), single=False)


def main(args: argparse.Namespace, err: Console) -> int:
    from ..cli import config_from_args, read_files
    from .cluster import start_thread_pools_deaf

    start_thread_pools_deaf()  # before anything imports NumPy: a Ctrl-C while the workers start is kept
    _stop_set_up_at_once()
    run_args = argparse.Namespace(**{k: v for k, v in vars(args).items() if k not in _BATCH_DESTS})
    cfg = config_from_args(run_args)
    if cfg.output is not None:  # only a config file sets it here: it would be ignored without a word
        raise ConfigError(f"{args.config}: output = {cfg.output}: a batch writes DIR/<stem><suffix><ext> (-o DIR); "
                          "remove it from the config")
    if run_args.stream_list:  # a many-stream run's inputs: the batch's are its own arguments
        raise ConfigError(f"{args.config}: [[streams]] are for `pipeline run --config`; a batch takes its inputs "
                          "as arguments or @LIST files")
    batch = BatchSettings(output=args.output_dir, suffix=args.suffix, gpus=args.gpus, workers=args.workers,
                          scheduler=args.scheduler, dashboard=args.dashboard, muxer=cfg.output_format)
    lists: list[Path] = []
    sources = expand_inputs(args.inputs, lists)
    outputs = planned_outputs(sources, batch)
    check_lists_kept(lists, outputs)
    read = read_files(cfg, args.config)  # the plugins loaded here too (the workers load their own): their
    # filters name the files they read, which --json must not replace
    check_reads_kept(read, outputs, **{"--json file": args.results_json})
    if args.results_json:
        out_dir = None if batch.output == "null" else Path(batch.output)
        if out_dir is not None and real_path(Path(args.results_json)) == real_path(out_dir):  # made by the batch
            raise ConfigError(f"{args.results_json}: --json is the output directory; choose a file")
        check_report_path(args.results_json, "--json", _users_files(lists, sources, batch), cfg.overwrite,
                          made_by_run=out_dir)
    stop = StopRequest()
    _install_signal_handlers(stop)
    with progress(err, len(sources), enabled=args.stats is not False and not cfg.quiet and err.is_terminal) \
            as on_result:
        report = execute(sources, cfg, batch, on_result=on_result, stop=stop)
    if cfg.quiet:
        shown = _say_failures(report, err)
    else:  # beside --json /dev/stdout, the table goes to stderr: stdout holds the JSON alone
        shown = _show(report, err if report_on_stdout(args.results_json) else None)
    if args.results_json:
        _write_results(report, args.results_json, err, cfg.overwrite)
    if report.signum is not None:
        err.print(f"pipeline: interrupted by {signal.Signals(report.signum).name}; {_stopped(report)}",
                  markup=False, soft_wrap=True)
    if shown is not None:  # stdout could not take the table: an output error, unless the batch has a worse one
        if report.exit_code == 0:
            raise shown
        err.print(f"pipeline: warning: {shown}", markup=False, soft_wrap=True)
    return report.exit_code


def _show(report: BatchReport, out=None) -> OutputError | None:
    """The results table and summary on stdout (or ``out``); the error if stdout cannot take them (the JSON,
    written after, still has them)."""
    try:
        with stdout_errors("; the batch itself is complete" if report.signum is None else ""):
            out = out if out is not None else StdoutConsole(highlight=False)
            out.print(table(report))
            out.print(summary_line(report), soft_wrap=True)
    except OutputError as e:
        return e
    return None


def _say_failures(report: BatchReport, err: Console) -> None:
    """With -q there is no table: each file that failed still says why, one line on stderr."""
    for r in report.results:
        if r.status == "failed":  # the error names its file, as `pipeline run` says it; else it is named here
            line = r.error if Path(r.input).name in r.error else f"{r.input}: {r.error}"
            err.print(f"pipeline: error: {one_line(line)} (exit {r.exit_code})", markup=False, soft_wrap=True)


def _stopped(report: BatchReport) -> str:
    c = report.counts()
    return (f"complete and kept: {c['done'] + c['skipped']}, stopped mid-run (nothing written): "
            f"{c['interrupted']}, not started: {c['cancelled']}")


def _users_files(lists: list[Path], sources: list[Path], batch: BatchSettings) -> list[tuple[Path, str]]:
    """What --json must never replace: the @lists read (those named in a list too), the inputs, the outputs
    and their completion markers (the next batch would take a replaced one for an output left incomplete)."""
    from .resume import marker_path

    files = [(lst, "an input list") for lst in lists]
    files += [(source, "an input") for source in sources]
    outputs = [out for out in planned_outputs(sources, batch) if out is not None]
    return files + [(out, "an output") for out in outputs] + [(marker_path(out), "an output's marker")
                                                              for out in outputs]


def _write_results(report: BatchReport, path: str, err: Console, overwrite: bool) -> None:
    """Write --json. Without -y a file that appeared during the batch is kept (the check before saw none).
    On a batch that failed or was stopped, a write error is a warning: the batch's exit code stands."""
    try:
        save_json(report, path, "--json", overwrite, "batch")
    except PipelineError as e:
        if report.exit_code == 0:
            raise
        err.print(f"pipeline: warning: {e}", markup=False, soft_wrap=True)


def _stop_set_up_at_once() -> None:
    """Until the batch starts, a stop signal ends it at once with one line and its exit code: nothing has
    started, nothing is written. Reading a FIFO @LIST whose writer never comes is the wait this ends (the
    handler's exception breaks the blocked read). Later signals, an echo of the first among them, are
    ignored while it unwinds."""
    raised = []

    def handler(signum, frame):
        if not raised:
            raised.append(signum)
            raise Interrupted(signum, "nothing started")

    for sig in stop_signals():
        signal.signal(sig, handler)


def _install_signal_handlers(stop: StopRequest) -> None:
    """First SIGINT/SIGTERM/SIGHUP: stop the batch (exit 130/143/129). A second one: exit at once, without
    unwinding (that would wait for the workers); the workers of a local cluster exit with this process.
    SIGINT or SIGHUP ignored when the batch starts (``cmd &`` in a script, ``nohup``) stays ignored."""

    echoes = SignalEchoes()

    def handler(signum, frame):
        if echoes.echo(signum):  # the same signal delivered twice (timeout's): one stop
            return
        if stop.event.is_set():
            say(f"pipeline: {signal.Signals(signum).name} again: exiting now\n")
            os._exit(128 + signum)
        stop(signum)
        say("pipeline: stopping: files in progress are stopped, queued ones cancelled (again to exit at once)\n")

    for sig in stop_signals():
        signal.signal(sig, handler)


@contextlib.contextmanager
def progress(console: Console, total: int, enabled: bool) -> Iterator:
    """A bar over files on a terminal; yields the callback that advances it (a no-op when disabled)."""
    if not enabled:
        yield lambda result: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    columns = (TextColumn("[bold]batch"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[counts]}"), TimeElapsedColumn(), TimeRemainingColumn())
    from .cluster import threads_started_deaf

    seen: dict[str, int] = {}
    bar = Progress(*columns, console=console, transient=True)
    task = bar.add_task("batch", total=total, counts="")

    def on_result(result: FileResult) -> None:
        seen[result.status] = seen.get(result.status, 0) + 1
        counts = ", ".join(f"{n} {status}" for status, n in seen.items())
        bar.update(task, advance=1, counts=counts)

    with threads_started_deaf():  # its refresh thread, running while the workers start
        bar.start()
    try:
        yield on_result
    finally:
        bar.stop()
