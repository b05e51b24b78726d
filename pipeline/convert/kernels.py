"""The CUDA conversions: one template per direction, rendered per layout (sample type, how planes are read,
the code of zero chroma and the largest code), with pointwise filters folded in (``@POINTWISE@``).

Each step is one ``__fmul_rn``/``__fadd_rn``/``__fsub_rn`` (no FMA contraction) in the order the NumPy
reference (:mod:`.reference`) computes it, so both give the same bits.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from ..gpu.cuda import i32
from ..video import VideoFormat
from .layouts import YuvCoefficients, layout_depth

Convert = Callable[[Any, Any], None]  # (src, dst) on the current stream

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
    float cb = __fmul_rn(Us - @C_OFF@, c_inv);
    float cr = __fmul_rn(Vs - @C_OFF@, c_inv);
    float r = clamp01(__fadd_rn(yp, __fmul_rn(r_cr, cr)));
    float g = clamp01(__fsub_rn(__fsub_rn(yp, __fmul_rn(g_cb, cb)), __fmul_rn(g_cr, cr)));
    float b = clamp01(__fadd_rn(yp, __fmul_rn(b_cb, cb)));
    @POINTWISE@
    rgb[i] = r;
    rgb[n + i] = g;
    rgb[2 * n + i] = b;
}
"""

# I420: one flat buffer, Y then U then V, no padding; @T@ is the sample type.
_I420_SRC = "const @T@* __restrict__ yuv"
_I420_LOAD = r"""size_t ci = (size_t)(y >> 1) * (w >> 1) + (x >> 1);
    const @T@* U = yuv + n;
    const @T@* V = U + n / 4;
    float Ys = (float)yuv[i], Us = (float)U[ci], Vs = (float)V[ci];"""

# NV12/P010 surfaces as a decoder leaves them in device memory: Y and interleaved UV planes, rows padded to a
# pitch (in samples); P010 holds each 10-bit sample in the high bits of a uint16 (@SHIFT@ is 6, NV12's 0).
_SEMI_SRC = "const @T@* __restrict__ Yp, const @T@* __restrict__ UVp, int pitch_y, int pitch_uv"
_SEMI_LOAD = r"""const @T@* uv = UVp + (size_t)(y >> 1) * pitch_uv + 2 * (x >> 1);
    float Ys = (float)(Yp[(size_t)y * pitch_y + x] >> @SHIFT@), Us = (float)(uv[0] >> @SHIFT@),
          Vs = (float)(uv[1] >> @SHIFT@);"""

_U8 = r"""
__device__ __forceinline__ unsigned char to_u8(float v) {
    return (unsigned char)fminf(fmaxf(floorf(__fadd_rn(v, 0.5f)), 0.f), 255.f);
}
"""

# round(v) clamped to [0, @TOP@], as the sample type.
_CODE = r"""
__device__ __forceinline__ @T@ to_code(float v) {
    return (@T@)fminf(fmaxf(floorf(__fadd_rn(v, 0.5f)), 0.f), @TOP@);
}
"""

