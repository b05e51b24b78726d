"""The ``run`` benchmark scope: ``pipeline run`` exactly as a user runs it, one process per run.

Each row is a fresh process (``python -m pipeline run``): its whole run, interpreter start to exit, is
what a user waits for. Beside it, from the run's own statistics: fps with set-up included (``fps``),
after the first frames (``steady_fps``), and the time to the first packet out. Rows pair the pooled and
the naive strategy for each decoder (CPU, NVDEC) and output (``-o null``, an encoded file), so the ratio
the project exists to show is measured in the user's own command, side by side in one run.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

OUTPUTS = ("null", "file")
DECODERS = ("cpu", "nvdec")
RUN_TIMEOUT_S = 300  # one run that makes no progress is a row's error, not a benchmark that never ends


def run_once(args, decode: str, alloc: str, output: str, tmp: Path) -> dict[str, Any]:
    stats = tmp / "stats.json"
    out = "null" if output == "null" else str(tmp / f"out{Path(args.input).suffix or '.mp4'}")
    cmd = [sys.executable, "-m", "pipeline", "run", args.input, "-o", out, "-y", "-q", "--device", "cuda",
           "--decode", decode, "--alloc", alloc, "--filters", args.filters, "-c", args.codec,
           "--frames", str(args.frames), "--stats-json", str(stats)]
    for key, value in _encoder_opts(args).items():
        cmd += ["--encoder-opt", f"{key}={value}"]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {RUN_TIMEOUT_S} s (stopped)", "exit": None}
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1], "exit": proc.returncode}
    data = json.loads(stats.read_text())
    frames = data["frames_out"]
    return {"process_fps": frames / wall, "fps": data["fps"], "steady_fps": data["steady_fps"],
            "ttff_ms": data["time_to_first_frame_ms"], "frames": frames, "process_s": wall,
            "allocs_per_frame": data["steady_device_allocs_per_frame"] or 0.0,
            "decoder_surfaces": data["memory"].get("decoder_surfaces")}


def _encoder_opts(args) -> dict[str, str]:
    from .bench import _encoder_opts as bench_opts

    return bench_opts(args)


def measure(args, say) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-run-") as name:
        tmp = Path(name)
        run_once(args, "cpu", "pool", "null", tmp)  # kernel cache and file cache warm, as on a used machine
        for output in OUTPUTS:
            for decode in args.decoders:
                for alloc in ("pool", "naive"):
                    say(f"run scope: --decode {decode} --alloc {alloc} -o {output}")
                    runs = [run_once(args, decode, alloc, output, tmp) for _ in range(args.repeats)]
                    rows.append(_row(decode, alloc, output, runs))
    _pair(rows)
    return rows


def _row(decode: str, alloc: str, output: str, runs: list[dict]) -> dict[str, Any]:
    good = [r for r in runs if "error" in r] == [] and runs
    row: dict[str, Any] = {"decode": decode, "alloc": alloc, "output": output}
    if not good:
        return {**row, "error": next(r["error"] for r in runs if "error" in r)}
    for key in ("process_fps", "fps", "steady_fps", "ttff_ms", "process_s", "allocs_per_frame"):
        values = [r[key] for r in runs if r[key] is not None]
        row[key] = round(statistics.median(values), 2) if values else None
    row["runs"] = [round(r["process_fps"], 1) for r in runs]
    row["decoder_surfaces"] = runs[0]["decoder_surfaces"]
    return row


def _pair(rows: list[dict]) -> None:
    """x_naive: the pooled row's whole-run fps over the naive row's, for the same decoder and output."""
    for row in rows:
        if row["alloc"] != "pool" or "error" in row:
            continue
        naive = next((r for r in rows if r["alloc"] == "naive" and r["decode"] == row["decode"]
                      and r["output"] == row["output"] and "error" not in r), None)
        if naive:
            row["x_naive"] = round(row["process_fps"] / naive["process_fps"], 2)
            row["x_naive_in_run"] = round(row["fps"] / naive["fps"], 2)
