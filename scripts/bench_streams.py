#!/usr/bin/env python3
"""How many live 1080p30 streams one GPU sustains in real time, pooled against naive.

    python scripts/bench_streams.py [--out-dir out/bench_streams] [--seconds 6] [--pool 32,48,64,80]

Each trial runs N copies of a 1080p30 H.264 clip at once in one process (``pipeline.many``), each paced at
its own frame rate as a camera would deliver it (``--realtime``), decoded by NVDEC, through the default
chain, downloaded and discarded (``-o null``), with drop-oldest: a stream that cannot keep up drops frames.
N is sustained when no stream dropped a frame and every stream kept its schedule once all had opened
(a paced file whose decoder is late slows down instead of dropping, so lateness counts too). The pooled streams share one
device arena and one pinned pool; the naive ones allocate per frame. A last sweep encodes each stream with libx264 (ultrafast,
low-latency), where the CPU decides. Writes streams.json and streams.md (date, command, hardware).

``--processes K`` runs each trial as K worker processes of N/K streams each (each its own CUDA context, arena
and pinned pool) instead of N threads in one process: the execution model, measured against the other. The
workers warm up first (one short run each) and start their trials together, as streams joining processes
that already run; ``--cold-start`` starts the trials with the processes, each one's start-up beside the
others' streams.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pipeline.bench.report import script_heading, script_run, write_script_report  # noqa: E402
from pipeline.config import RunConfig  # noqa: E402
from pipeline.many import run_many  # noqa: E402
from pipeline.sample import make_clip  # noqa: E402


def counts(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", type=Path, default=ROOT / "out" / "bench_streams")
    p.add_argument("--seconds", type=float, default=6.0, help="length of each stream in a trial (default: 6)")
    p.add_argument("--pool", type=counts, default=[32, 48, 64, 80], help="stream counts tried, pooled")
    p.add_argument("--naive", type=counts, default=[8, 16, 24, 32], help="stream counts tried, naive")
    p.add_argument("--x264", type=counts, default=[2, 4, 6, 8], help="stream counts tried with libx264 output")
    p.add_argument("--decode", default="nvdec", choices=("nvdec", "cpu"))
    p.add_argument("--processes", type=int, default=1, help="worker processes per trial (default: 1, threads only)")
    p.add_argument("--cold-start", action="store_true",
                   help="with --processes, start the trials as the workers start (their start-up beside the "
                        "streams of the others) instead of after every worker has warmed up")
    p.add_argument("--in-flight", type=int, help="frames in flight per stream (pipeline run's --in-flight; "
                   "also the depth of each stream's queues)")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a worker: one trial of N streams, a JSON line out
    p.add_argument("--alloc", default="pool", help=argparse.SUPPRESS)
    p.add_argument("--output", default="null", help=argparse.SUPPRESS)
    p.add_argument("--frames", type=int, help=argparse.SUPPRESS)  # a worker's: the parent's count, exactly
    return p.parse_args(argv)


# RunConfig settings every trial's streams get (--in-flight), the workers' too
SETTINGS: dict = {}


def trial(clip: Path, n: int, alloc: str, decode: str, output: str, frames: int, out_dir: Path) -> dict:
    base = RunConfig(device="cuda", alloc=alloc, decode=decode, realtime=True, quiet=True, frames=frames,
                     overwrite=True, codec="libx264", **SETTINGS)
    outputs = ["null"] * n if output == "null" else [str(out_dir / f"s{i}.mkv") for i in range(n)]
    configs = [base.replace(input=str(clip), output=o) for o in outputs]
    started = time.time()
    result = run_many(configs, per_frame=True)
    streams = [s.stats for s in result.streams if s.stats]
    stalls = decode_stalls(streams, started)
    firsts = first_frames(streams, started)
    slip = max((schedule_slip(s) for s in streams), default=0.0)
    steady_slip = max((schedule_slip(s, since=0.5) for s in streams), default=0.0)
    for s in streams:
        s.pop("per_frame", None)
    drops = sum(s["drops"]["total"] for s in streams)
    failed = [s.error for s in result.streams if s.exit_code]
    worst_fps = min((s["frames_out"] / s["wall_s"] for s in streams if s["wall_s"]), default=0.0)
    return {"streams": n, "alloc": alloc, "output": output, "drops": drops, **_drop_times(streams, started),
            **_slowest(streams), "stalls": stalls, "first_frame_s": firsts,
            "failed": len(failed),
            "errors": failed[:3], "frames_out": result.frames, "wall_s": round(result.wall_s, 2),
            "aggregate_fps": round(result.frames / result.wall_s, 1), "worst_stream_fps": round(worst_fps, 1),
            "slip_s": round(slip, 3), "steady_slip_s": round(steady_slip, 3),
            "sustained": drops == 0 and not failed and steady_slip <= MAX_SLIP_S,
            "shared": result.shared}


def _drop_times(streams: list[dict], started: float) -> dict:
    """When the streams dropped: the earliest first drop and the latest last one, seconds into their runs,
    and the trial's start (wall clock), so that the processes of one trial can be lined up."""
    first = [s["drops_at_s"]["first"] for s in streams if s["drops_at_s"]["first"] is not None]
    last = [s["drops_at_s"]["last"] for s in streams if s["drops_at_s"]["last"] is not None]
    return {"first_drop_s": min(first, default=None), "last_drop_s": max(last, default=None), "started": started,
            "dropping_streams": len(first)}