_RGB_TO_I420 = _CODE + r"""
// One thread per 2x2 block: four luma samples and one chroma pair.
extern "C" __global__ void @NAME@(
    const float* __restrict__ rgb, @T@* __restrict__ yuv, int w, int h,
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
        yuv[i] = to_code(__fadd_rn(y_off, __fmul_rn(y_scale, luma(rs[k], gs[k], bs[k], kr, kg, kb))));
    }
    float ra = __fmul_rn(__fadd_rn(__fadd_rn(rs[0], rs[1]), __fadd_rn(rs[2], rs[3])), 0.25f);
    float ga = __fmul_rn(__fadd_rn(__fadd_rn(gs[0], gs[1]), __fadd_rn(gs[2], gs[3])), 0.25f);
    float ba = __fmul_rn(__fadd_rn(__fadd_rn(bs[0], bs[1]), __fadd_rn(bs[2], bs[3])), 0.25f);
    float lum = luma(ra, ga, ba, kr, kg, kb);
    size_t ci = (size_t)cy * (w / 2) + cx;
    yuv[n + ci] = to_code(__fadd_rn(@C_OFF@, __fmul_rn(c_scale, __fmul_rn(__fsub_rn(ba, lum), cb_inv))));
    yuv[n + n / 4 + ci] = to_code(__fadd_rn(@C_OFF@, __fmul_rn(c_scale, __fmul_rn(__fsub_rn(ra, lum), cr_inv))));
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

# Per depth: the sample type, the code of zero chroma, the largest code (as CUDA literals).
_DEPTH = {8: {"T": "unsigned char", "C_OFF": "128.f", "TOP": "255.f"},
          10: {"T": "unsigned short", "C_OFF": "512.f", "TOP": "1023.f"}}

# layout -> (kernel name, @SRC@, @LOAD@, @SHIFT@) of the conversion to RGB.
_TO_RGB = {"i420": ("pipeline_i420_to_rgb", _I420_SRC, _I420_LOAD, "0"),
           "i420p10": ("pipeline_i420p10_to_rgb", _I420_SRC, _I420_LOAD, "0"),
           "nv12": ("pipeline_nv12_to_rgb", _SEMI_SRC, _SEMI_LOAD, "0"),
           "p010": ("pipeline_p010_to_rgb", _SEMI_SRC, _SEMI_LOAD, "6")}


def _kernel(template: str, base: str, fused: tuple, **values: str) -> Any:
    """The conversion kernel with the per-pixel statements of ``fused`` pointwise filters folded in.

    Cached by the statements' text, not by the filter objects: a filter's text depends on what was bound
    to it (the colour matrix of the frames, see :meth:`~pipeline.filters.Filter.use_colour`)."""
    from ..filters.fuse import pointwise_body

    body, name = "", base
    if fused:
        body, tag = pointwise_body(list(fused))
        name = f"{base}_{tag}"
    return _compiled(template, name, body, tuple(sorted(values.items())))


@functools.lru_cache(maxsize=128)
def _compiled(template: str, name: str, body: str, values: tuple) -> Any:
    from ..gpu.cuda import float_literal
    from ..gpu.kernels import kernel, load, render

    # The layout's own placeholders (@T@, @SHIFT@... inside @SRC@ and @LOAD@) are filled first.
    filled = {key: render(text, **dict(values)) if "@" in text else text for key, text in values}
    k = kernel(render(template, NAME="@NAME@", POINTWISE=body, INV255=float_literal(1.0 / 255.0), **filled), name)
    load(k)  # at set-up, not at the first frame
    return k


def _grid(w: int, h: int, block: tuple[int, int]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    return ((w + block[0] - 1) // block[0], (h + block[1] - 1) // block[1], 1), (*block, 1)


def cuda_to_rgb(layout: str, fmt: VideoFormat, fused: tuple) -> Convert:
    w, h = i32(fmt.width), i32(fmt.height)
    grid, block = _grid(fmt.width, fmt.height, (32, 8))
    if layout == "rgb24":
        kernel = _kernel(_RGB24_TO_RGB, "pipeline_rgb24_to_rgb", fused)
        return lambda src, dst: kernel(grid, block, (src, dst, w, h))
    depth = layout_depth(layout)
    k = YuvCoefficients.of(fmt.colour, depth)
    consts = (w, h, k.y_off, k.y_inv, k.c_inv, k.r_cr, k.g_cb, k.g_cr, k.b_cb)
    name, src, load, shift = _TO_RGB[layout]
    kernel = _kernel(_YUV_TO_RGB, name, fused, SRC=src, LOAD=load, SHIFT=shift, **_DEPTH[depth])
    if layout in ("i420", "i420p10"):
        return lambda src, dst: kernel(grid, block, (src, dst, *consts))

    def semi_planar(planes, dst) -> None:
        y, uv = planes  # read in place: rows padded to each plane's pitch, given in samples
        size = y.itemsize
        kernel(grid, block, (y, uv, i32(y.strides[0] // size), i32(uv.strides[0] // size), dst, *consts))

    return semi_planar


def cuda_from_rgb(layout: str, fmt: VideoFormat, fused: tuple) -> Convert:
    w, h = i32(fmt.width), i32(fmt.height)
    if layout in ("i420", "i420p10"):
        depth = layout_depth(layout)
        k = YuvCoefficients.of(fmt.colour, depth)
        kernel = _kernel(_RGB_TO_I420, f"pipeline_rgb_to_{layout}", fused, **_DEPTH[depth])
        consts = (w, h, k.y_off, k.y_scale, k.c_scale, k.kr, k.kg, k.kb, k.cb_inv, k.cr_inv)
        grid, block = _grid(fmt.width // 2, fmt.height // 2, (16, 8))
    elif layout == "rgb24":
        kernel = _kernel(_RGB_TO_RGB24, "pipeline_rgb_to_rgb24", fused)
        consts = (w, h)
        grid, block = _grid(fmt.width, fmt.height, (32, 8))
    else:
        raise ValueError(f"the {layout} layout is an input only")
    return lambda src, dst: kernel(grid, block, (src, dst, *consts))
