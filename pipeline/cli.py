"""Command line: ``pipeline run | filters | presets | sample | bench | probe``. Builds a config and hands it to
the engine; the other commands are small and load what they need when they run. The parser, with every
option and help text, is :mod:`pipeline.cli_parser`."""

from __future__ import annotations

import argparse
import atexit
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from rich.console import Console

from .checks import as_pipeline_error, check_reads_kept, report_on_stdout
from .cli_parser import SAMPLES, add_run_arguments, build_parser, command_of
from .config import _TABLES, RunConfig, build_config, under_the_span_flags
from .config_file import STREAM_LIST, load_toml, preset_names
from .errors import (EXIT_INTERNAL, EXIT_SIGINT, EXIT_USAGE, ConfigError, GPUStalled, Interrupted, OutputError,
                     PipelineError, SignalEchoes, stop_signals)
from .ffmpeg_args import resolve_paths
from .log import LEVELS, one_line, printable
from .log import install as install_log, uninstall as uninstall_log
from .startup import PROCESS_STARTED, create_cuda_context_early
from .stdio import StdoutConsole, Unfailing, escape_unencodable, hold_closed_descriptors, say, silence, stdout_errors

# The commands, and the parser's names that `pipeline batch` and other callers import from here.
__all__ = ["SAMPLES", "add_run_arguments", "build_parser", "cmd_filters", "cmd_presets", "cmd_run", "cmd_warmup",
           "config_from_args", "entry", "main", "writes_stdout"]


def config_from_args(args: argparse.Namespace) -> RunConfig:
    file_values = load_toml(args.config) if args.config else {}
    args.stream_list = file_values.pop(STREAM_LIST, None)
    if args.stream_list and (getattr(args, "paths", None) or getattr(args, "input", None)):
        raise ConfigError("give the inputs on the command line or as [[streams]] in the config, not both")
    if args.stream_list:
        args.input, args.inputs, args.paths = args.stream_list[0]["input"], None, None  # [[streams]] in the config
    elif hasattr(args, "paths"):  # pipeline run (pipeline batch names its inputs itself)
        resolve_paths(args, configured_output=file_values.get("output"))
    flags = {k: v for k, v in vars(args).items()
             if k not in ("command", "config", "loglevel", "paths", "progress", "inputs", "stream_list", "stats")}
    for table in ("encoder_opts", "input_opts", "output_opts"):
        if flags.get(table):
            flags[table] = dict(flags[table])
    if flags.get("plugins"):
        flags["plugins"] = tuple(flags["plugins"])
    if args.stream_list:
        args.stream_list = [_under_the_flags(entry, file_values, flags) for entry in args.stream_list]
    # The file's values the command line left standing: a later check refusing one names the file.
    args.from_config = frozenset(k for k in file_values if flags.get(k) is None)
    try:
        return build_config(file_values, flags)
    except ConfigError as e:
        if args.config and _refuses(file_values):  # the file's own value: the line names the file
            raise ConfigError(f"{args.config}: {e}") from None
        raise


def _refuses(file_values: dict[str, Any]) -> bool:
    try:
        build_config(file_values, {})
    except ConfigError:
        return True
    return False


def _under_the_flags(entry: dict[str, Any], file_values: dict[str, Any], flags: dict[str, Any]) -> dict[str, Any]:
    """A [[streams]] entry's settings, as a config file's are: below the flags given on the command line
    (-n, --frames...), its option tables merged key by key over the file's top-level ones, the flags' over
    both. Its input and output are its own: an output given on the command line as well is refused (exit 2),
    since neither could be said to win (-o null would have written the entry's file, -y replacing it)."""
    if entry.get("output") is not None and flags.get("output") is not None:
        raise ConfigError(f"-o {flags['output']}: the [[streams]] entry of {entry['input']} names its own output "
                          f"({entry['output']}); drop -o, or that entry's output")
    kept = {}
    for key, value in under_the_span_flags(entry, flags).items():
        if key in _TABLES:
            kept[key] = {**file_values.get(key, {}), **value, **(flags.get(key) or {})}
        elif key in ("input", "output") or flags.get(key) is None:
            kept[key] = value
    return kept