STALL_MS = 100.0  # a paced 30 fps stream whose decoder gives nothing for this long is about to drop


def _decoded(stream: dict) -> list[float]:
    """A stream's decoded (for a paced file: released) times, ms after its start, in output order."""
    return [t for t in stream.get("per_frame", {}).get("decoded", []) if t is not None]


def decode_stalls(streams: list[dict], started: float, limit: int = 8) -> list[dict]:
    """The longest gaps between consecutive decoded frames of any stream (those over STALL_MS), each with
    when it began (seconds after ``started``, Unix time: the trial's start), its stream and the frame after
    it: stalls several streams (or processes) meet at once line up on this clock."""
    found = []
    for i, s in enumerate(streams):
        decoded = _decoded(s)
        for a, b in zip(decoded, decoded[1:]):
            if b - a > STALL_MS:
                found.append({"stream": i, "at_s": round(s["started_at"] + a / 1e3 - started, 3),
                              "gap_ms": round(b - a, 1)})
    return sorted(found, key=lambda x: -x["gap_ms"])[:limit]


# A paced file whose decoder is late does not drop: its schedule moves with the late frame (a camera's
# frames would wait in its socket instead, and be read in a burst once the decoder caught up). So a stream
# is in real time only if its frames came out on schedule: over the second half of each stream, once every
# stream of the trial has opened its decoder (the opens stall the GPU for a moment: reported apart, as
# the slip over the whole stream), the release times span the timestamps' span, give or take this much.
MAX_SLIP_S = 0.1


def schedule_slip(stream: dict, since: float = 0.0) -> float:
    """How far behind its own schedule a paced stream fell, in seconds: the span of its frames' release
    times (``decoded``) less the span of their timestamps, from the frame ``since`` of the way through its
    timestamps to the last; 0 for a stream that kept its frame rate."""
    series = stream.get("per_frame", {})
    pairs = sorted((p, d) for p, d in zip(series.get("pts_s", []), series.get("decoded", []))
                   if p is not None and d is not None)
    if len(pairs) < 2:
        return 0.0
    start = pairs[0][0] + since * (pairs[-1][0] - pairs[0][0])
    first = next(pair for pair in pairs if pair[0] >= start)
    return max(0.0, (pairs[-1][1] - first[1]) / 1e3 - (pairs[-1][0] - first[0]))


def first_frames(streams: list[dict], started: float) -> list[float] | None:
    """When the streams' first frames came out of their decoders (seconds after ``started``): the earliest
    and the latest. A stream's decoder opens before its first frame, so late opens show as a late maximum."""
    at = [s["started_at"] + min(d) / 1e3 - started for s in streams if (d := _decoded(s))]
    return [round(min(at), 3), round(max(at), 3)] if at else None


def _slowest(streams: list[dict]) -> dict:
    """Where the streams dropped (by stage) and each stage's longest frame, over all the streams: a stall
    of one stage shows as its maximum."""
    stages = sorted({k for s in streams for k in s["stage_ms"]})
    return {"drops_by_stage": {k: sum(s["drops"].get(k, 0) for s in streams) for k in ("decode", "submit")},
            "stage_max_ms": {k: max(s["stage_ms"][k]["max"] for s in streams if k in s["stage_ms"]) for k in stages},
            "latency_max_ms": max((s["latency_ms"]["max"] for s in streams), default=0.0)}


