#!/usr/bin/env python3
"""Frames from your own code (a camera SDK, a renderer, a generator) through the same pipeline.

    python examples/custom_source.py                  # writes camera.mp4 (5 s of a moving test pattern)

Anything iterable that yields H x W x 3 uint8 RGB arrays is a source; ``pipeline.ArraySource`` adds the
frame rate. The frames are copied into the pinned ring, uploaded on CUDA streams into pooled buffers,
filtered and encoded exactly as a decoded file would be.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import numpy as np

import pipeline


def camera(frames: int, width: int = 640, height: int = 360) -> Iterator[np.ndarray]:
    """A stand-in for a capture callback: a moving gradient with a bright square."""
    x = np.linspace(0, 255, width, dtype=np.float32)
    for i in range(frames):
        frame = np.empty((height, width, 3), np.uint8)
        frame[..., 0] = (x + 4 * i) % 256
        frame[..., 1] = np.linspace(0, 255, height, dtype=np.float32)[:, None]
        frame[..., 2] = 128
        left = (8 * i) % (width - 64)
        frame[140:204, left:left + 64] = 255
        yield frame


def main(output: str = "camera.mp4") -> None:
    source = pipeline.ArraySource(camera(150), fps=30)
    stats = pipeline.run(source, output, filters="unsharp=sigma=1.5:amount=0.8,vignette", overwrite=True)
    print(f"{stats['frames_out']} frames, {stats['fps']:.0f} fps on {stats['device']}: {output}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
