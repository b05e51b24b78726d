"""Filters that move pixels: ``scale``, ``crop``, ``hflip``, ``vflip`` and ``transpose``.

Sizes are checked when the frame plan is built (``output_size``), against the real input size, so a
crop larger than the video is a config error before the first frame. Output sizes are even: the
encoder writes 4:2:0.

``crop``, the flips and ``transpose`` are one CUDA kernel, an integer affine map from output to input
pixel. ``scale`` is two separable passes over per-axis tap tables (index, weight) that the CPU and the
GPU share, summed in the same order, so both give the same bits.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from ..errors import ConfigError
from ..gpu.cuda import cupy, i32, launch_2d, raw_kernel
from ..gpu.kernels import kernel, load, source
from ..video import MAX_SIDE  # an output no later stage takes is refused as a bad argument
from .registry import Filter, Param, register_filter

_AFFINE_SRC = r"""
// dst(x, y) = src(ax * x + bx * y + cx, ay * x + by * y + cy), every plane (blockIdx.z).
extern "C" __global__ void @NAME@(const float* __restrict__ src, float* __restrict__ dst,
    int sw, int sh, int dw, int dh, int ax, int bx, int cx, int ay, int by, int cy)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= dw || y >= dh) return;
    int sx = ax * x + bx * y + cx;
    int sy = ay * x + by * y + cy;
    dst[((size_t)blockIdx.z * dh + y) * dw + x] = src[((size_t)blockIdx.z * sh + sy) * sw + sx];
}
"""


@functools.lru_cache(maxsize=16)
def _affine_kernel(name: str):
    return kernel(_AFFINE_SRC, name)


def affine_copy_cuda(name: str, src, dst, m: tuple[int, int, int, int, int, int]) -> None:
    """Bound by name on first use (the source is the same for every name): no string built per frame."""
    planes, sh, sw = src.shape
    _, dh, dw = dst.shape
    args = (src, dst, i32(sw), i32(sh), i32(dw), i32(dh), *(i32(v) for v in m))
    launch_2d(_affine_kernel(name), dw, dh, args, planes=planes)


def _even_size(name: str, value: int) -> None:
    if value != -1 and (value < 2 or value % 2):
        raise ConfigError(f"{name} must be even and >= 2 (4:2:0 output), or -1; got {value}")


def even_round(v: float) -> int:
    return max(2, 2 * round(v / 2))


# ---------------------------------------------------------------------------------------------------
# scale


def linear_taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """Bilinear weights with half-pixel centres and replicated edges, as OpenCV's INTER_LINEAR."""
    f = (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5
    i0 = np.floor(f)
    t = f - i0
    t[i0 < 0] = 0
    i0[i0 < 0] = 0
    t[i0 >= n_in - 1] = 0
    i0[i0 >= n_in - 1] = n_in - 1
    i0 = i0.astype(np.int32)
    idx = np.stack([i0, np.minimum(i0 + 1, n_in - 1)], axis=1)
    return idx.astype(np.int32), np.stack([1 - t, t], axis=1).astype(np.float32)


def area_taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """Box average over each output pixel's footprint [o s, (o + 1) s) in the input, s = n_in / n_out >= 1."""
    s = n_in / n_out
    k = math.ceil(s) + 1
    idx = np.zeros((n_out, k), np.int32)
    wt = np.zeros((n_out, k), np.float64)
    for o in range(n_out):
        lo, hi = o * s, min((o + 1) * s, n_in)
        for j, i in enumerate(range(math.floor(lo), min(math.ceil(hi), n_in))):
            idx[o, j] = i
            wt[o, j] = min(hi, i + 1) - max(lo, i)
    wt /= wt.sum(axis=1, keepdims=True)
    return idx, wt.astype(np.float32)


@functools.lru_cache(maxsize=32)
def resample_taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """(index, weight) tables of shape (n_out, taps): bilinear when enlarging (or equal), area when shrinking.

    Cached and read-only: every frame of a run resizes between the same two sizes.
    """
    idx, wt = linear_taps(n_in, n_out) if n_out >= n_in else area_taps(n_in, n_out)
    idx.flags.writeable = wt.flags.writeable = False
    return idx, wt


def resample_cpu(src: np.ndarray, dst: np.ndarray, tmp: np.ndarray | None = None) -> None:
    """Resize (C, H, W) ``src`` into ``dst``: horizontal pass, then vertical, accumulating taps in order."""
    _, h_in, w_in = src.shape
    _, h_out, w_out = dst.shape
    xi, xw = resample_taps(w_in, w_out)
    yi, yw = resample_taps(h_in, h_out)
    tmp = np.empty((src.shape[0], h_in, w_out), np.float32) if tmp is None else tmp
    tmp[:] = xw[:, 0] * src[:, :, xi[:, 0]]
    for k in range(1, xi.shape[1]):
        tmp += xw[:, k] * src[:, :, xi[:, k]]
    dst[:] = yw[:, 0, None] * tmp[:, yi[:, 0], :]
    for k in range(1, yi.shape[1]):
        dst += yw[:, k, None] * tmp[:, yi[:, k], :]


_RESAMPLE_SRC = r"""
// Horizontal pass: (planes, h, w_in) -> (planes, h, w_out).
extern "C" __global__ void pipeline_scale_h(const float* __restrict__ src, float* __restrict__ dst,
    const int* __restrict__ idx, const float* __restrict__ wt, int w_in, int w_out, int h, int taps)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w_out || y >= h) return;
    const float* row = src + ((size_t)blockIdx.z * h + y) * w_in;
    float acc = 0.f;
    for (int k = 0; k < taps; ++k)
        acc = __fadd_rn(acc, __fmul_rn(wt[x * taps + k], row[idx[x * taps + k]]));
    dst[((size_t)blockIdx.z * h + y) * w_out + x] = acc;
}

// Vertical pass: (planes, h_in, w) -> (planes, h_out, w).
extern "C" __global__ void pipeline_scale_v(const float* __restrict__ src, float* __restrict__ dst,
    const int* __restrict__ idx, const float* __restrict__ wt, int w, int h_in, int h_out, int taps)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h_out) return;
    const float* plane = src + (size_t)blockIdx.z * h_in * w;
    float acc = 0.f;
    for (int k = 0; k < taps; ++k)
        acc = __fadd_rn(acc, __fmul_rn(wt[y * taps + k], plane[(size_t)idx[y * taps + k] * w + x]));
    dst[((size_t)blockIdx.z * h_out + y) * w + x] = acc;
}
"""


@functools.cache
def _resample_kernels():
    """Both passes from one source, compiled once per process."""
    text = source(_RESAMPLE_SRC, "")
    return raw_kernel(text, "pipeline_scale_h"), raw_kernel(text, "pipeline_scale_v")


@register_filter("scale")
class Scale(Filter):
    help = (
        "Resize: bilinear when enlarging, area average when shrinking (per axis). "
        "Sizes must be even; -1 keeps the aspect ratio, rounded to even (scale=w=1280:h=-1)."
    )
    params = (
        Param("w", int, -1, low=-1, high=MAX_SIDE, help="output width, even, or -1 for the aspect ratio"),
        Param("h", int, -1, low=-1, high=MAX_SIDE, help="output height, even, or -1 for the aspect ratio"),
    )

    def __init__(self, **values):
        super().__init__(**values)
        _even_size("scale: w", self.w)
        _even_size("scale: h", self.h)
        if self.w == -1 and self.h == -1:
            raise ConfigError("scale: give w or h (or both); -1 for both leaves nothing to scale to")
        self._device_tables: dict[tuple, tuple] = {}

    def output_size(self, width, height):
        w = self.w if self.w != -1 else even_round(self.h * width / height)
        h = self.h if self.h != -1 else even_round(self.w * height / width)
        return w, h

    def output_sar(self, sar, width, height):
        """The picture keeps its shape, as FFmpeg's scale keeps it: stretched pixels make up for the sizes."""
        w, h = self.output_size(width, height)
        return sar * Fraction(h * width, w * height)

    def scratch_shapes(self, width, height):
        return [(3, height, self.output_size(width, height)[0])]

    def cpu(self, src, dst, scratch):
        resample_cpu(src, dst, scratch[0] if scratch else None)

    def prepare(self):
        load(*_resample_kernels())

    def _tables(self, n_in: int, n_out: int):
        """Tap tables on the current device, uploaded once per size; waits for the copy (all streams read them)."""
        cp = cupy()
        key = (cp.cuda.runtime.getDevice(), n_in, n_out)
        tables = self._device_tables.get(key)
        if tables is None:
            idx, wt = resample_taps(n_in, n_out)
            tables = (cp.asarray(idx), cp.asarray(wt), idx.shape[1])
            cp.cuda.get_current_stream().synchronize()
            self._device_tables[key] = tables
        return tables

    def cuda(self, src, dst, scratch):
        planes, h_in, w_in = src.shape
        _, h_out, w_out = dst.shape
        tmp = scratch[0]
        xi, xw, xk = self._tables(w_in, w_out)
        yi, yw, yk = self._tables(h_in, h_out)
        kh, kv = _resample_kernels()
        launch_2d(kh, w_out, h_in, (src, tmp, xi, xw, i32(w_in), i32(w_out), i32(h_in), i32(xk)), planes=planes)
        launch_2d(kv, w_out, h_out, (tmp, dst, yi, yw, i32(w_out), i32(h_in), i32(h_out), i32(yk)), planes=planes)


# ---------------------------------------------------------------------------------------------------
# crop, flips, transpose


@register_filter("crop")
class Crop(Filter):
    help = "Cut out a w x h rectangle at (x, y); by default centred. w and h must be even."
    params = (
        Param("w", int, -1, low=-1, high=MAX_SIDE, help="width, even; -1 is the input width"),
        Param("h", int, -1, low=-1, high=MAX_SIDE, help="height, even; -1 is the input height"),
        Param("x", int, -1, low=-1, high=MAX_SIDE, help="left edge; -1 centres the rectangle"),
        Param("y", int, -1, low=-1, high=MAX_SIDE, help="top edge; -1 centres the rectangle"),
    )

    def __init__(self, **values):
        super().__init__(**values)
        _even_size("crop: w", self.w)
        _even_size("crop: h", self.h)

    def rect(self, width: int, height: int) -> tuple[int, int, int, int]:
        """(w, h, x, y) for this input size; a :class:`ConfigError` if it does not fit."""
        w = width if self.w == -1 else self.w
        h = height if self.h == -1 else self.h
        if w > width or h > height:
            raise ConfigError(f"crop: {w}x{h} is larger than the input, {width}x{height}")
        x = (width - w) // 2 if self.x == -1 else self.x
        y = (height - h) // 2 if self.y == -1 else self.y
        if x + w > width:
            raise ConfigError(f"crop: x + w = {x} + {w} exceeds the input width {width}")
        if y + h > height:
            raise ConfigError(f"crop: y + h = {y} + {h} exceeds the input height {height}")
        return w, h, x, y

    def output_size(self, width, height):
        return self.rect(width, height)[:2]

    def cpu(self, src, dst, scratch):
        w, h, x, y = self.rect(src.shape[2], src.shape[1])
        dst[:] = src[:, y : y + h, x : x + w]

    def cuda(self, src, dst, scratch):
        _, _, x, y = self.rect(src.shape[2], src.shape[1])
        affine_copy_cuda("pipeline_crop", src, dst, (1, 0, x, 0, 1, y))

    def prepare(self):
        load(_affine_kernel("pipeline_crop"))


@register_filter("hflip")
class HFlip(Filter):
    help = "Mirror left-right."

    def cpu(self, src, dst, scratch):
        dst[:] = src[:, :, ::-1]

    def cuda(self, src, dst, scratch):
        affine_copy_cuda("pipeline_hflip", src, dst, (-1, 0, src.shape[2] - 1, 0, 1, 0))

    def prepare(self):
        load(_affine_kernel("pipeline_hflip"))


@register_filter("vflip")
class VFlip(Filter):
    help = "Mirror top-bottom."

    def cpu(self, src, dst, scratch):
        dst[:] = src[:, ::-1, :]

    def cuda(self, src, dst, scratch):
        affine_copy_cuda("pipeline_vflip", src, dst, (1, 0, 0, 0, -1, src.shape[1] - 1))

    def prepare(self):
        load(_affine_kernel("pipeline_vflip"))


@register_filter("transpose")
class Transpose(Filter):
    help = "Rotate by 90 degrees, clockwise (dir=clock) or counter-clockwise (dir=cclock); swaps width and height."
    params = (Param("dir", str, "clock", choices=("clock", "cclock"), help="direction of the rotation"),)

    def output_size(self, width, height):
        return height, width

    def output_sar(self, sar, width, height):
        return 1 / sar  # a pixel twice as wide as tall is, turned, twice as tall as wide

    def cpu(self, src, dst, scratch):
        dst[:] = np.rot90(src, k=-1 if self.dir == "clock" else 1, axes=(1, 2))

    def cuda(self, src, dst, scratch):
        _, h, w = src.shape
        if self.dir == "clock":  # dst(x, y) = src(y, h - 1 - x)
            affine_copy_cuda("pipeline_transpose_clock", src, dst, (0, 1, 0, -1, 0, h - 1))
        else:  # dst(x, y) = src(w - 1 - y, x)
            affine_copy_cuda("pipeline_transpose_cclock", src, dst, (0, -1, w - 1, 1, 0, 0))

    def prepare(self):
        load(_affine_kernel(f"pipeline_transpose_{self.dir}"))