def trial_in_processes(clip: Path, n: int, k: int, alloc: str, decode: str, output: str, frames: int,
                       out_dir: Path, cold: bool = False) -> dict:
    """One trial as k worker processes sharing the n streams, their rows merged. Each worker first warms up
    (imports, CUDA context, kernels: one short unpaced run) and the trials start together once all are
    ready, as streams join processes already running; ``cold``: the workers start their trials at once."""
    shares = [n // k + (i < n % k) for i in range(k)]
    procs = [(m, subprocess.Popen([sys.executable, __file__, "--one", str(m), "--alloc", alloc, "--decode", decode,
                                   "--output", output, "--frames", str(frames), "--out-dir", str(out_dir / f"w{i}"),
                                   *(["--cold-start"] if cold else []),
                                   *([f"--in-flight={SETTINGS['in_flight']}"] if "in_flight" in SETTINGS else [])],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
             for i, m in enumerate(shares) if m]
    if not cold:  # every worker warm first, then all trials at once: no process's start-up beside the streams
        for _, p in procs:
            p.stdout.readline()  # "ready" (or the end of a worker that died: its row says so)
        for _, p in procs:
            with contextlib.suppress(BrokenPipeError):
                p.stdin.write("go\n")
                p.stdin.flush()
    rows = [_worker_row(m, p) for m, p in procs]  # each worker is waited for, whatever the others did
    origin = min((r["started"] for r in rows if "started" in r), default=0.0)
    for i, r in enumerate(r for r in rows if "started" in r):
        at = r["started"] - origin
        when = (f"{r['drops']} drops in {r['dropping_streams']} streams, {at + r['first_drop_s']:.2f}-"
                f"{at + r['last_drop_s']:.2f} s after the first worker started, by stage {r['drops_by_stage']}"
                if r["drops"] else "no drops")
        first = r.get("first_frame_s") or [0.0, 0.0]
        print(f"bench_streams:   worker {i} (pid {r.get('pid')}, started at +{at:.2f} s, first frames at "
              f"+{at + first[0]:.2f}-{at + first[1]:.2f} s): {when}; longest frame "
              f"per stage {r['stage_max_ms']} ms, longest latency {r['latency_max_ms']} ms", flush=True)
        stalls = ", ".join(f"stream {x['stream']} {x['gap_ms']:.0f} ms at +{at + x['at_s']:.2f} s"
                           for x in r.get("stalls", []))
        if stalls:
            print(f"bench_streams:     decoder gaps over {STALL_MS:.0f} ms: {stalls}", flush=True)
    frames_out, wall = sum(r["frames_out"] for r in rows), max(r["wall_s"] for r in rows)
    return {"streams": n, "processes": len(rows), "alloc": alloc, "output": output, "started": origin,
            "drops": sum(r["drops"] for r in rows), "failed": sum(r["failed"] for r in rows),
            "first_drop_s": min((r["first_drop_s"] for r in rows if r.get("first_drop_s") is not None), default=None),
            "last_drop_s": max((r["last_drop_s"] for r in rows if r.get("last_drop_s") is not None), default=None),
            "errors": [e for r in rows for e in r["errors"]][:3], "frames_out": frames_out, "wall_s": wall,
            "aggregate_fps": round(frames_out / wall, 1) if wall else 0.0,
            "worst_stream_fps": min(r["worst_stream_fps"] for r in rows),
            "slip_s": max((r.get("slip_s", 0.0) for r in rows), default=0.0),
            "steady_slip_s": max((r.get("steady_slip_s", 0.0) for r in rows), default=0.0),
            "sustained": all(r["sustained"] for r in rows), "shared": None}


def _worker_row(streams: int, process: subprocess.Popen) -> dict:
    """A worker's JSON line; a worker that died or printed nothing counts all its streams failed."""
    out = process.communicate()[0].strip().splitlines()
    if process.returncode == 0 and out:
        return json.loads(out[-1])
    return {"frames_out": 0, "wall_s": 0.0, "drops": 0, "failed": streams, "worst_stream_fps": 0.0,
            "errors": [f"worker process exited {process.returncode}"], "sustained": False}


def sweep(clip, counts_, alloc, output, decode, frames, out_dir, say, processes=1,
          cold=False) -> tuple[list[dict], int]:
    rows, best = [], 0
    for n in counts_:
        if processes > 1:
            row = trial_in_processes(clip, n, processes, alloc, decode, output, frames, out_dir, cold)
        else:
            row = trial(clip, n, alloc, decode, output, frames, out_dir)
        when = f" (from {row['first_drop_s']} s to {row['last_drop_s']} s)" if row["drops"] else ""
        say(f"{alloc} {output} x{n} ({processes} process(es)): drops {row['drops']}{when}, failed {row['failed']}, "
            f"{row['aggregate_fps']} fps in all, behind schedule by up to {row['steady_slip_s']} s in the streams' "
            f"second halves ({row['slip_s']} s in all)")
        rows.append(row)
        if not row["sustained"]:
            break
        best = n
    return rows, best


def _model(processes: int, cold: bool = False) -> str:
    if processes > 1:
        start = "started with the processes" if cold else "started together once every worker had warmed up"
        return (f"{processes} worker processes, the streams shared out among them (one CUDA context each), "
                f"trials {start}")
    return "one process, a thread per stage per stream, one shared arena and pinned pool"


def markdown(report: dict) -> str:
    lines = [*script_heading("Live 1080p30 streams on one GPU (`scripts/bench_streams.py`)", report),
             f"- **Execution:** {_model(report.get('processes', 1), report.get('cold_start', False))}", "",
             "| alloc | output | streams | drops | failed | behind schedule s, second half / all "
             "| frames/s in all | slowest stream fps | sustained |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['alloc']} | {r['output']} | {r['streams']} | {r['drops']} | {r['failed']} | "
                     f"{r.get('steady_slip_s', 0.0)} / {r.get('slip_s', 0.0)} | {r['aggregate_fps']} | "
                     f"{r['worst_stream_fps']} | "
                     f"{'yes' if r['sustained'] else 'no'} |")
    lines += ["", f"Sustained, pooled: **{report['best']['pool']}** streams; naive: **{report['best']['naive']}**; "
              f"pooled with libx264 output: **{report['best']['pool_x264']}**."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.in_flight is not None:
        SETTINGS["in_flight"] = args.in_flight
    args.out_dir.mkdir(parents=True, exist_ok=True)
    frames = args.frames or int(args.seconds * 30)
    if args.one:  # a worker process of --processes: its clip is the parent's
        clip = args.out_dir.parent / "stream_1080p30.mp4"
        if not args.cold_start:
            warm = RunConfig(device="cuda", alloc=args.alloc, decode=args.decode, quiet=True, frames=8,
                             input=str(clip), output="null", **SETTINGS)
            run_many([warm])
            print("ready", flush=True)
            sys.stdin.readline()  # the parent's go, once every worker is ready
        row = trial(clip, args.one, args.alloc, args.decode, args.output, frames, args.out_dir)
        print(json.dumps({"pid": os.getpid(), **{k: v for k, v in row.items() if k != "shared"}}), flush=True)
        return 0
    clip = args.out_dir / "stream_1080p30.mp4"
    if not clip.exists():
        make_clip(clip, width=1920, height=1080, fps=30, frames=frames, seed=9, crf=23,
                  options={"preset": "veryfast", "g": "30"})

    def say(m: str) -> None:
        print(f"bench_streams: {m}", flush=True)

    rows = []
    k = args.processes
    common = (args.decode, frames, args.out_dir, say, k, args.cold_start)
    pool_rows, best_pool = sweep(clip, args.pool, "pool", "null", *common)
    naive_rows, best_naive = sweep(clip, args.naive, "naive", "null", *common)
    x264_rows, best_x264 = sweep(clip, args.x264, "pool", "file", *common)
    rows = pool_rows + naive_rows + x264_rows
    from pipeline.gpu.cuda import cupy
    from pipeline.gpu.probe import device_info

    info = device_info(cupy())
    report = {**script_run("bench_streams.py", argv), "gpu": info["name"], "cpu_count": os.cpu_count(),
              "processes": k, "cold_start": args.cold_start, "rows": rows,
              "best": {"pool": best_pool, "naive": best_naive, "pool_x264": best_x264}}
    write_script_report(args.out_dir, "streams", report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
