#!/usr/bin/env python3
"""Per-frame statistics, no video written: ``pipeline.frames`` hands each processed frame to Python.

    python examples/analytics.py samples/sample.mp4            # CSV on stdout: time, brightness, motion

Frames arrive as H x W x 3 uint8 RGB, on the GPU (CuPy) when there is one, else in NumPy: the same
code serves both, because the array module is taken from the frame. Each frame's array is a view into
a pooled buffer, valid until the next one is requested, so the previous frame is kept as a copy.
"""

from __future__ import annotations

import sys

import pipeline


def main(path: str) -> None:
    previous = None
    print("index,time_s,brightness,motion")
    with pipeline.frames(path, filters="gblur=sigma=1") as frames:  # a light blur: motion without noise
        for frame in frames:
            grey = frame.array.mean(axis=2)  # CuPy on CUDA, NumPy on the CPU
            brightness = float(grey.mean()) / 255
            motion = 0.0 if previous is None else float(abs(grey - previous).mean()) / 255
            previous = grey  # a new array: mean() copied it out of the pooled frame
            print(f"{frame.index},{frame.time:.3f},{brightness:.4f},{motion:.4f}")
    stats = frames.stats
    print(f"# {stats.frames_out} frames on {stats.device}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "samples/sample.mp4")