def main(argv: list[str] | None = None, *, process_ends: bool = False) -> int:
    """The command line, run in this process; its exit code. ``process_ends``: the process ends right after
    (:func:`entry`), so what its exit frees anyway may be left to it."""
    GPUStalled.happened = False
    try:
        code = _main(sys.argv[1:] if argv is None else argv, process_ends)
    finally:
        if not process_ends:
            uninstall_log()
    if GPUStalled.happened:  # threads are stuck in CUDA calls: the interpreter's own exit would wait on them
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def entry() -> None:
    """The ``pipeline`` command (and ``python -m pipeline``): :func:`main`, then out of the process without the
    interpreter's tear-down once nothing is left to finish.

    By then the output is placed, the statistics and summary written and every part closed. What a normal
    exit would still do is collect every module and object, and let the CUDA driver's own exit handlers
    take the context apart (measured on the H200: see docs/benchmarks.md), none of which anyone waits for.
    The exit handlers registered with :mod:`atexit` still run (a plugin's too), and the standard streams
    are flushed. Where a thread that is not a daemon still runs (a library's, a plugin's), the process
    leaves the normal way, which waits for it."""
    escape_unencodable()  # the process's own streams: an application calling main() keeps its settings
    code = main(process_ends=True)
    if any(t is not threading.main_thread() and not t.daemon and t.is_alive() for t in threading.enumerate()):
        raise SystemExit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # gone (a reader left, a closed terminal): as Python's own exit ignores it
            pass
    os._exit(code)


def _main(argv: list[str], process_ends: bool = False) -> int:
    # Not steady_malloc(): a command runs once, and the naive strategy it compares against pays for each
    # frame's host buffer what an application's allocator would make it pay (see that function).
    hold_closed_descriptors()
    # A closed terminal must not end the run; a stderr closed from the start is rich's null file.
    err = Console(file=Unfailing(sys.stderr) if sys.stderr is not None else None, stderr=True, highlight=False,
                  emoji=False)  # names are shown as they are: no :smile: made an emoji
    debug = "--debug" in argv
    args = None
    install_log(lambda line: err.print(line, markup=False, soft_wrap=True), LEVELS["info"])
    try:
        args = _parse(argv)
        install_log(lambda line: err.print(line, markup=False, soft_wrap=True),
                    LEVELS[getattr(args, "loglevel", None) or "info"])
        return _dispatch(args, err, process_ends)
    except PipelineError as e:
        if debug:
            traceback.print_exc()
        label = "" if isinstance(e, Interrupted) else "error: "  # a stop on request is no error
        err.print(f"pipeline: {label}{_one_line(e)}", markup=False, soft_wrap=True)
        return e.exit_code
    except KeyboardInterrupt:  # before the handlers are installed: nothing was written yet
        err.print("pipeline: interrupted", markup=False)
        return EXIT_SIGINT
    except Exception as e:  # a bug: still one line, the traceback only with --debug
        if debug:
            traceback.print_exc()
        if _raised_while_interrupted(e):  # code cleaning up after the Ctrl-C failed in turn: the Ctrl-C
            err.print("pipeline: interrupted", markup=False)
            return EXIT_SIGINT
        mapped = as_pipeline_error(e)  # a CUDA failure wherever it surfaced is still exit 5, not a bug
        if isinstance(mapped, PipelineError):
            err.print(f"pipeline: error: {_one_line(mapped)}", markup=False, soft_wrap=True)
            return mapped.exit_code
        where = f" while processing {args.input}" if getattr(args, "input", None) else ""
        err.print(f"pipeline: internal error{where}: {type(e).__name__}: {_one_line(e)} (--debug shows the "
                  "traceback)", markup=False, soft_wrap=True)
        return EXIT_INTERNAL


def _raised_while_interrupted(error: BaseException) -> bool:
    """Whether ``error`` was raised while a KeyboardInterrupt was being handled: a Ctrl-C before the handlers
    are installed, inside code whose clean-up then fails (argparse's intermixed parsing restores attributes
    it had not yet saved: AttributeError 'save_nargs')."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, KeyboardInterrupt):
            return True
        error = error.__context__
    return False


def _parse(argv: list[str]):
    """The arguments; ``--help`` printed to a stdout that cannot take it (``> /dev/full``, a reader gone) is a
    write error, exit 4, as for any command's output, not a silent success."""
    try:
        return build_parser(command_of(argv)).parse_args(argv)
    except OSError as e:  # the parser writes only help and the version to stdout, and flushes them
        silence(sys.stdout)
        raise OutputError(f"stdout: write failed: {e.strerror or e}") from None


