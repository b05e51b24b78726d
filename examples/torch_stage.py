#!/usr/bin/env python3
"""A PyTorch op as your own stage of the pipeline, zero-copy through DLPack, on the frame's CUDA stream.

    python examples/torch_stage.py samples/sample.mp4 sharpened.mp4

``stage(frame)`` runs once per frame, after the filter chain and before the conversion back to YUV.
``frame.planes`` is the working (3, H, W) float32 RGB in [0, 1], writable in place: ``torch.from_dlpack``
wraps the same device memory, and running the op on ``frame.stream`` (the stream that frame's upload
and kernels are queued on) keeps it in order with them, with no synchronisation of the device.
On a machine without a GPU the same code runs on the CPU backend (NumPy planes, CPU tensors).
"""

from __future__ import annotations

import contextlib
import sys

import torch
import torch.nn.functional as F

import pipeline

# A 3x3 sharpening kernel, one per channel (groups=3).
SHARPEN = torch.tensor([[0.0, -1.0, 0.0], [-1.0, 5.0, -1.0], [0.0, -1.0, 0.0]]).expand(3, 1, 3, 3)


def torch_stream(frame):
    """The frame's CUDA stream as PyTorch's current stream (nothing to do on the CPU)."""
    if frame.stream is None:
        return contextlib.nullcontext()
    return torch.cuda.stream(torch.cuda.ExternalStream(frame.stream.ptr))


def sharpen(frame) -> None:
    with torch_stream(frame):
        planes = torch.from_dlpack(frame.planes)  # (3, H, W), the pipeline's own buffer: no copy
        weight = SHARPEN.to(planes.device)
        out = F.conv2d(F.pad(planes[None], (1, 1, 1, 1), mode="replicate"), weight, groups=3)[0]
        planes.copy_(out.clamp_(0, 1))  # in place: the conversion back reads this buffer next


def main(src: str, dst: str) -> None:
    stats = pipeline.run(src, dst, filters="gblur=sigma=0.8", stage=sharpen, overwrite=True)
    print(f"{stats['frames_out']} frames through torch on {stats['device']} at {stats['fps']:.0f} fps "
          f"({stats['memory']['device_allocs']} device allocation for the pipeline's buffers): {dst}")


if __name__ == "__main__":
    main(*(sys.argv[1:3] if len(sys.argv) > 2 else ("samples/sample.mp4", "sharpened.mp4")))
