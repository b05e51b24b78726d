#!/usr/bin/env python3
"""Soak test: a long run and many short runs in one process, watching for anything that grows.

    python scripts/soak.py                         # 3000 frames, then 300 open/run/close cycles
    python scripts/soak.py --cycles 50 --frames 500 --device cpu

At checkpoints it prints the process RSS, pinned host bytes and device pool bytes (from the run's
memory counters), open file descriptors and threads. After a warm-up (caches, codec tables, the
allocator's first arenas) nothing may grow beyond a tolerance; if anything does, exit 1.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from pipeline import Pipeline, RunConfig  # noqa: E402
from pipeline.sample import make_clip  # noqa: E402
from pipeline.startup import steady_malloc  # noqa: E402

MIB = 2**20


@dataclass(frozen=True)
class Sample:
    label: str
    rss: int
    pinned: int
    pool: int
    fds: int
    threads: int
    gpu: int  # device memory this process holds (see gpu_used_bytes), 0 without a GPU
    slots_added: int = 0  # pinned slots a run's rings added as they filled (memory.host_allocs)


# What may grow after warm-up: RSS by a little (allocator noise, FFmpeg's lazily built tables); the
# rest not at all, since every run must give back its buffers, files and threads, except the pinned bytes
# of a run whose rings added slots as they filled (at most --ring-size each: see growth). RSS is also held
# to a slope: a steady rise of more than 10 MiB per 1000 runs (10 KiB a run) fails even when the total is small.
TOLERANCE = {"rss": 10 * MIB, "pinned": 0, "pool": 0, "fds": 0, "threads": 0, "gpu": 8 * MIB}
RSS_SLOPE = 10 * 1024  # bytes per cycle


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def gpu_used_bytes() -> int:
    """Device memory this process holds, as the driver counts it per process (``nvidia-smi``): catches an
    arena, a decoder's surfaces or a buffer a run forgot to give back, whatever else runs on the GPU. Where
    the driver gives no per-process figure, the device's whole use (cudaMemGetInfo), said once."""
    if "cupy" not in sys.modules:  # the CPU backend never imported it: nothing to measure
        return 0
    own = process_gpu_bytes(os.getpid())
    if own is not None:
        return own
    if not DEVICE_WIDE_SAID:
        DEVICE_WIDE_SAID.append(True)
        print("soak: no per-process GPU memory from nvidia-smi; 'gpu used' is the whole device's (other "
              "processes on it count too)")
    free, total = sys.modules["cupy"].cuda.runtime.memGetInfo()
    return total - free


DEVICE_WIDE_SAID: list[bool] = []


