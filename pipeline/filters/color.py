"""YUV 4:2:0 <-> planar float RGB, for BT.601/BT.709 in limited or full range.

The CPU (NumPy) and CUDA versions use the same float32 constants and the same order of operations,
and the kernels use ``__fmul_rn``/``__fadd_rn`` so the compiler cannot fuse them into FMAs: both give
the same bits, which keeps the CPU backend a faithful reference for the GPU.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..frames import Colour, VideoFormat
from ..gpu.cuda import i32, launch_2d, raw_kernel
from .fuse import POINTWISE_PRELUDE as _PRELUDE
from .fuse import pointwise_body


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


_F = np.float32


def _to_u8(v: np.ndarray, out: np.ndarray) -> None:
    np.clip(np.floor(v + _F(0.5)), 0, 255, out=v)
    out[...] = v


def yuv_to_rgb_cpu(yuv: np.ndarray, fmt: VideoFormat, rgb: np.ndarray) -> None:
    """I420 uint8 (flat) -> (3, H, W) float32 in [0, 1]; chroma is repeated over each 2x2 block."""
    k = YuvCoefficients.of(fmt.colour)
    y, u, v = fmt.planes(yuv)
    yp = (y.astype(_F) - k.y_off) * k.y_inv
    cb = ((u.astype(_F) - _F(128)) * k.c_inv).repeat(2, 0).repeat(2, 1)
    cr = ((v.astype(_F) - _F(128)) * k.c_inv).repeat(2, 0).repeat(2, 1)
    np.clip(yp + k.r_cr * cr, 0, 1, out=rgb[0])
    np.clip(yp - k.g_cb * cb - k.g_cr * cr, 0, 1, out=rgb[1])
    np.clip(yp + k.b_cb * cb, 0, 1, out=rgb[2])


def rgb_to_yuv_cpu(rgb: np.ndarray, fmt: VideoFormat, yuv: np.ndarray) -> None:
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


_YUV2RGB_SRC = r"""
__device__ __forceinline__ float clamp01(float v) { return fminf(fmaxf(v, 0.f), 1.f); }

extern "C" __global__ void NAME(
    const unsigned char* __restrict__ yuv, float* __restrict__ rgb, int w, int h,
    float y_off, float y_inv, float c_inv, float r_cr, float g_cb, float g_cr, float b_cb)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    size_t n = (size_t)w * h;
    size_t i = (size_t)y * w + x;
    size_t ci = (size_t)(y >> 1) * (w >> 1) + (x >> 1);
    const unsigned char* U = yuv + n;
    const unsigned char* V = U + n / 4;
    float yp = __fmul_rn((float)yuv[i] - y_off, y_inv);
    float cb = __fmul_rn((float)U[ci] - 128.f, c_inv);
    float cr = __fmul_rn((float)V[ci] - 128.f, c_inv);
    float r = clamp01(__fadd_rn(yp, __fmul_rn(r_cr, cr)));
    float g = clamp01(__fsub_rn(__fsub_rn(yp, __fmul_rn(g_cb, cb)), __fmul_rn(g_cr, cr)));
    float b = clamp01(__fadd_rn(yp, __fmul_rn(b_cb, cb)));
    POINTWISE
    rgb[i] = r;
    rgb[n + i] = g;
    rgb[2 * n + i] = b;
}
"""

_RGB2YUV_SRC = r"""
__device__ __forceinline__ unsigned char to_u8(float v) {
    return (unsigned char)fminf(fmaxf(floorf(__fadd_rn(v, 0.5f)), 0.f), 255.f);
}
__device__ __forceinline__ float luma(float r, float g, float b, float kr, float kg, float kb) {
    return __fadd_rn(__fadd_rn(__fmul_rn(kr, r), __fmul_rn(kg, g)), __fmul_rn(kb, b));
}

// One thread per 2x2 block: four luma samples and one chroma pair.
extern "C" __global__ void NAME(
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
        POINTWISE
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


def _kernel(template: str, base: str, fused: tuple = ()):
    """The conversion kernel, with the per-pixel statements of pointwise filters folded in.

    Folding the first pointwise filters into YUV->RGB (and the last ones into RGB->YUV) saves a
    full read and write of the float frame per filter run; the arithmetic is the same, so the
    result is bit-identical to running them separately.
    """
    return raw_kernel(*_source(template, base, tuple(fused)))


@functools.lru_cache(maxsize=128)
def _source(template: str, base: str, fused: tuple) -> tuple[str, str]:
    # Keyed by the filter objects themselves: a run's chain is fixed, so this is built once per run.
    body, name = "", base
    if fused:
        body, tag = pointwise_body(list(fused))
        name = f"{base}_{tag}"
    return _PRELUDE + template.replace("NAME", name).replace("POINTWISE", body), name


def yuv_to_rgb_cuda(yuv, fmt: VideoFormat, rgb, then: tuple = ()) -> None:
    """CUDA version of :func:`yuv_to_rgb_cpu`, on the current stream; ``then``: pointwise filters folded in."""
    k = YuvCoefficients.of(fmt.colour)
    kernel = _kernel(_YUV2RGB_SRC, "pipeline_yuv2rgb", then)
    args = (yuv, rgb, i32(fmt.width), i32(fmt.height), k.y_off, k.y_inv, k.c_inv, k.r_cr, k.g_cb, k.g_cr, k.b_cb)
    launch_2d(kernel, fmt.width, fmt.height, args)


def rgb_to_yuv_cuda(rgb, fmt: VideoFormat, yuv, first: tuple = ()) -> None:
    """CUDA version of :func:`rgb_to_yuv_cpu`, on the current stream; ``first``: pointwise filters folded in."""
    k = YuvCoefficients.of(fmt.colour)
    kernel = _kernel(_RGB2YUV_SRC, "pipeline_rgb2yuv", first)
    args = (rgb, yuv, i32(fmt.width), i32(fmt.height), k.y_off, k.y_scale, k.c_scale)
    args += (k.kr, k.kg, k.kb, k.cb_inv, k.cr_inv)
    launch_2d(kernel, fmt.width // 2, fmt.height // 2, args, block=(16, 8))