def _one_line(error: BaseException) -> str:
    """The message on one line: a library's text may hold newlines (FFmpeg's "Valid sizes are ..."), a
    file name control characters."""
    return one_line(str(error))


def _dispatch(args: argparse.Namespace, err: Console, process_ends: bool = False) -> int:
    if args.command == "run":
        cfg = config_from_args(args)
        try:
            return _run_command(args, cfg, err, process_ends)
        except ConfigError as e:
            if e.setting in args.from_config:  # a value checked once the run is built: say where it came from
                raise ConfigError(f"{args.config}: {e}") from None
            raise
    if args.command == "bench":
        from .bench import bench

        return bench.main(args)
    if args.command == "probe":
        from .bench import probe

        return probe.main(args)
    if args.command == "filters":
        return cmd_filters(args)
    if args.command == "warmup":
        return cmd_warmup(args)
    if args.command == "presets":
        return cmd_presets()
    if args.command == "sample":
        from .sample_cli import run  # PyAV and OpenCV: only for this command

        return run(args)
    if args.command == "batch":
        from .batch import cli as batch_cli

        return batch_cli.main(args, err)
    return EXIT_USAGE


def cmd_run(cfg: RunConfig, err: Console, progress: str | None = None, config: str | None = None,
            process_ends: bool = False, bar: bool = True) -> int:
    from .engine import Pipeline, RunControl
    from .progress import check_progress, progress_for, progress_report

    control = RunControl()
    control.process_ends = process_ends
    _install_signal_handlers(control)
    control.interruptible = True  # until the output is about to be created (build_parts)
    try:
        read = read_files(cfg, config)  # loads the plugins: a slow one is stopped by one signal
        check_reads_kept(read, [_output_of(cfg)], **{"--stats-json file": cfg.stats_json})
        if progress:
            check_progress(progress, writes_stdout(cfg), cfg.input, _output_of(cfg), cfg.stats_json, read)
        pipeline = Pipeline.from_config(cfg, control=control)
    finally:
        control.interruptible = False
    report = _open_report(progress, pipeline, control) if progress else None
    if PROCESS_STARTED is not None:  # the interpreter and the imports before set-up began
        pipeline.phases.add("imports", (pipeline.phases.t0 - PROCESS_STARTED) * 1e3)
        pipeline.stats.origin = PROCESS_STARTED
    try:
        with progress_for(pipeline, err, enabled=bar and not cfg.quiet and err.is_terminal), \
                progress_report(pipeline, report):
            stats = pipeline.run()
    finally:
        # Also when the run ends early with its output kept (a stalled live source, a signal): the
        # statistics of the frames done are what one looks at next.
        if cfg.stats_json and pipeline.stats.frames_out:
            write_stats(pipeline.stats, cfg.stats_json, err, failing=sys.exc_info()[0] is not None,
                        overwrite=cfg.overwrite)
    if cfg.quiet:
        return 0
    if writes_stdout(cfg) or report_on_stdout(cfg.stats_json):  # stdout carries the video or the JSON alone
        _print_summary(err, stats, cfg)
    else:
        with stdout_errors("; the run itself is complete"):
            _print_summary(StdoutConsole(highlight=False), stats, cfg)
    return 0


def _print_summary(out: Console, stats, cfg: RunConfig) -> None:
    out.print(stats.table())
    if stats.mode != "file" or cfg.latency_budget is not None:
        out.print(stats.hops_table())
    out.print(stats.memory_table())
    out.print(f"wrote {printable(str(stats.output))}" if stats.output != "null" else f"processed {stats.frames_out} frames "
              "(null output: nothing written)", markup=False, soft_wrap=True)


def _output_of(cfg: RunConfig):
    """The output path or URL the run will write, None for a null output."""
    from .build import is_null_output

    return None if is_null_output(cfg) else cfg.output_target()


