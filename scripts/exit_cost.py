#!/usr/bin/env python3
"""What leaving a process costs on this machine, with and without what a GPU run leaves behind.

    python scripts/exit_cost.py [--clip PATH] [--repeats 3]

Each case is a fresh ``python -c`` that sets something up, writes ``time.monotonic()`` just before it leaves
(``os._exit``, or the interpreter's normal exit), and the parent takes the same clock when its wait returns:
the difference is what the exit itself cost, the kernel's tear-down of the process included. Cases: no
CUDA; a CUDA context (CuPy); with 4 GiB of device memory; with 256 MiB of pinned host memory; an NVDEC
decoder (PyAV, 60 1080p frames held) left to the exit, and the same decoder closed first (its close timed
on its own). Needs CuPy and a GPU with NVDEC; the clip defaults to a 1080p60 one made on first use.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = "import time as _t, sys as _s; _s.stdout.write(repr(_t.monotonic())); _s.stdout.flush()"
NVDEC = ("import av, os, time; from av.codec.hwaccel import HWAccel; "
         "c = av.open({clip!r}, hwaccel=HWAccel(device_type='cuda', allow_software_fallback=False, is_hw_owned=True)); "
         "frames = [f for _, f in zip(range(60), c.decode(video=0))]; ")
CLOSE = ("t0 = time.monotonic(); del frames; c.close(); "
         "sys.stderr.write('close %.1f ms' % ((time.monotonic() - t0) * 1e3)); ")


def cases(clip: str) -> dict[str, str]:
    context = "import cupy, os; cupy.zeros(1); cupy.cuda.Device().synchronize(); "
    return {
        "no CUDA, os._exit": f"import os; {MARK}; os._exit(0)",
        "CUDA context, os._exit": f"{context}{MARK}; os._exit(0)",
        "CUDA context + 4 GiB, os._exit": f"{context}a = cupy.zeros(1 << 30, cupy.float32); "
                                          f"cupy.cuda.Device().synchronize(); {MARK}; os._exit(0)",
        "CUDA context + 256 MiB pinned, os._exit": f"{context}import cupyx; "
                                                   f"p = [cupyx.empty_pinned((1 << 24,), 'uint8') for _ in range(16)]; "
                                                   f"{MARK}; os._exit(0)",
        "CUDA context, normal exit": f"{context}{MARK}",
        "NVDEC decoder, 60 frames held, os._exit": f"{NVDEC.format(clip=clip)}{MARK}; os._exit(0)",
        "NVDEC decoder closed first, os._exit": f"import sys; {NVDEC.format(clip=clip)}{CLOSE}{MARK}; os._exit(0)",
    }


def measure(code: str, repeats: int) -> tuple[list[float], str]:
    costs, note = [], ""
    for _ in range(repeats):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        done = time.monotonic()
        if proc.returncode != 0:
            return [], (proc.stderr.strip().splitlines() or ["failed"])[-1]
        costs.append((done - float(proc.stdout.strip())) * 1e3)
        note = proc.stderr.strip()
    return costs, note


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clip", help="an H.264 clip NVDEC takes (default: a 1080p60 one, made on first use)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    clip = args.clip
    if clip is None:
        sys.path.insert(0, str(ROOT))
        from pipeline.sample import make_clip

        clip = str(Path(tempfile.gettempdir()) / "exit_cost_1080p.mp4")
        if not Path(clip).exists():
            make_clip(clip, width=1920, height=1080, fps=60, frames=120, audio=False, seed=3)
    print("| case | exit ms (median) | runs | note |\n|---|---:|---|---|")
    for name, code in cases(clip).items():
        costs, note = measure(code, args.repeats)
        if not costs:
            print(f"| {name} | error | | {note} |")
            continue
        print(f"| {name} | {statistics.median(costs):.1f} | {', '.join(f'{c:.0f}' for c in costs)} | {note} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
