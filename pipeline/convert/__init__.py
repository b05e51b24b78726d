"""The conversion stages of the processor: frame layouts at its two ends <-> the working planar float RGB.

Between the conversions a frame is (3, H, W) float32 RGB in [0, 1] (what filters and a user's stage see).
At the ends it has a *layout*:

- ``i420``: 8-bit YUV 4:2:0, Y then U then V, tightly packed (what decoders give and encoders take),
  BT.601/BT.709/BT.2020 matrices in limited or full range;
- ``rgb24``: packed H x W x 3 uint8 RGB (frames handed to Python, frames a user's own source gives);
- ``nv12``: a hardware decoder's surfaces in device memory, (Y, interleaved UV) planes with padded rows,
  read in place (no upload, no copy).

The CPU (NumPy) and CUDA versions use the same float32 constants and the same order of operations, and
the kernels use ``__fmul_rn``/``__fadd_rn`` so the compiler cannot fuse them into FMAs: both give the same
bits, which keeps the CPU backend a faithful reference for the GPU. Pointwise filters at the ends of the
chain can run inside the conversion kernels (``fused``): a full read and write of the float frame saved
per filter, bit-identical to running them separately.

:func:`converter` binds a conversion once per run (kernel compiled, constants and launch geometry
computed), so the per-frame call is one launch.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .gpu.cuda import i32
from .video import Colour, VideoFormat

LAYOUTS = ("i420", "rgb24", "nv12")
DEVICE_LAYOUTS = frozenset({"nv12"})  # frames already in device memory (a hardware decoder's surfaces)

Convert = Callable[[Any, Any], None]  # (src, dst) on the current stream


def layout_nbytes(layout: str, fmt: VideoFormat) -> int:
    if layout in ("i420", "nv12"):
        return fmt.nbytes
    if layout == "rgb24":
        return fmt.width * fmt.height * 3
    raise ValueError(f"Invalid frame layout ({layout!r}). Supported values are {', '.join(LAYOUTS)}.")


def layout_shape(layout: str, fmt: VideoFormat) -> tuple[int, ...]:
    """The shape a consumer sees: I420 as PyAV's ``from_numpy_buffer`` takes it, RGB24 as H x W x 3."""
    return fmt.shape if layout == "i420" else (fmt.height, fmt.width, 3)


@dataclass(frozen=True)
class YuvCoefficients:
    """float32 constants for one colour matrix and range."""

    y_off: np.float32  # 16 or 0
    y_scale: np.float32  # 219 or 255 (RGB -> YUV)
    c_scale: np.float32  # 224 or 255
    y_inv: np.float32  # 1 / y_scale
    c_inv: np.float32
    kr: np.float32
    kg: np.float32
    kb: np.float32
    r_cr: np.float32  # R = Y' + r_cr Cr'
    g_cb: np.float32  # G = Y' - g_cb Cb' - g_cr Cr'
    g_cr: np.float32
    b_cb: np.float32  # B = Y' + b_cb Cb'
    cb_inv: np.float32  # Cb' = (B' - Y') * cb_inv
    cr_inv: np.float32

    @classmethod
    @functools.cache
    def of(cls, colour: Colour) -> YuvCoefficients:
        kr, kb = colour.coefficients
        kg = 1.0 - kr - kb
        y_scale, c_scale = (255.0, 255.0) if colour.full_range else (219.0, 224.0)
        c = np.float32
        return cls(
            y_off=c(0.0 if colour.full_range else 16.0),
            y_scale=c(y_scale),
            c_scale=c(c_scale),
            y_inv=c(1.0 / y_scale),
            c_inv=c(1.0 / c_scale),
            kr=c(kr),
            kg=c(kg),
            kb=c(kb),
            r_cr=c(2 * (1 - kr)),
            g_cb=c(2 * kb * (1 - kb) / kg),
            g_cr=c(2 * kr * (1 - kr) / kg),
            b_cb=c(2 * (1 - kb)),
            cb_inv=c(1 / (2 - 2 * kb)),
            cr_inv=c(1 / (2 - 2 * kr)),
        )


# -- CPU references ---------------------------------------------------------------------------------

_F = np.float32
_INV255 = _F(1.0 / 255.0)


def _to_u8(v: np.ndarray, out: np.ndarray) -> None:
    np.clip(np.floor(v + _F(0.5)), 0, 255, out=v)
    out[...] = v


