#!/usr/bin/env python3
"""Runs in a process that stays warm: what ``pipeline.run`` gives an application, or a batch worker, on its
second and later files, against the first; pooled against naive.

    python scripts/bench_warm_runs.py [--clips 1080p,4k] [--runs 4] [--decode auto] [--keep-decoders]
                                      [--out-dir out/warm_runs]

One process runs each clip ``--runs`` times with each strategy, pool and naive alternating, to ``null``.
Reported per run: the run's fps (set-up included: the statistics' ``fps``), its steady fps (after the first
frames), the one over the other, and the time from the run's start to its first frame out. The process's
first run pays CuPy's import, the CUDA context and the kernels' load; the later ones, "warm" in the
summary, only what a run opens itself (the decoder, the ring and the arena). ``--keep-decoders`` passes one
``pipeline.DecoderPool`` to every run (both strategies), so a run takes the NVDEC decoders the run before
left. Clips as ``scripts/bench_whole_runs.py`` makes them (``tiny`` checks the script on any machine).
Writes warm_runs.json and warm_runs.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from bench_whole_runs import CLIPS, clip_for  # noqa: E402

STRATEGIES = ("pool", "naive")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", type=Path, default=ROOT / "out" / "warm_runs")
    p.add_argument("--runs", type=int, default=4, help="runs of each clip with each strategy (default: 4)")
    p.add_argument("--clips", default="1080p,4k")
    p.add_argument("--decode", default="auto", help="as pipeline run's --decode (default: auto)")
    p.add_argument("--device", default="auto")
    p.add_argument("--keep-decoders", action="store_true", help="one DecoderPool for every run (NVDEC)")
    args = p.parse_args(argv)
    if unknown := [c for c in args.clips.split(",") if c not in CLIPS]:
        p.error(f"unknown clip {', '.join(unknown)}; the clips are {', '.join(CLIPS)}")
    if args.runs < 1:
        p.error("--runs: at least 1")
    return args


def one_run(clip: Path, alloc: str, decode: str, device: str, decoders=None) -> dict:
    import pipeline

    stats = pipeline.run(str(clip), "null", alloc=alloc, decode=decode, device=device, quiet=True, decoders=decoders)
    steady = round(float(stats["steady_fps"]), 1) if stats["steady_fps"] else None  # too few frames to tell
    return {"alloc": alloc, "frames": stats["frames_out"], "fps": round(stats["fps"], 1), "steady_fps": steady,
            "run_over_steady": round(stats["fps"] / steady, 3) if steady else None,
            "first_frame_ms": stats["time_to_first_frame_ms"], "decode": stats["decode"], "device": stats["device"],
            "decoders_reused": stats["decoders_reused"]}


def measure(clip: Path, runs: int, decode: str, device: str, first: bool, say, decoders=None) -> dict:
    """``first``: this clip's first run is the process's first (cold), left out of the summary."""
    rows = []
    for i in range(runs):
        for alloc in STRATEGIES if i % 2 == 0 else reversed(STRATEGIES):
            row = {"run": i + 1, "warm": not (first and not rows), **one_run(clip, alloc, decode, device, decoders)}
            say(str(row))
            rows.append(row)
    warm = {a: [r for r in rows if r["alloc"] == a and r["warm"]] for a in STRATEGIES}
    summary = {}
    if all(warm.values()):
        fps = {a: statistics.median(r["fps"] for r in warm[a]) for a in STRATEGIES}
        ratios = {a: [r["run_over_steady"] for r in warm[a] if r["run_over_steady"] is not None] for a in STRATEGIES}
        summary = {"warm_pool_over_naive": round(fps["pool"] / fps["naive"], 2),
                   **{f"warm_{a}_run_over_steady": round(statistics.median(ratios[a]), 3)
                      for a in STRATEGIES if ratios[a]}}
    return {"rows": rows, "summary": summary}


def markdown(report: dict) -> str:
    from pipeline.bench.report import markdown_rows, script_heading

    lines = [*script_heading("Runs in a warm process (`scripts/bench_warm_runs.py`)", report), ""]
    for name, result in report["clips"].items():
        lines += [f"### {name}", "",
                  *markdown_rows(["run", "alloc", "frames", "fps in run", "steady fps", "run / steady",
                                  "first frame ms", "decode", "decoders reused"], "rlrrrrrlr", result["rows"],
                                 lambda r: [r["run"], r["alloc"]],
                                 lambda r: [r["frames"], r["fps"], r["steady_fps"], r["run_over_steady"],
                                            r["first_frame_ms"], r["decode"], r["decoders_reused"]]), ""]
        lines += [", ".join(f"{k}: {v}" for k, v in result["summary"].items()) if result["summary"]
                  else "(no warm run of both strategies: the summary needs --runs 2 or a second clip)", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    from pipeline.bench.report import script_run, write_script_report

    args.out_dir.mkdir(parents=True, exist_ok=True)

    def say(m: str) -> None:
        print(f"bench_warm_runs: {m}", flush=True)

    names = args.clips.split(",")
    import pipeline

    decoders = pipeline.DecoderPool() if args.keep_decoders else None
    try:
        clips = {name: measure(clip_for(name, args.out_dir), args.runs, args.decode, args.device, i == 0, say,
                               decoders) for i, name in enumerate(names)}
    finally:
        if decoders is not None:
            decoders.close()
    from pipeline.gpu.cuda import cupy, gpu_status
    from pipeline.gpu.probe import device_info

    gpu = device_info(cupy())["name"] if args.device != "cpu" and gpu_status()[0] else "no GPU"
    report = {**script_run("bench_warm_runs.py", argv), "gpu": gpu, "cpu_count": os.cpu_count(), "clips": clips}
    write_script_report(args.out_dir, "warm_runs", report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
