"""``pipeline bench``: the allocation strategies side by side on one input, with the ceilings beside them.

Two scopes: ``e2e`` runs the whole pipeline exactly as ``pipeline run`` does; ``gpu`` decodes once into
host memory and measures only what memory management touches (copies into host slots, upload,
kernels, download). Every figure is the median of R repeats after a warm-up, measured in this run.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from ..config import DEFAULT_FILTERS, RunConfig, is_pipe_name
from ..memory.registry import STRATEGIES
from ..checks import check_report_path, report_on_stdout, special_kind
from ..errors import ConfigError, GPUError, InputError
from ..ffmpeg_args import add_overwrite_arguments, file_name
from ..numbers import integer
from ..filters import fuse_pointwise, parse_chain
from ..reportfile import save_report

SCOPES = ("gpu", "e2e", "run")
HEAVY_CHAIN = "gblur=sigma=2,unsharp=sigma=1:amount=1.2,eq=contrast=1.2:saturation=1.2"
DEFAULT_ENCODER_OPTS = {"preset": "ultrafast"}


def _csv(allowed: tuple[str, ...]):
    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(allowed)} (got {text!r})")
        return items

    return parse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", type=file_name,
                   help="input video file ('pipeline sample 1080p' writes one: samples/bench_1080p.mp4)")
    p.add_argument("--strategies", type=_csv(tuple(STRATEGIES)), default=list(STRATEGIES),
                   help=f"comma-separated strategies (default: {','.join(STRATEGIES)})")
    p.add_argument("--scope", type=_csv(SCOPES), default=list(SCOPES),
                   help="gpu (memory path only), e2e (decode to encode, in this process), run (`pipeline run` "
                        "as a user runs it: one process per run, pooled against naive, -o null and a file) "
                        "(default: gpu,e2e,run)")
    p.add_argument("--decode", dest="decoders", type=_csv(("cpu", "nvdec")), default=["cpu", "nvdec"],
                   help="decoders for the e2e and run scopes (default: cpu,nvdec)")
    p.add_argument("--repeats", type=integer, default=3, help="measured repeats per strategy; the median is reported (default: 3)")
    p.add_argument("--frames", type=integer, default=300, help="frames per measured run (default: 300)")
    p.add_argument("--warmup", type=integer, default=30, help="frames run first and not measured, at least 1 (default: 30)")
    p.add_argument("--filters", default=DEFAULT_FILTERS, help=f"filter chain (default: {DEFAULT_FILTERS!r})")
    p.add_argument("--peer-filters", default=HEAVY_CHAIN,
                   help=f"heavier chain run by the pipeline and by FFmpeg's CPU filters (default: {HEAVY_CHAIN!r})")
    p.add_argument("--no-peers", dest="peers", action="store_false",
                   help="skip the ceilings (decode, encode, transcode) and the FFmpeg CPU peer")
    p.add_argument("-c", "--codec", default="libx264", help="encoder for e2e and the peers (default: libx264)")
    p.add_argument("--encoder-opt", action="append", default=None, metavar="KEY=VALUE",
                   help="encoder option, repeatable (default: preset=ultrafast for libx264)")
    p.add_argument("--streams", type=integer, default=RunConfig.streams, help="CUDA streams (default: %(default)s)")
    p.add_argument("--in-flight", type=integer, default=RunConfig.in_flight, help="frames in flight (default: %(default)s)")
    p.add_argument("--ring-size", type=integer, default=RunConfig.ring_size, help="host slots each way (default: %(default)s)")
    p.add_argument("--copy-threads", type=integer, default=4, help="threads copying frames into host slots, gpu scope (default: 4)")
    p.add_argument("--json", type=file_name, help="write the results as JSON (default: <input stem>_bench.json)")
    p.add_argument("--chart", type=file_name,
                   help="write a PNG chart (default: <input stem>_bench.png; needs matplotlib)")
    p.add_argument("--no-chart", dest="chart_enabled", action="store_false", help="do not draw the chart")
    add_overwrite_arguments(p)
    p.add_argument("-q", "--quiet", action="store_true", help="print only the file names written")
    p.add_argument("--debug", action="store_true", help="show tracebacks")


def _encoder_opts(args) -> dict[str, str]:
    if not args.encoder_opt:
        return dict(DEFAULT_ENCODER_OPTS) if args.codec == "libx264" else {}
    opts = {}
    for text in args.encoder_opt:
        key, eq, value = text.partition("=")
        if not eq or not key:
            raise ConfigError(f"--encoder-opt: expected KEY=VALUE, got {text!r}")
        opts[key] = value
    return opts


def _device_info() -> dict[str, Any]:
    from ..gpu.cuda import cupy
    from ..gpu.probe import device_info

    return device_info(cupy())


def main(args: argparse.Namespace) -> int:
    from ..gpu.cuda import gpu_status

    _check_input(args.input)
    for name in ("repeats", "frames", "warmup", "copy_threads"):  # a warm-up also compiles the kernels
        if getattr(args, name) < 1:
            raise ConfigError(f"Invalid --{name.replace('_', '-')} ({getattr(args, name)}). Supported values are >= 1.")
    _settings(args)  # the run's settings, checked before any work
    parse_chain(args.filters)  # and the chains': a usage error says so, with or without a GPU
    parse_chain(args.peer_filters)
    reports = _check_reports(args)
    ok, reason = gpu_status()
    if not ok:
        raise GPUError(f"pipeline bench needs a CUDA GPU: {reason}")
    # An input named :smile: stays its name; beside --json /dev/stdout, the tables go to stderr
    console = Console(highlight=False, emoji=False, stderr=report_on_stdout(reports["--json"]))
    result = run_bench(args, console)
    from .report import render, write_chart, write_json

    exclusive = not args.overwrite
    save_report(reports["--json"], "--json", lambda path: write_json(result, path, exclusive), "bench")
    written = [str(reports["--json"])]
    if "--chart" in reports:
        chart = save_report(reports["--chart"], "--chart", lambda path: write_chart(result, path, console, exclusive),
                            "bench")
        written += [str(chart)] if chart else []
    if not args.quiet:
        render(result, console)
    console.print("wrote " + ", ".join(written), markup=False)
    return 0


def _check_input(path: str) -> None:
    """The bench reads its input once per strategy, decoder and peer: only a regular file will do (a FIFO
    would block the first reader and be empty for the next)."""
    from ..opening import check_local

    if is_pipe_name(path):
        raise InputError(f"{path}: a pipe; pipeline bench reads its input several times and needs a regular file")
    check_local(path)
    kind = special_kind(path)
    if kind is not None:
        raise InputError(f"{path}: a {kind}; pipeline bench reads its input several times and needs a regular file")


def _check_reports(args: argparse.Namespace) -> dict[str, Path]:
    """The report files, checked before the run as `pipeline run` checks --stats-json: never the input or each
    other, an existing file replaced only with -y."""
    stem = Path(args.input).stem
    reports = {"--json": Path(args.json or f"{stem}_bench.json")}
    if args.chart_enabled:
        reports["--chart"] = Path(args.chart or f"{stem}_bench.png")
    for option, path in reports.items():
        theirs = [(Path(args.input), "the input")]
        theirs += [(other, f"the {name} file") for name, other in reports.items() if name != option]
        check_report_path(str(path), option, theirs, bool(args.overwrite))
    return reports


def _settings(args: argparse.Namespace) -> RunConfig:
    return RunConfig(input=args.input, filters=args.filters, device="cuda", codec=args.codec,
                     encoder_opts=_encoder_opts(args), streams=args.streams, in_flight=args.in_flight,
                     ring_size=args.ring_size, quiet=True, overwrite=True)


def run_bench(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    cfg = _settings(args)
    chain = fuse_pointwise(parse_chain(args.filters))  # as `pipeline run` does
    result: dict[str, Any] = {
        "input": args.input,
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "filters": args.filters,
        "encoder": {"codec": cfg.codec, "options": cfg.encoder_opts},
        "repeats": args.repeats,
        "frames": args.frames,
        "warmup": args.warmup,
        "device": _device_info(),
        "scopes": {},
    }
    say = (lambda m: None) if args.quiet else (lambda m: console.print(Text(m, style="dim")))
    if "gpu" in args.scope:
        result["scopes"]["gpu"] = _gpu_scope(args, cfg, chain, result, say)
    if "e2e" in args.scope:
        result["scopes"]["e2e"] = _e2e_scope(args, cfg, say)
        if args.peers:
            from .ceilings import measure_peers

            result["peers"] = measure_peers(args, cfg, say)
    _relative_to_pooled(result)
    if "run" in args.scope:
        from .run_scope import measure

        result["run"] = measure(args, say)
    return result


def _gpu_scope(args, cfg: RunConfig, chain, result: dict, say) -> list[dict]:
    from .gpu_scope import GpuScope, decode_to_host
    from .probe import bandwidth_for_size

    fmt, frames = decode_to_host(args.input, min(args.frames, 120))
    result["size"] = [fmt.width, fmt.height]
    result["bandwidth"] = bandwidth_for_size(f"{fmt.width}x{fmt.height} I420 frame", fmt.nbytes)
    rows = []
    for strategy in args.strategies:
        say(f"gpu scope: {strategy}")
        scope = GpuScope(fmt, frames, chain, strategy, cfg, args.copy_threads)
        try:
            scope.run(args.warmup)
            runs = [scope.run(args.frames) for _ in range(args.repeats)]
        finally:
            scope.close()
        latency = [ms for r in runs for ms in r.latency_ms]
        fps = statistics.median(r.fps for r in runs)
        rows.append(_row(strategy, [r.fps for r in runs], latency, statistics.median(r.allocs_per_frame for r in runs),
                         fps * fmt.nbytes / 1e9) | memory_figures(runs[-1].memory_after))
    return rows


def _e2e_scope(args, cfg: RunConfig, say) -> list[dict]:
    from ..engine import Pipeline

    rows = []
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp:
        out = str(Path(tmp) / f"out{Path(args.input).suffix or '.mp4'}")
        for decode in args.decoders:
            for strategy in args.strategies:
                say(f"e2e scope: --decode {decode} {strategy}")
                run_cfg = cfg.replace(alloc=strategy, output=out, frames=args.frames, decode=decode)
                Pipeline.from_config(run_cfg.replace(frames=args.warmup)).run()
                runs = [Pipeline.from_config(run_cfg).run() for _ in range(args.repeats)]
                fps = [r.steady_fps() for r in runs]
                latency = [ms for r in runs for ms in r.latency_ms[8:]]
                allocs = statistics.median(r.steady_allocs_per_frame() or 0.0 for r in runs)
                in_bytes = runs[0].width * runs[0].height * 3 // 2 if decode == "cpu" else 0
                label = strategy if decode == "cpu" else f"{strategy}, nvdec"
                row = _row(label, fps, latency, allocs, statistics.median(fps) * in_bytes / 1e9)
                row |= memory_figures(runs[-1].to_dict(per_frame=False)["memory"])
                row["whole_run_fps"] = round(statistics.median(r.fps for r in runs), 2)
                rows.append(row)
    return rows


def _row(strategy: str, fps_runs: list[float], latency: list[float], allocs: float, h2d_gbps: float) -> dict:
    import numpy as np

    lat = np.asarray(latency) if latency else np.zeros(1)
    return {
        "strategy": strategy,
        "fps": round(statistics.median(fps_runs), 2),
        "fps_runs": [round(f, 2) for f in fps_runs],
        "latency_p50_ms": round(float(np.percentile(lat, 50)), 3),
        "latency_p99_ms": round(float(np.percentile(lat, 99)), 3),
        "device_allocs_per_frame": round(allocs, 3),
        "h2d_gbps": round(h2d_gbps, 2),
        "latency_ms": [round(float(x), 3) for x in lat[:: max(1, len(lat) // 2000)]],
    }


def memory_figures(counters: dict) -> dict:
    """What a strategy's device memory came to: reserved against the most in use at once, and the worst
    fragmentation of its arena (None where the strategy has no arena of its own to fragment)."""
    return {"bytes_reserved": counters.get("bytes_reserved", 0), "bytes_peak": counters.get("bytes_peak", 0),
            "fragmentation_peak": counters.get("fragmentation_peak")}


def _relative_to_pooled(result: dict) -> None:
    for rows in result["scopes"].values():
        for r in rows:
            base = "pool" + r["strategy"][len(r["strategy"].split(",")[0]):]  # the pooled row of its decoder
            pooled = next((p["fps"] for p in rows if p["strategy"] == base), None)
            r["x_pooled"] = round(r["fps"] / pooled, 3) if pooled else None
