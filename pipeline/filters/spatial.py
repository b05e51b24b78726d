"""Neighbourhood filters: ``boxblur``, ``unsharp`` and ``sobel``; borders reflect-101, as OpenCV's default.

``boxblur`` and ``unsharp`` reuse the separable filter of :mod:`.blur` (one fused kernel on the GPU, unsharp's
mix folded into its write); ``sobel`` is one 3x3 stencil that recomputes luma per tap, so it needs no scratch
buffer.
"""

from __future__ import annotations

import numpy as np

from ..gpu.cuda import f32, float_literal, i32, launch_2d, raw_kernel
from .blur import gaussian_taps, separable_cpu, separable_cuda
from .registry import Filter, Param, register_filter

_F = np.float32
# Edges are taken on BT.709 luma whatever the stream's matrix, as eq's saturation: a look, not a conversion.
KR, KG, KB = _F(0.2126), _F(0.7152), _F(0.0722)


def box_taps(radius: int) -> np.ndarray:
    return np.full(2 * radius + 1, 1.0 / (2 * radius + 1), np.float32)


@register_filter("boxblur")
class BoxBlur(Filter):
    help = "Box blur: the mean over a (2 radius + 1) square, separable, borders reflected (reflect-101)."
    params = (Param("radius", int, 2, low=1, high=64, help="half the box side, in pixels"),)

    def __init__(self, **values):
        super().__init__(**values)
        self.taps = box_taps(self.radius)

    def scratch_shapes(self, width, height):
        return [(3, height, width)]  # the two-pass fallback's intermediate (radius > MAX_FUSED_RADIUS)

    def cpu(self, src, dst, scratch):
        separable_cpu(src, dst, self.taps)

    def cuda(self, src, dst, scratch):
        separable_cuda(src, dst, scratch[0], self.taps, f"boxblur_r{self.radius}")


@register_filter("unsharp")
class Unsharp(Filter):
    help = "Unsharp mask: src + amount * (src - gaussian blur of src), clamped to [0, 1]; amount < 0 softens."
    params = (
        Param("sigma", float, 1.5, low=0.0, high=32.0, low_exclusive=True, help="blur standard deviation in pixels"),
        Param("amount", float, 1.0, low=-2.0, high=5.0, help="strength; 0 leaves the frame unchanged"),
    )

    def __init__(self, **values):
        super().__init__(**values)
        self.taps = gaussian_taps(self.sigma)

    def scratch_shapes(self, width, height):
        return [(3, height, width)]  # the two-pass fallback's intermediate (the CPU path uses none)

    def cpu(self, src, dst, scratch):
        separable_cpu(src, dst, self.taps)
        np.clip(src + _F(self.amount) * (src - dst), 0, 1, out=dst)

    def cuda(self, src, dst, scratch):
        # One fused kernel: the blur and the mix in its write (two passes and a mix for large sigmas).
        tag = f"unsharp_s{self.sigma:g}".replace(".", "p")
        separable_cuda(src, dst, scratch[0], self.taps, tag, amount=self.amount)


_SOBEL_SRC = r"""
__device__ __forceinline__ int reflect101(int i, int n) {
    if (n == 1) return 0;
    while (i < 0 || i >= n) i = i < 0 ? -i : 2 * n - 2 - i;
    return i;
}

extern "C" __global__ void pipeline_sobel(const float* __restrict__ src, float* __restrict__ dst,
                                          int w, int h, float scale)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    size_t n = (size_t)w * h;
    float l[3][3];
    #pragma unroll
    for (int j = 0; j < 3; ++j) {
        int yy = reflect101(y + j - 1, h);
        #pragma unroll
        for (int k = 0; k < 3; ++k) {
            size_t i = (size_t)yy * w + reflect101(x + k - 1, w);
            l[j][k] = __fadd_rn(__fadd_rn(__fmul_rn(KR, src[i]), __fmul_rn(KG, src[n + i])), __fmul_rn(KB, src[2 * n + i]));
        }
    }
    float gx = __fadd_rn(__fadd_rn(__fsub_rn(l[0][2], l[0][0]), __fmul_rn(2.f, __fsub_rn(l[1][2], l[1][0]))),
                         __fsub_rn(l[2][2], l[2][0]));
    float gy = __fadd_rn(__fadd_rn(__fsub_rn(l[2][0], l[0][0]), __fmul_rn(2.f, __fsub_rn(l[2][1], l[0][1]))),
                         __fsub_rn(l[2][2], l[0][2]));
    float m = fminf(__fmul_rn(sqrtf(__fadd_rn(__fmul_rn(gx, gx), __fmul_rn(gy, gy))), scale), 1.f);
    size_t i = (size_t)y * w + x;
    dst[i] = m;
    dst[n + i] = m;
    dst[2 * n + i] = m;
}
"""


_SOBEL_SOURCE = _SOBEL_SRC.replace("KR", float_literal(KR)).replace("KG", float_literal(KG)).replace(
    "KB", float_literal(KB)
)


def luma709(rgb: np.ndarray) -> np.ndarray:
    return KR * rgb[0] + KG * rgb[1] + KB * rgb[2]


def sobel_cpu(src: np.ndarray, scale: float) -> np.ndarray:
    """Sobel 3x3 gradient magnitude of BT.709 luma, times ``scale``, clamped to [0, 1]; (H, W)."""
    p = np.pad(luma709(src), 1, mode="reflect")  # NumPy's "reflect" is reflect-101
    h, w = src.shape[1:]

    def at(j: int, k: int) -> np.ndarray:
        return p[j : j + h, k : k + w]

    gx = (at(0, 2) - at(0, 0)) + _F(2) * (at(1, 2) - at(1, 0)) + (at(2, 2) - at(2, 0))
    gy = (at(2, 0) - at(0, 0)) + _F(2) * (at(2, 1) - at(0, 1)) + (at(2, 2) - at(0, 2))
    return np.minimum(np.sqrt(gx * gx + gy * gy) * _F(scale), _F(1))


@register_filter("sobel")
class Sobel(Filter):
    help = "Edges: Sobel 3x3 gradient magnitude of BT.709 luma (reflect-101 borders), grey, clamped to [0, 1]."
    params = (Param("scale", float, 1.0, low=0.0, high=100.0, low_exclusive=True, help="gain on the magnitude"),)

    def cpu(self, src, dst, scratch):
        dst[:] = sobel_cpu(src, self.scale)[None]

    def cuda(self, src, dst, scratch):
        _, h, w = src.shape
        launch_2d(raw_kernel(_SOBEL_SOURCE, "pipeline_sobel"), w, h, (src, dst, i32(w), i32(h), f32(self.scale)))