def process_gpu_bytes(pid: int) -> int | None:
    """Device memory the driver counts for ``pid``, in bytes; None where nvidia-smi cannot say."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0] == str(pid) and fields[1].isdigit():
            return int(fields[1]) * MIB
    return None


def sample(label: str, memory: dict) -> Sample:
    return Sample(label, rss_bytes(), int(memory.get("pinned_bytes", 0)), int(memory.get("bytes_reserved", 0)),
                  len(os.listdir("/proc/self/fd")), threading.active_count(), gpu_used_bytes(),
                  int(memory.get("host_allocs", 0)) if memory.get("pinned_bytes") else 0)


def show(s: Sample) -> None:
    print(f"{s.label:>14}  rss {s.rss / MIB:8.1f} MiB  pinned {s.pinned / MIB:7.1f} MiB  "
          f"pool {s.pool / MIB:7.1f} MiB  gpu used {s.gpu / MIB:8.1f} MiB  fds {s.fds:4d}  threads {s.threads:3d}",
          flush=True)


def config(src: Path, out: Path | str, device: str, frames: int | None = None) -> RunConfig:
    return RunConfig(input=str(src), output=str(out), device=device, quiet=True, overwrite=True, frames=frames)


def long_run(src: Path, out: Path, device: str, frames: int, every: int) -> list[Sample]:
    """One run of ``frames`` frames, sampled every ``every`` frames from the encode thread."""
    samples: list[Sample] = []
    pipeline = Pipeline.from_config(config(src, out, device, frames))

    def on_frame(stats) -> None:
        if stats.frames_out % every == 0:
            samples.append(sample(f"frame {stats.frames_out}", pipeline.processor.memory.counters()))
            show(samples[-1])

    pipeline.on_frame = on_frame
    stats = pipeline.run()
    if stats.frames_out != frames:
        raise SystemExit(f"soak: long run wrote {stats.frames_out} frames, expected {frames}")
    return samples


def cycles(src: Path, out: Path | str, device: str, count: int, every: int) -> list[tuple[int, Sample]]:
    samples = []
    for i in range(1, count + 1):
        stats = Pipeline.from_config(config(src, out, device)).run()
        if i % every == 0 or i == count:
            samples.append((i, sample(f"cycle {i}", stats.memory)))
            show(samples[-1][1])
    return samples


def rss_slope(samples: list[tuple[int, Sample]], warmup: float) -> list[str]:
    """RSS growth per cycle after warm-up, by least squares over the checkpoints."""
    kept = samples[int(len(samples) * warmup):]
    if len(kept) < 3:
        return []
    xs = [i for i, _ in kept]
    ys = [s.rss for _, s in kept]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    print(f"soak: RSS after warm-up: {slope / 1024:+.2f} KiB per cycle ({slope * 1000 / MIB:+.1f} MiB per 1000)")
    if slope > RSS_SLOPE:
        return [f"RSS rises {slope / 1024:.1f} KiB per cycle after warm-up (allowed {RSS_SLOPE / 1024:g})"]
    return []


def growth(samples: list[Sample], warmup: float) -> list[str]:
    """What grew between the end of warm-up and the end, beyond the tolerance."""
    if len(samples) < 2:
        return []
    base = samples[min(len(samples) - 2, int(len(samples) * warmup))]
    last = samples[-1]
    problems = []
    for key, allowed in TOLERANCE.items():
        grew = getattr(last, key) - getattr(base, key)
        if key == "pinned" and last.slots_added > base.slots_added:
            allowed = grew  # the rings filled further; a ring never passes --ring-size (tests/test_memory.py)
        if grew > allowed:
            problems.append(f"{key} grew by {grew} from {base.label} to {last.label} (allowed {allowed})")
    return problems


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=3000, help="frames in the long run (default: 3000)")
    p.add_argument("--cycles", type=int, default=1000, help="short runs, each opening and closing everything")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--size", default="160x96", help="frame size WxH (default: 160x96)")
    p.add_argument("--warmup", type=float, default=0.25, help="fraction of the checkpoints that is warm-up")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    steady_malloc()
    w, h = (int(v) for v in args.size.lower().split("x"))
    with tempfile.TemporaryDirectory(prefix="soak-") as d:
        d = Path(d)
        print(f"soak: building clips ({args.size}) in {d}", flush=True)
        short = make_clip(d / "short.mp4", width=w, height=h, frames=10, audio=True)
        problems = []
        if args.frames:
            long = make_clip(d / "long.mp4", width=w, height=h, frames=args.frames, audio=True,
                             options={"preset": "ultrafast"})
            print(f"soak: one run of {args.frames} frames", flush=True)
            samples = long_run(long, d / "out_long.mp4", args.device, args.frames, max(1, args.frames // 10))
            problems += [f"long run: {p}" for p in growth(samples, args.warmup)]
        if args.cycles:
            # The pipeline's own memory: decode, host ring, device, download, with no encoder (-o null).
            print(f"soak: {args.cycles} open/run/close cycles, -o null", flush=True)
            samples = cycles(short, "null", args.device, args.cycles, max(1, args.cycles // 20))
            problems += [f"cycles: {p}" for p in growth([s for _, s in samples], args.warmup)]
            problems += [f"cycles: {p}" for p in rss_slope(samples, args.warmup)]
            # And as users run it: libx264 into MP4, beside the threaded decoder.
            print(f"soak: {args.cycles} open/run/close cycles, libx264 into MP4", flush=True)
            samples = cycles(short, d / "out_short.mp4", args.device, args.cycles, max(1, args.cycles // 20))
            problems += [f"cycles with an encoder: {p}" for p in growth([s for _, s in samples], args.warmup)]
            problems += [f"cycles with an encoder: {p}" for p in rss_slope(samples, args.warmup)]
    for problem in problems:
        print(f"soak: FAIL: {problem}", file=sys.stderr)
    if not problems:
        print("soak: ok, nothing grew after warm-up")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