def _open_report(url: str, pipeline, control):
    """The -progress report, opened (a file truncated) only once the run's checks have passed and its
    parts are built. A FIFO's open waits for a reader: a signal meanwhile ends the run at once, as one
    during set-up does, and the output is dropped."""
    from .progress import ProgressReport

    control.interruptible = True
    try:
        return ProgressReport.open(url)
    except BaseException:
        pipeline.close()
        raise
    finally:
        control.interruptible = False


def writes_stdout(cfg: RunConfig) -> bool:
    """``-o -`` (or ``pipe:1``): the video goes to stdout, so the summary goes to stderr."""
    from .build import is_null_output
    from .config import pipe_fd

    return not is_null_output(cfg) and pipe_fd(cfg.output, 1) == 1


def write_stats(stats, path: str, err: Console, failing: bool, overwrite: bool = False) -> None:
    """Write --stats-json (``stats.write_json``: one run's, or many streams'); on a run already failing, a
    write error is a notice, never a new exit code. Without -y a file that appeared during the run is kept:
    the check before the run saw none."""
    from .reportfile import save_json

    try:
        save_json(stats, path, "--stats-json", overwrite, "run")
    except PipelineError as e:
        if not failing:
            raise
        err.print(f"pipeline: warning: {e}", markup=False, soft_wrap=True)


def _run_command(args: argparse.Namespace, cfg: RunConfig, err: Console, process_ends: bool) -> int:
    create_cuda_context_early(cfg.device)  # while the pipeline's modules import
    if args.inputs or args.stream_list:
        from .many_cli import cmd_run_many

        if args.progress:  # it would be left unwritten, the reader waiting on nothing
            raise ConfigError(f"-progress {args.progress}: reports one run; several streams run here "
                              "(--stats-json has each stream's figures)")

        return cmd_run_many(cfg, args.inputs, args.stream_list, err, _install_signal_handlers, process_ends,
                            config=args.config)
    from .many import into_directory

    return cmd_run(into_directory(cfg), err, progress=args.progress, config=args.config, process_ends=process_ends,
                   bar=args.stats is not False)


def read_files(cfg: RunConfig, config: str | None) -> list[tuple[Path, str]]:
    """Files the run reads besides its input, which a report must never truncate: the config file, the
    plugins, the filters' files (a LUT, a plugin's filter's file: the plugins are loaded here)."""
    from .config_file import find_config
    from .filters.plugins import load_plugin
    from .filters.registry import chain_files

    for plugin in cfg.plugins:  # loaded once: the run reuses them
        load_plugin(plugin)
    files = [(find_config(config), "the --config file")] if config else []
    files += [(Path(p), "a --plugin file") for p in cfg.plugins]
    files += [(p, "a file the filter chain reads") for p in chain_files(cfg.filters)]
    return files


def _install_signal_handlers(control: Any) -> None:
    """First SIGINT/SIGTERM/SIGHUP: drain and finalise (exit 130/143/129). A second one: exit at once.

    SIGHUP (the terminal closed, or a service manager's stop) ends the run as SIGTERM does, keeping a
    playable output. SIGINT or SIGHUP ignored when the run starts (``cmd &`` in a script, ``nohup``) stays
    ignored (:func:`~pipeline.errors.stop_signals`). SIGQUIT
    keeps its meaning, an immediate stop with a core dump, after dropping the temporary file.

    During set-up, before the output exists, the first one ends the run at once (Interrupted raised
    where the main thread is: nothing to drain, nothing written). Later it only sets an event (the
    engine raises Interrupted once the output is final). The second
    must not wait for anything (the user is escaping a stuck run): drop the temporary file, leave the
    target as it was, and leave the process without unwinding (os._exit), since unwinding would run
    the engine's clean-up, which waits on the worker threads. Except while an image sequence's frames
    are being moved into place (renames, not a single one): stopping then would leave new frames beside
    old ones, so the run finishes placing them and exits as after the first signal; a third signal
    exits at once.
    """

    placing = []  # signals that came while frames were being placed
    echoes = SignalEchoes()

    def handler(signum, frame):
        if echoes.echo(signum):  # the same signal delivered twice (timeout's): one stop
            return
        name = signal.Signals(signum).name
        if control.stop_event.is_set():
            if placing:  # the third: the frames not placed yet are dropped, those placed stay
                control.discard_output(force=True)
                say(f"pipeline: {name} again: exiting now, some frames placed, the others dropped\n")
                os._exit(128 + signum)
            if control.discard_output():
                say(f"pipeline: {name} again: exiting now, no output\n")
                os._exit(128 + signum)
            placing.append(signum)
            say(f"pipeline: {name} again: the frames are being moved into place; exiting once they are "
                 "(again to exit at once)\n")
            return
        control.stop(signum)
        if control.interruptible and not _in_import_machinery(frame):
            control.interruptible = False
            raise Interrupted(signum, "no output written")

    def quit_now(signum, frame):
        partial = control.placing()
        control.discard_output(force=True)
        say(f"pipeline: SIGQUIT: exiting now, {'some frames placed, the others dropped' if partial else 'no output'}\n")
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)  # the default action: the exit status (and core) say SIGQUIT

    for sig in stop_signals():
        signal.signal(sig, handler)
    if signal.getsignal(signal.SIGQUIT) is not signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, quit_now)