def i420_to_rgb_cpu(yuv: np.ndarray, fmt: VideoFormat, rgb: np.ndarray) -> None:
    """I420 uint8 (flat) -> (3, H, W) float32 in [0, 1]; chroma is repeated over each 2x2 block."""
    k = YuvCoefficients.of(fmt.colour)
    y, u, v = fmt.planes(yuv)
    yp = (y.astype(_F) - k.y_off) * k.y_inv
    cb = ((u.astype(_F) - _F(128)) * k.c_inv).repeat(2, 0).repeat(2, 1)
    cr = ((v.astype(_F) - _F(128)) * k.c_inv).repeat(2, 0).repeat(2, 1)
    np.clip(yp + k.r_cr * cr, 0, 1, out=rgb[0])
    np.clip(yp - k.g_cb * cb - k.g_cr * cr, 0, 1, out=rgb[1])
    np.clip(yp + k.b_cb * cb, 0, 1, out=rgb[2])


def rgb_to_i420_cpu(rgb: np.ndarray, fmt: VideoFormat, yuv: np.ndarray) -> None:
    """(3, H, W) float32 -> I420 uint8 (flat); chroma from the mean of each 2x2 block."""
    k = YuvCoefficients.of(fmt.colour)
    y, u, v = fmt.planes(yuv)
    r, g, b = rgb[0], rgb[1], rgb[2]
    _to_u8(k.y_off + k.y_scale * (k.kr * r + k.kg * g + k.kb * b), y)
    ra, ga, ba = (_mean_2x2(c) for c in (r, g, b))
    lum = k.kr * ra + k.kg * ga + k.kb * ba
    _to_u8(_F(128) + k.c_scale * ((ba - lum) * k.cb_inv), u)
    _to_u8(_F(128) + k.c_scale * ((ra - lum) * k.cr_inv), v)


def _mean_2x2(c: np.ndarray) -> np.ndarray:
    return ((c[0::2, 0::2] + c[0::2, 1::2]) + (c[1::2, 0::2] + c[1::2, 1::2])) * _F(0.25)


def rgb24_to_rgb_cpu(packed: np.ndarray, fmt: VideoFormat, rgb: np.ndarray) -> None:
    """Packed uint8 RGB (flat or H x W x 3) -> (3, H, W) float32: value / 255."""
    hwc = packed.reshape(fmt.height, fmt.width, 3)
    for c in range(3):
        np.multiply(hwc[:, :, c], _INV255, out=rgb[c], dtype=_F)


def rgb_to_rgb24_cpu(rgb: np.ndarray, fmt: VideoFormat, packed: np.ndarray) -> None:
    """(3, H, W) float32 -> packed uint8 RGB: round(clamp(v, 0, 1) * 255)."""
    hwc = packed.reshape(fmt.height, fmt.width, 3)
    for c in range(3):
        v = np.clip(rgb[c], 0, 1) * _F(255)
        _to_u8(v, hwc[:, :, c])


