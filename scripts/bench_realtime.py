"""Real-time latency on the GPU: 1080p60 and 4K30 clips paced at their own rate, pooled vs naive memory.

    python scripts/bench_realtime.py [--out-dir out/bench_realtime] [--clip-1080p PATH] [--clip-4k PATH]

Each clip is played as a camera would deliver it (``--realtime``: every frame released at its
timestamp, its arrival) through the default filter chain with the default live settings (no config:
low-latency libx264, drop-oldest), once with the pooled memory path and once with ``--naive-alloc``.
Reported per run: frames dropped; p50/p99/max of the latency from the decoded frame to the frame
handed to the encoder (the pipeline's own share: host slot, upload, kernels, download, hand-over); and
p99 from the frame's arrival to its packet out of the encoder (what a viewer waits for), after the
first 8 frames. Targets, printed next to the numbers: no drops, arrival to packet out p99 <= 10 ms at
1080p60 and <= 22 ms at 4K30.

Writes ``realtime.json`` and ``realtime.md`` (a table for docs/benchmarks.md, with the date, command and
hardware) into ``--out-dir``. Clips are made there on first use (pipeline/sample.py, seeded) and
reused. About a minute on an H200 with 16 cores. Without a usable GPU: one line, exit 5.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline import Pipeline  # noqa: E402
from pipeline.bench.report import script_run, write_script_report  # noqa: E402
from pipeline.config import build_config  # noqa: E402
from pipeline.errors import EXIT_GPU  # noqa: E402

SKIP = 8  # frames excluded from the latency figures: the first kernel launches and encoder start-up
STRATEGIES = ("pool", "naive")
HOP = ("decoded", "encoder")  # the latency measured: decoded frame to frame handed to the encoder


@dataclass(frozen=True)
class Clip:
    name: str
    width: int
    height: int
    fps: int
    frames: int
    p99_target_ms: float


CLIPS = (Clip("1080p60", 1920, 1080, 60, 300, 10.0), Clip("4k30", 3840, 2160, 30, 150, 22.0))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", type=Path, default=ROOT / "out" / "bench_realtime")
    p.add_argument("--clip-1080p", type=Path, help="a 1080p60 clip to use instead of making one")
    p.add_argument("--clip-4k", type=Path, help="a 4K30 clip to use instead of making one")
    p.add_argument("-q", "--quiet", action="store_true", help="only the final table")
    return p.parse_args(argv)


def ensure_clip(clip: Clip, given: Path | None, out_dir: Path, say) -> Path:
    if given is not None:
        return given
    path = out_dir / f"rt_{clip.name}.mp4"
    if not path.exists():
        from pipeline.sample import make_clip

        say(f"making {path} ({clip.width}x{clip.height}, {clip.fps} fps, {clip.frames} frames)")
        make_clip(path, width=clip.width, height=clip.height, fps=clip.fps, frames=clip.frames,
                  seed=6, crf=23, options={"preset": "veryfast"})
    return path


def run_once(path: Path, strategy: str, out: Path, *, paced: bool, frames: int | None = None):
    cfg = build_config({}, {"input": str(path), "output": str(out), "device": "cuda", "alloc": strategy,
                            "realtime": paced, "frames": frames, "quiet": True, "overwrite": True})
    return Pipeline.from_config(cfg).run()


def measure(clip: Clip, path: Path, tmp: Path, say) -> dict:
    for strategy in STRATEGIES:  # kernels compiled, caches and the encoder warm; not measured
        run_once(path, strategy, tmp / "warmup.mp4", paced=False, frames=30)
    runs = {}
    for strategy in STRATEGIES:
        say(f"{clip.name}: {strategy}, paced, {clip.frames / clip.fps:.0f} s")
        stats = run_once(path, strategy, tmp / f"{clip.name}_{strategy}.mp4", paced=True)
        runs[strategy] = summarise(stats)
    pool, naive = runs["pool"]["p99_ms"], runs["naive"]["p99_ms"]
    return {"clip": clip.name, "size": [clip.width, clip.height], "fps": clip.fps, "frames": clip.frames,
            "p99_target_ms": clip.p99_target_ms, "runs": runs,
            "pooled_over_naive_p99": round(pool / naive, 3) if naive else None}


def summarise(stats) -> dict:
    lat = stats.latency
    index = lat.column("index")
    ms = (lat.column(HOP[1]) - lat.column(HOP[0]))[index >= SKIP]
    ms = ms[np.isfinite(ms)]
    end_to_end = (lat.column("packet") - lat.column("decoded"))[index >= SKIP]
    return {
        "frames_in": stats.frames_in,
        "frames_out": stats.frames_out,
        "drops": stats.dropped,
        "drops_per_stage": dict(stats.drops),
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3),
        "max_ms": round(float(ms.max()), 3),
        "end_to_end_p99_ms": round(float(np.nanpercentile(end_to_end, 99)), 3),
        "hops_ms": {k: v for k, v in lat.hops().items()},
        "wall_s": round(stats.wall_s, 3),
    }


def hardware() -> dict:
    from pipeline.gpu.cuda import cupy

    cp = cupy()
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    import av

    return {"gpu": name, "gpu_memory_mib": props["totalGlobalMem"] // 2**20, "cpu_count": os.cpu_count(),
            "cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
            "pyav": av.__version__, "cupy": cp.__version__}


def verdicts(result: dict) -> dict[str, bool]:
    runs = result["runs"]
    target = result["p99_target_ms"]
    return {
        "pool: 0 drops": runs["pool"]["drops"] == 0,
        f"pool: arrival to packet out p99 <= {target:g} ms": runs["pool"]["end_to_end_p99_ms"] <= target,
    }


def markdown(report: dict) -> str:
    hw = report["hardware"]
    lines = [
        "## Real-time latency (paced input)",
        "",
        f"- **Date:** {report['date']}",
        f"- **Command:** `{report['command']}`",
        f"- **Hardware:** {hw['gpu']} ({hw['gpu_memory_mib']} MiB), {hw['cpu_count']} CPU cores ({hw['cpu']})",
        f"- **Software:** Python {hw['python']}, PyAV {hw['pyav']}, CuPy {hw['cupy']}",
        ("- **Settings:** `--realtime` (frames released at their timestamps: their arrival), default chain, "
         "the default live settings (no config: libx264 ultrafast zerolatency bf=0, drop-oldest)"),
        (f"- **Latency:** frames after the first {SKIP}: decoded frame to frame handed to the encoder (the "
         "pipeline's share), and arrival to packet out of the encoder (what a viewer waits for); drops over "
         "the whole run"),
        "",
        "| clip | alloc | frames in | out | drops | to encoder p50 ms | p99 ms | max ms | pooled/naive p99 "
        "| arrival to packet out p99 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for result in report["results"]:
        for strategy, r in result["runs"].items():
            ratio = f"{result['pooled_over_naive_p99']:.2f}" if strategy == "pool" and result[
                "pooled_over_naive_p99"] is not None else ""
            lines.append(f"| {result['clip']} | {strategy} | {r['frames_in']} | {r['frames_out']} | {r['drops']} | "
                         f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['max_ms']:.2f} | {ratio} | "
                         f"{r['end_to_end_p99_ms']:.2f} |")
    lines += ["", "| target | met |", "|---|---|"]
    for result in report["results"]:
        for name, ok in verdicts(result).items():
            lines.append(f"| {result['clip']} {name} | {'yes' if ok else '**no**'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pipeline.gpu.cuda import gpu_status

    ok, reason = gpu_status()
    if not ok:
        print(f"bench_realtime: no usable CUDA GPU ({reason})", file=sys.stderr)
        return EXIT_GPU
    say = (lambda m: None) if args.quiet else (lambda m: print(f"bench_realtime: {m}", flush=True))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    given = {"1080p60": args.clip_1080p, "4k30": args.clip_4k}
    report = {
        **script_run("bench_realtime.py", argv),
        "hardware": hardware(),
        "targets": {"drops": 0, "arrival_to_packet_p99_ms": {c.name: c.p99_target_ms for c in CLIPS}},
        "results": [],
    }
    with tempfile.TemporaryDirectory(prefix="bench-realtime-") as tmp:
        for clip in CLIPS:
            path = ensure_clip(clip, given[clip.name], args.out_dir, say)
            report["results"].append(measure(clip, path, Path(tmp), say))
    for result in report["results"]:
        result["targets_met"] = verdicts(result)
    write_script_report(args.out_dir, "realtime", report, markdown(report))
    print(f"wrote {args.out_dir / 'realtime.json'}, {args.out_dir / 'realtime.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
