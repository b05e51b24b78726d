"""``pipeline run IN1 IN2 ... -o DIR/`` (or ``-o null``, or ``[[streams]]`` in a config): many streams in
one process, sharing one GPU's memory (:mod:`pipeline.many`), with a summary row per stream."""

from __future__ import annotations

from typing import Any, Callable

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .checks import report_on_stdout
from .config import RunConfig
from .errors import ConfigError
from .log import one_line, printable
from .stdio import StdoutConsole, stdout_errors


def cmd_run_many(cfg: RunConfig, inputs: list[str] | None, stream_list: list[dict[str, Any]] | None,
                 err: Console, install_signal_handlers: Callable, process_ends: bool = False,
                 config: str | None = None) -> int:
    from .checks import check_reads_kept, check_streams_stats
    from .cli import read_files, write_stats, writes_stdout
    from .engine import RunControl
    from .many import configs_for, run_many

    if inputs and stream_list:
        raise ConfigError("give the inputs on the command line or as [[streams]] in the config, not both")
    if stream_list:
        inputs = [entry["input"] for entry in stream_list]
        per_stream = [{k: v for k, v in entry.items() if k != "input"} for entry in stream_list]
    else:
        per_stream = None
    configs = configs_for(cfg, inputs, cfg.output, per_stream, config)
    # The plugins are loaded here, once for every stream: a plugin's filters name the files they read. An
    # entry's own plugins and LUTs are kept from the statistics file and from every stream's output, as the
    # run's are.
    read = list(dict.fromkeys([*read_files(cfg, config), *(found for c in configs for found in read_files(c, None))]))
    check_reads_kept(read, [c.output for c in configs], **{"--stats-json file": cfg.stats_json})
    if cfg.stats_json:  # before any stream starts, as for one run
        check_streams_stats(cfg.stats_json, [(c.input, c.output) for c in configs], cfg.overwrite)
    control = RunControl()
    control.process_ends = process_ends  # see cli.main
    install_signal_handlers(control)
    result = run_many(configs, control=control)
    if cfg.stats_json:  # on a failed run a write error is a notice: the streams' own worst code says more
        write_stats(result, cfg.stats_json, err, failing=result.exit_code != 0, overwrite=cfg.overwrite)
    if not cfg.quiet:
        if any(writes_stdout(c) for c in configs) or report_on_stdout(cfg.stats_json):
            err.print(table(result))  # stdout carries a stream's video or the JSON: nothing else goes there
        else:
            with stdout_errors("; the streams' runs are complete"):
                StdoutConsole(highlight=False).print(table(result))
    return result.exit_code


def table(result) -> Table:
    totals = result.totals()
    t = Table(title=f"pipeline: {totals['streams']} streams, {totals['frames_out']} frames in "
                    f"{totals['wall_s']:.2f} s ({totals['fps']:.1f} fps in all)", title_justify="left")
    for name in ("input", "output", "frames", "fps", "dropped", "exit", "error"):
        t.add_column(name, justify="right" if name in ("frames", "fps", "dropped", "exit") else "left")
    for s in result.streams:
        st = s.stats
        # Text: no markup read in a name; control characters escaped (an ESC in a name would drive the terminal)
        t.add_row(Text(printable(s.input)), Text(printable(s.output)), str(st.get("frames_out", 0)),
                  f"{st.get('fps', 0.0):.1f}", str(st.get("drops", {}).get("total", 0)), str(s.exit_code),
                  Text(one_line(s.error)[:80]))
    shared = totals["shared"]
    t.caption = (f"shared memory: arena {shared.get('arena_bytes_reserved', 0) / 2**20:.0f} MiB reserved in "
                 f"{shared.get('arena_chunks', 0)} chunks ({shared.get('arena_device_allocs', 0)} device "
                 f"allocations), fragmentation {shared.get('arena_fragmentation', 0.0):.2f}; pinned "
                 f"{shared.get('pinned_bytes_reserved', 0) / 2**20:.0f} MiB")
    t.caption_justify = "left"
    return t

