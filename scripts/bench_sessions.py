#!/usr/bin/env python3
"""NVDEC sessions on one file (``--nvdec-sessions``): whole runs of ``pipeline run`` as a user runs them.

    python scripts/bench_sessions.py [--out-dir out/bench_sessions] [--sessions 1,2,4,8] [--repeats 2]

Makes a 1080p60 clip (600 frames) and a 4K30 clip (300 frames), both H.264 with a keyframe every second
(streaming's usual GOP; a file with one keyframe in 10 s gains less), then for each clip runs, each in a
fresh process, in alternating order: ``-o null --decode nvdec`` pooled and naive with each session count,
and with the CPU decoder; and a libx264 ultrafast file with the CPU decoder and with NVDEC at one session
and at the most sessions. Reports the process's own wall time (interpreter start to exit), the run's fps
(set-up included), steady fps and the time to the first packet out. Writes sessions.json and sessions.md
(date, command, hardware).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pipeline.bench.report import markdown_rows, script_heading, script_run, write_script_report  # noqa: E402
from pipeline.sample import make_clip  # noqa: E402

CLIPS = {"1080p": (1920, 1080, 60, 600), "4k": (3840, 2160, 30, 300)}


def counts(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", type=Path, default=ROOT / "out" / "bench_sessions")
    p.add_argument("--sessions", type=counts, default=[1, 2, 4, 8])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--clips", default="1080p,4k")
    p.add_argument("--no-file", action="store_true", help="skip the libx264 rows")
    return p.parse_args(argv)


def clip_for(name: str, out_dir: Path) -> Path:
    w, h, fps, frames = CLIPS[name]
    path = out_dir / f"{name}_gop{fps}.mp4"
    if not path.exists():
        make_clip(path, width=w, height=h, fps=fps, frames=frames, seed=11, crf=23,
                  options={"preset": "veryfast", "g": str(fps)})
    return path


def run_once(clip: Path, out_dir: Path, decode: str, alloc: str, sessions: int, output: str) -> dict:
    stats = out_dir / "stats.json"
    out = "null" if output == "null" else str(out_dir / "out.mp4")
    cmd = [sys.executable, "-m", "pipeline", "run", str(clip), "-o", out, "-y", "-q", "--device", "cuda",
           "--decode", decode, "--alloc", alloc, "--nvdec-sessions", str(sessions), "--stats-json", str(stats)]
    if output != "null":
        cmd += ["--encoder-opt", "preset=ultrafast"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    data = json.loads(stats.read_text())
    return {"process_fps": data["frames_out"] / wall, "fps": data["fps"], "steady_fps": data["steady_fps"],
            "ttff_ms": data["time_to_first_frame_ms"], "sessions": data["decode_sessions"],
            "allocs_per_frame": data["steady_device_allocs_per_frame"] or 0.0}


def configurations(sessions: list[int], with_file: bool) -> list[tuple[str, str, int, str]]:
    rows = [("nvdec", alloc, k, "null") for k in sessions for alloc in ("pool", "naive")]
    rows += [("cpu", alloc, 1, "null") for alloc in ("pool", "naive")]  # the CPU decoder, for scale
    if with_file:
        rows += [("cpu", "pool", 1, "file"), ("nvdec", "pool", 1, "file"), ("nvdec", "pool", max(sessions), "file")]
    return rows


def measure(clip: Path, out_dir: Path, sessions: list[int], repeats: int, with_file: bool, say) -> list[dict]:
    configs = configurations(sessions, with_file)
    runs: dict[tuple, list[dict]] = {c: [] for c in configs}
    run_once(clip, out_dir, "nvdec", "pool", 1, "null")  # kernel and file caches warm, as on a used machine
    for r in range(repeats):
        for c in (configs if r % 2 == 0 else configs[::-1]):  # alternate the order: drift falls on both sides
            runs[c].append(run_once(clip, out_dir, *c))
    rows = []
    for (decode, alloc, k, output), results in runs.items():
        good = [x for x in results if "error" not in x]
        row = {"decode": decode, "alloc": alloc, "sessions": k, "output": output, "runs": len(good)}
        if not good:
            row["error"] = results[0]["error"]
        for key in ("process_fps", "fps", "steady_fps", "ttff_ms", "allocs_per_frame"):
            if good:
                row[key] = round(statistics.mean(x[key] for x in good), 1)
        say(json.dumps(row))
        rows.append(row)
    return rows


def markdown(report: dict) -> str:
    lines = [*script_heading("NVDEC sessions on one file (`scripts/bench_sessions.py`)", report), ""]
    for name, rows in report["clips"].items():
        lines += [f"### {name} ({report['frames'][name]} frames, a keyframe every second)", "",
                  *markdown_rows(["decode", "sessions", "output", "alloc", "process fps", "fps in run", "steady fps",
                                  "first frame ms"], "lrllrrrr", rows,
                                 lambda r: [r["decode"], r["sessions"], r["output"], r["alloc"]],
                                 lambda r: [r["process_fps"], r["fps"], r["steady_fps"], r["ttff_ms"]])]
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)

    def say(m: str) -> None:
        print(f"bench_sessions: {m}", flush=True)

    report_clips, frames = {}, {}
    for name in args.clips.split(","):
        clip = clip_for(name, args.out_dir)
        frames[name] = CLIPS[name][3]
        report_clips[name] = measure(clip, args.out_dir, args.sessions, args.repeats, not args.no_file, say)
    from pipeline.gpu.cuda import cupy
    from pipeline.gpu.probe import device_info

    report = {**script_run("bench_sessions.py", argv), "gpu": device_info(cupy())["name"],
              "cpu_count": os.cpu_count(), "frames": frames, "clips": report_clips}
    write_script_report(args.out_dir, "sessions", report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
