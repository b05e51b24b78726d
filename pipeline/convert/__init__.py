"""The conversion stages of the processor: frame layouts at its two ends <-> the working planar float RGB.

Between the conversions a frame is (3, H, W) float32 RGB in [0, 1] (what filters and a user's stage see).
At the ends it has a *layout*:

- ``i420``: 8-bit YUV 4:2:0, Y then U then V, tightly packed (what decoders give and encoders take),
  BT.601/BT.709/BT.2020 matrices in limited or full range;
- ``i420p10``: the same with 10-bit samples, uint16 holding 0..1023 (``yuv420p10le``): deeper input in,
  10-bit output out (limited range Y = 64 + 876 Y', C = 512 + 896 C'; full range 0..1023);
- ``rgb24``: packed H x W x 3 uint8 RGB (frames handed to Python, frames a user's own source gives, RGB and
  grey inputs such as PNG);
- ``nv12`` and ``p010``: a hardware decoder's surfaces in device memory, (Y, interleaved UV) planes with
  padded rows, read in place (no upload, no copy); P010 is uint16 with each 10-bit sample in the high bits.

The CPU (NumPy, :mod:`.reference`) and CUDA (:mod:`.kernels`) versions use the same float32 constants and
the same order of operations, and the kernels use ``__fmul_rn``/``__fadd_rn`` so the compiler cannot fuse
them into FMAs: both give the same bits, which keeps the CPU backend a faithful reference for the GPU.
Pointwise filters at the ends of the chain can run inside the conversion kernels (``fused``): a full read
and write of the float frame saved per filter, bit-identical to running them separately.

:func:`converter` binds a conversion once per run (kernel compiled, constants and launch geometry
computed), so the per-frame call is one launch.
"""

from __future__ import annotations

from ..video import VideoFormat
from .kernels import Convert, cuda_from_rgb, cuda_to_rgb
from .layouts import (DEVICE_LAYOUTS, INPUT_ONLY, LAYOUTS, YuvCoefficients, check_layout, layout_depth,
                      layout_dtype, layout_nbytes, layout_shape)
from .reference import (CPU_IN, CPU_OUT, i420_to_rgb_cpu, i420p10_to_rgb_cpu, nv12_to_rgb_cpu, p010_to_rgb_cpu,
                        rgb24_to_rgb_cpu, rgb_to_i420_cpu, rgb_to_i420p10_cpu, rgb_to_rgb24_cpu)

__all__ = ["DEVICE_LAYOUTS", "INPUT_ONLY", "LAYOUTS", "Convert", "YuvCoefficients", "converter", "from_rgb_cuda",
           "i420_to_rgb_cpu", "i420p10_to_rgb_cpu", "layout_depth", "layout_dtype", "layout_nbytes",
           "layout_shape", "nv12_to_rgb_cpu", "p010_to_rgb_cpu", "rgb24_to_rgb_cpu", "rgb_to_i420_cpu",
           "rgb_to_i420p10_cpu", "rgb_to_rgb24_cpu", "to_rgb_cuda"]


def converter(direction: str, layout: str, fmt: VideoFormat, backend: str, fused: tuple = ()) -> Convert:
    """A bound conversion ``(src, dst)``: ``direction`` "to_rgb" (layout -> planar RGB) or "from_rgb".

    ``fused``: pointwise filters run inside the kernel (CUDA only; after the conversion to RGB, before
    the conversion from it). The CPU reference never fuses: the processor runs those filters itself.
    """
    check_layout(layout)
    if backend == "cuda":
        make = cuda_to_rgb if direction == "to_rgb" else cuda_from_rgb
        return make(layout, fmt, tuple(fused))
    if fused:
        raise ValueError("the CPU conversions do not fuse filters")
    table = CPU_IN if direction == "to_rgb" else CPU_OUT
    if layout not in table:
        raise ValueError(f"the {layout} layout is an input only")
    function = table[layout]
    return lambda src, dst: function(src, fmt, dst)


# Direct forms, for tests and tools: one conversion on the current stream (CUDA) or at once (CPU).

def to_rgb_cuda(layout: str, src, fmt: VideoFormat, rgb, fused: tuple = ()) -> None:
    converter("to_rgb", layout, fmt, "cuda", fused)(src, rgb)


def from_rgb_cuda(layout: str, rgb, fmt: VideoFormat, dst, fused: tuple = ()) -> None:
    converter("from_rgb", layout, fmt, "cuda", fused)(rgb, dst)