def _in_import_machinery(frame) -> bool:
    """Whether the main thread is inside importlib's own code, where an exception may come between its
    lock's acquire and the ``try`` that releases it: raised there, the lock stays taken and the set-up
    thread's next import waits forever (and the run with it). The stop then waits for the set-up's next
    check (:meth:`~pipeline.control.RunControl.before_output`); a second signal still exits at once."""
    return frame is not None and frame.f_code.co_filename.startswith("<frozen importlib")


def cmd_warmup(args: argparse.Namespace) -> int:
    from .config import DEFAULT_FILTERS
    from .errors import GPUError
    from .gpu.cuda import gpu_status
    from .filters import parse_chain
    from .warmup import warm

    for chain in args.chains or ():  # a usage error (exit 2) before the GPU is looked for, as in run and bench
        parse_chain(chain)
    ok, reason = gpu_status()
    if not ok:
        raise GPUError(f"pipeline warmup compiles CUDA kernels: {reason}")
    done = warm((DEFAULT_FILTERS, *(args.chains or ())))
    with stdout_errors():
        print(f"compiled or loaded {done['kernels']} kernels in {done['seconds']} s; cached in {done['cache']}")
    return 0


def cmd_presets() -> int:
    from rich.table import Table

    from .config_file import PRESETS_DIR, preset_summary

    table = Table(title="presets (pipeline run IN --config NAME)", title_justify="left",
                  caption=f"files: {PRESETS_DIR}/NAME.toml (a starting point for your own)", caption_justify="left")
    table.add_column("name")
    table.add_column("what it does")
    table.add_column("filters", overflow="fold")
    for name in preset_names():
        chain = load_toml(name).get("filters", "(the default chain)")
        table.add_row(name, preset_summary(name), chain.replace(str(PRESETS_DIR) + os.sep, ""))
    with stdout_errors():
        StdoutConsole().print(table)
    return 0


def cmd_filters(args: argparse.Namespace) -> int:
    from rich.table import Table

    from .filters import FILTERS, describe_filter, load_plugin, parse_chain

    for plugin in args.plugins or ():
        load_plugin(plugin)
    parse_chain("")  # registers the built-ins
    names = [args.name] if args.name else sorted(FILTERS)
    if args.name and args.name not in FILTERS:
        raise ConfigError(f"unknown filter {args.name!r}; known: {', '.join(sorted(FILTERS))}")
    if args.json:
        import json

        text = json.dumps({"filters": [describe_filter(FILTERS[name]) for name in names]}, indent=2)
        with stdout_errors():
            print(text)
        return 0
    table = Table(title="filters", title_justify="left")
    table.add_column("filter")
    table.add_column("what it does")
    table.add_column("parameters (type, default, range)")
    for name in names:
        cls = FILTERS[name]
        table.add_row(name, cls.help, "\n".join(p.describe() + (f": {p.help}" if p.help else "") for p in cls.params))
    with stdout_errors():
        StdoutConsole().print(table)
    return 0