def nv12_to_rgb_cpu(planes: tuple[np.ndarray, np.ndarray], fmt: VideoFormat, rgb: np.ndarray) -> None:
    """(Y (H, >= W), UV (H/2, >= W/2, 2)) with padded rows -> (3, H, W) float32: the I420 reference on the
    same samples (what the CUDA kernel reads in place)."""
    y, uv = planes
    w, h = fmt.width, fmt.height
    i420 = np.concatenate([y[:h, :w].ravel(), uv[: h // 2, : w // 2, 0].ravel(), uv[: h // 2, : w // 2, 1].ravel()])
    i420_to_rgb_cpu(i420, fmt, rgb)


_CPU_IN = {"i420": i420_to_rgb_cpu, "rgb24": rgb24_to_rgb_cpu, "nv12": nv12_to_rgb_cpu}
_CPU_OUT = {"i420": rgb_to_i420_cpu, "rgb24": rgb_to_rgb24_cpu}


# -- CUDA kernels -------------------------------------------------------------------------------------

# YUV 4:2:0 -> planar RGB; @SRC@ declares the source planes and @LOAD@ reads the three samples of (x, y).
_YUV_TO_RGB = r"""
extern "C" __global__ void @NAME@(
    @SRC@, float* __restrict__ rgb, int w, int h,
    float y_off, float y_inv, float c_inv, float r_cr, float g_cb, float g_cr, float b_cb)
{
    PIPELINE_XY(w, h)
    size_t n = (size_t)w * h;
    size_t i = (size_t)y * w + x;
    @LOAD@
    float yp = __fmul_rn(Ys - y_off, y_inv);
    float cb = __fmul_rn(Us - 128.f, c_inv);
    float cr = __fmul_rn(Vs - 128.f, c_inv);
    float r = clamp01(__fadd_rn(yp, __fmul_rn(r_cr, cr)));
    float g = clamp01(__fsub_rn(__fsub_rn(yp, __fmul_rn(g_cb, cb)), __fmul_rn(g_cr, cr)));
    float b = clamp01(__fadd_rn(yp, __fmul_rn(b_cb, cb)));
    @POINTWISE@
    rgb[i] = r;
    rgb[n + i] = g;
    rgb[2 * n + i] = b;
}
"""

# I420: one flat buffer, Y then U then V, no padding.
_I420_SRC = "const unsigned char* __restrict__ yuv"
_I420_LOAD = r"""size_t ci = (size_t)(y >> 1) * (w >> 1) + (x >> 1);
    const unsigned char* U = yuv + n;
    const unsigned char* V = U + n / 4;
    float Ys = (float)yuv[i], Us = (float)U[ci], Vs = (float)V[ci];"""

# NV12 surfaces as a decoder leaves them in device memory: Y and interleaved UV planes, rows padded to a pitch.
_NV12_SRC = ("const unsigned char* __restrict__ Yp, const unsigned char* __restrict__ UVp, int pitch_y, "
             "int pitch_uv")
_NV12_LOAD = r"""const unsigned char* uv = UVp + (size_t)(y >> 1) * pitch_uv + 2 * (x >> 1);
    float Ys = (float)Yp[(size_t)y * pitch_y + x], Us = (float)uv[0], Vs = (float)uv[1];"""

_U8 = r"""
__device__ __forceinline__ unsigned char to_u8(float v) {
    return (unsigned char)fminf(fmaxf(floorf(__fadd_rn(v, 0.5f)), 0.f), 255.f);
}
"""

_RGB_TO_I420 = _U8 + r"""
// One thread per 2x2 block: four luma samples and one chroma pair.
extern "C" __global__ void @NAME@(
    const float* __restrict__ rgb, unsigned char* __restrict__ yuv, int w, int h,
    float y_off, float y_scale, float c_scale, float kr, float kg, float kb, float cb_inv, float cr_inv)
{
    int cx = blockIdx.x * blockDim.x + threadIdx.x;
    int cy = blockIdx.y * blockDim.y + threadIdx.y;
    if (cx >= w / 2 || cy >= h / 2) return;
    size_t n = (size_t)w * h;
    float rs[4], gs[4], bs[4];
    for (int k = 0; k < 4; ++k) {
        int x = 2 * cx + (k & 1), y = 2 * cy + (k >> 1);
        size_t i = (size_t)y * w + x;
        float r = rgb[i], g = rgb[n + i], b = rgb[2 * n + i];
        @POINTWISE@
        rs[k] = r; gs[k] = g; bs[k] = b;
        yuv[i] = to_u8(__fadd_rn(y_off, __fmul_rn(y_scale, luma(rs[k], gs[k], bs[k], kr, kg, kb))));
    }
    float ra = __fmul_rn(__fadd_rn(__fadd_rn(rs[0], rs[1]), __fadd_rn(rs[2], rs[3])), 0.25f);
    float ga = __fmul_rn(__fadd_rn(__fadd_rn(gs[0], gs[1]), __fadd_rn(gs[2], gs[3])), 0.25f);
    float ba = __fmul_rn(__fadd_rn(__fadd_rn(bs[0], bs[1]), __fadd_rn(bs[2], bs[3])), 0.25f);
    float lum = luma(ra, ga, ba, kr, kg, kb);
    size_t ci = (size_t)cy * (w / 2) + cx;
    yuv[n + ci] = to_u8(__fadd_rn(128.f, __fmul_rn(c_scale, __fmul_rn(__fsub_rn(ba, lum), cb_inv))));
    yuv[n + n / 4 + ci] = to_u8(__fadd_rn(128.f, __fmul_rn(c_scale, __fmul_rn(__fsub_rn(ra, lum), cr_inv))));
}
"""

_RGB24_TO_RGB = r"""
extern "C" __global__ void @NAME@(const unsigned char* __restrict__ packed, float* __restrict__ rgb, int w, int h)
{
    PIPELINE_XY(w, h)
    size_t n = (size_t)w * h;
    size_t i = (size_t)y * w + x;
    const float inv = @INV255@;
    float r = __fmul_rn((float)packed[3 * i], inv);
    float g = __fmul_rn((float)packed[3 * i + 1], inv);
    float b = __fmul_rn((float)packed[3 * i + 2], inv);
    @POINTWISE@
    rgb[i] = r;
    rgb[n + i] = g;
    rgb[2 * n + i] = b;
}
"""

_RGB_TO_RGB24 = _U8 + r"""
extern "C" __global__ void @NAME@(const float* __restrict__ rgb, unsigned char* __restrict__ packed, int w, int h)
{
    PIPELINE_XY(w, h)
    size_t n = (size_t)w * h;
    size_t i = (size_t)y * w + x;
    float r = rgb[i], g = rgb[n + i], b = rgb[2 * n + i];
    @POINTWISE@
    packed[3 * i] = to_u8(__fmul_rn(clamp01(r), 255.f));
    packed[3 * i + 1] = to_u8(__fmul_rn(clamp01(g), 255.f));
    packed[3 * i + 2] = to_u8(__fmul_rn(clamp01(b), 255.f));
}
"""


@functools.lru_cache(maxsize=128)
def _cuda_kernel(template: str, base: str, fused: tuple, **values: str) -> Any:
    """The conversion kernel with the per-pixel statements of ``fused`` pointwise filters folded in.

    Keyed by the filter objects themselves: a run's chain is fixed, so this compiles once per run.
    """
    from .filters.fuse import pointwise_body
    from .gpu.cuda import float_literal
    from .gpu.kernels import kernel, load

    body, name = "", base
    if fused:
        body, tag = pointwise_body(list(fused))
        name = f"{base}_{tag}"
    k = kernel(template, name, POINTWISE=body, INV255=float_literal(1.0 / 255.0), **values)
    load(k)  # at set-up, not at the first frame
    return k


def _grid(w: int, h: int, block: tuple[int, int]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    return ((w + block[0] - 1) // block[0], (h + block[1] - 1) // block[1], 1), (*block, 1)


def _cuda_to_rgb(layout: str, fmt: VideoFormat, fused: tuple) -> Convert:
    w, h = i32(fmt.width), i32(fmt.height)
    grid, block = _grid(fmt.width, fmt.height, (32, 8))
    if layout == "rgb24":
        kernel = _cuda_kernel(_RGB24_TO_RGB, "pipeline_rgb24_to_rgb", fused)
        return lambda src, dst: kernel(grid, block, (src, dst, w, h))
    k = YuvCoefficients.of(fmt.colour)
    consts = (w, h, k.y_off, k.y_inv, k.c_inv, k.r_cr, k.g_cb, k.g_cr, k.b_cb)
    if layout == "i420":
        kernel = _cuda_kernel(_YUV_TO_RGB, "pipeline_i420_to_rgb", fused, SRC=_I420_SRC, LOAD=_I420_LOAD)
        return lambda src, dst: kernel(grid, block, (src, dst, *consts))
    kernel = _cuda_kernel(_YUV_TO_RGB, "pipeline_nv12_to_rgb", fused, SRC=_NV12_SRC, LOAD=_NV12_LOAD)

    def nv12(planes, dst) -> None:
        y, uv = planes  # read in place: rows padded to each plane's pitch
        kernel(grid, block, (y, uv, i32(y.strides[0]), i32(uv.strides[0]), dst, *consts))

    return nv12


def _cuda_from_rgb(layout: str, fmt: VideoFormat, fused: tuple) -> Convert:
    if layout == "nv12":
        raise ValueError("the nv12 layout is an input only")
    w, h = i32(fmt.width), i32(fmt.height)
    if layout == "i420":
        k = YuvCoefficients.of(fmt.colour)
        kernel = _cuda_kernel(_RGB_TO_I420, "pipeline_rgb_to_i420", fused)
        consts = (w, h, k.y_off, k.y_scale, k.c_scale, k.kr, k.kg, k.kb, k.cb_inv, k.cr_inv)
        grid, block = _grid(fmt.width // 2, fmt.height // 2, (16, 8))
    else:
        kernel = _cuda_kernel(_RGB_TO_RGB24, "pipeline_rgb_to_rgb24", fused)
        consts = (w, h)
        grid, block = _grid(fmt.width, fmt.height, (32, 8))
    return lambda src, dst: kernel(grid, block, (src, dst, *consts))


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"Invalid frame layout ({layout!r}). Supported values are {', '.join(LAYOUTS)}.")


def converter(direction: str, layout: str, fmt: VideoFormat, backend: str, fused: tuple = ()) -> Convert:
    """A bound conversion ``(src, dst)``: ``direction`` "to_rgb" (layout -> planar RGB) or "from_rgb".

    ``fused``: pointwise filters run inside the kernel (CUDA only; after the conversion to RGB, before
    the conversion from it). The CPU reference never fuses: the processor runs those filters itself.
    """
    _check_layout(layout)
    if backend == "cuda":
        make = _cuda_to_rgb if direction == "to_rgb" else _cuda_from_rgb
        return make(layout, fmt, tuple(fused))
    if fused:
        raise ValueError("the CPU conversions do not fuse filters")
    table = _CPU_IN if direction == "to_rgb" else _CPU_OUT
    if layout not in table:
        raise ValueError(f"the {layout} layout is an input only")
    function = table[layout]
    return lambda src, dst: function(src, fmt, dst)


# Direct forms, for tests and tools: one conversion on the current stream (CUDA) or at once (CPU).

def to_rgb_cuda(layout: str, src, fmt: VideoFormat, rgb, fused: tuple = ()) -> None:
    converter("to_rgb", layout, fmt, "cuda", fused)(src, rgb)


def from_rgb_cuda(layout: str, rgb, fmt: VideoFormat, dst, fused: tuple = ()) -> None:
    converter("from_rgb", layout, fmt, "cuda", fused)(rgb, dst)
