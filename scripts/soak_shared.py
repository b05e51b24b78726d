#!/usr/bin/env python3
"""Shared-arena soak: streams of four sizes starting and stopping in one process for a set time.

    python scripts/soak_shared.py --minutes 10 --device cuda
    python scripts/soak_shared.py --rounds 30 --device cpu

Each round runs a random subset of four clips (640x360, 960x540, 1280x720, 1920x1080) at once through
``pipeline.run_many`` with one shared memory (device arena and pinned pool), as a server whose streams
come and go would. Once a minute (and at the end) it prints what the arena holds: device allocations,
bytes reserved, chunks and the fragmentation figure (1 - largest free block / free bytes), and the pinned
pool's. The first round runs all four at once; after the warm-up (the first quarter of the time, and at
least ten rounds; with ``--rounds``, the first ten) device allocations and reserved bytes may not change at
all; if they do, or if the soak was too short to look after its warm-up, exit 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pipeline.config import RunConfig  # noqa: E402
from pipeline.many import configs_for, run_many, shared_memory_for  # noqa: E402
from pipeline.sample import make_clip  # noqa: E402
from pipeline.startup import steady_malloc  # noqa: E402

SIZES = [(640, 360), (960, 540), (1280, 720), (1920, 1080)]
WARMUP_ROUNDS = 10
FLAT = ("arena_device_allocs", "arena_bytes_reserved", "pinned_host_allocs", "pinned_bytes_reserved")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, help="how long to run (default: 10; with --rounds, no limit)")
    p.add_argument("--rounds", type=int, help="stop after this many rounds instead (the warm-up: ten rounds)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--frames", type=int, default=30, help="frames per stream per round (default: 30)")
    p.add_argument("--dir", type=Path, default=ROOT / "out" / "soak_shared", help="where the clips are made")
    return p.parse_args(argv)


def line(minute: float, rounds: int, c: dict) -> str:
    return (f"soak_shared: {minute:5.1f} min  rounds {rounds:5d}  cudaMalloc {c['arena_device_allocs']:3d}  "
            f"reserved {c['arena_bytes_reserved'] / 2**20:7.1f} MiB  chunks {c['arena_chunks']:3d}  "
            f"fragmentation {c['arena_fragmentation']:.3f}  pinned {c['pinned_bytes_reserved'] / 2**20:6.1f} MiB "
            f"({c['pinned_host_allocs']} cudaHostAlloc)")


def main(argv=None) -> int:
    args = parse_args(argv)
    steady_malloc()
    args.dir.mkdir(parents=True, exist_ok=True)
    clips = []
    for i, (w, h) in enumerate(SIZES):
        path = args.dir / f"s{w}x{h}.mp4"
        if not path.exists():
            make_clip(path, width=w, height=h, frames=args.frames, fps=30, seed=i, audio=False)
        clips.append(str(path))
    base = RunConfig(device=args.device, quiet=True, frames=args.frames)
    shared = shared_memory_for(base)
    rng = np.random.default_rng(11)
    t0 = time.perf_counter()
    minutes = args.minutes if args.minutes is not None else (float("inf") if args.rounds else 10.0)
    end, warm_at, next_report = t0 + minutes * 60, t0 + minutes * 15, t0
    rounds, checked, warm, changed = 0, 0, None, []
    try:
        while (now := time.perf_counter()) < end and (args.rounds is None or rounds < args.rounds):
            chosen = clips if not rounds else [
                clips[i] for i in rng.choice(len(clips), size=int(rng.integers(1, len(clips) + 1)), replace=False)]
            result = run_many(configs_for(base, chosen, "null"), shared=shared)
            if result.exit_code:
                print(f"soak_shared: a round failed (exit {result.exit_code})", file=sys.stderr)
                return 1
            rounds += 1
            c = shared.counters()
            if rounds > WARMUP_ROUNDS and (args.rounds or now >= warm_at):
                checked += 1
                snapshot = tuple(c[k] for k in FLAT)
                warm = warm or snapshot
                if snapshot != warm:
                    changed.append((rounds, snapshot))
            if now >= next_report:
                print(line((now - t0) / 60, rounds, c), flush=True)
                next_report += 60
        print(line((time.perf_counter() - t0) / 60, rounds, shared.counters()), flush=True)
    finally:
        shared.close()
    if changed:
        print(f"soak_shared: grew after warm-up ({', '.join(FLAT)}): {warm} -> {changed[-1][1]} "
              f"(round {changed[0][0]} first)")
        return 1
    if not checked:
        print(f"soak_shared: too short to tell: {rounds} rounds, none after the warm-up")
        return 1
    if args.rounds and rounds < args.rounds:
        print(f"soak_shared: --minutes ended it after {rounds} of the {args.rounds} rounds asked for")
        return 1
    print(f"soak_shared: ok, {rounds} rounds; nothing allocated in the {checked} after warm-up")
    return 0


if __name__ == "__main__":
    sys.exit(main())
