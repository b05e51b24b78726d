"""Neighbourhood filters: ``boxblur``, ``unsharp`` and ``sobel``; borders reflect-101, as OpenCV's default.

``boxblur`` and ``unsharp`` reuse the separable filter of :mod:`.blur` (one fused kernel on the GPU, unsharp's
mix folded into its write); ``sobel`` is one 3x3 stencil that recomputes luma per tap, so it needs no scratch
buffer.
"""

from __future__ import annotations

import numpy as np

from ..gpu.cuda import f32, i32, launch_2d
from ..gpu.kernels import kernel, load
from .blur import SeparableFilter, gaussian_taps, separable_cpu
from .luma import cuda_luma, luma
from .registry import Filter, Param, register_filter

_F = np.float32


def box_taps(radius: int) -> np.ndarray:
    return np.full(2 * radius + 1, 1.0 / (2 * radius + 1), np.float32)


@register_filter("boxblur")
class BoxBlur(SeparableFilter):
    help = "Box blur: the mean over a (2 radius + 1) square, separable, borders reflected (reflect-101)."
    params = (Param("radius", int, 2, low=1, high=64, help="half the box side, in pixels"),)

    def __init__(self, **values):
        super().__init__(**values)
        self.taps = box_taps(self.radius)

    def kernel_tag(self) -> str:
        return f"boxblur_r{self.radius}"

    def cpu(self, src, dst, scratch):
        separable_cpu(src, dst, self.taps)


@register_filter("unsharp")
class Unsharp(SeparableFilter):
    help = "Unsharp mask: src + amount * (src - gaussian blur of src), clamped to [0, 1]; amount < 0 softens."
    params = (
        Param("sigma", float, 1.5, low=0.0, high=32.0, low_exclusive=True, help="blur standard deviation in pixels"),
        Param("amount", float, 1.0, low=-2.0, high=5.0, help="strength; 0 leaves the frame unchanged"),
    )

    def __init__(self, **values):
        super().__init__(**values)
        self.taps = gaussian_taps(self.sigma)

    def kernel_tag(self) -> str:
        # One fused kernel: the blur and the mix in its write (two passes and a mix for large sigmas).
        return f"unsharp_s{self.sigma:g}".replace(".", "p")

    def cpu(self, src, dst, scratch):
        separable_cpu(src, dst, self.taps)
        np.clip(src + _F(self.amount) * (src - dst), 0, 1, out=dst)


_SOBEL_SRC = r"""
extern "C" __global__ void @NAME@(const float* __restrict__ src, float* __restrict__ dst, int w, int h, float scale)
{
    PIPELINE_XY(w, h)
    size_t n = (size_t)w * h;
    float l[3][3];
    #pragma unroll
    for (int j = 0; j < 3; ++j) {
        int yy = reflect101(y + j - 1, h);
        #pragma unroll
        for (int k = 0; k < 3; ++k) {
            size_t i = (size_t)yy * w + reflect101(x + k - 1, w);
            l[j][k] = @LUMA@(src[i], src[n + i], src[2 * n + i]);
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


def sobel_cpu(src: np.ndarray, scale: float, matrix: str = "bt709") -> np.ndarray:
    """Sobel 3x3 gradient magnitude of the luma of ``matrix``, times ``scale``, clamped to [0, 1]; (H, W)."""
    p = np.pad(luma(src, matrix), 1, mode="reflect")  # NumPy's "reflect" is reflect-101
    h, w = src.shape[1:]

    def at(j: int, k: int) -> np.ndarray:
        return p[j : j + h, k : k + w]

    gx = (at(0, 2) - at(0, 0)) + _F(2) * (at(1, 2) - at(1, 0)) + (at(2, 2) - at(2, 0))
    gy = (at(2, 0) - at(0, 0)) + _F(2) * (at(2, 1) - at(0, 1)) + (at(2, 2) - at(0, 2))
    return np.minimum(np.sqrt(gx * gx + gy * gy) * _F(scale), _F(1))


@register_filter("sobel")
class Sobel(Filter):
    help = ("Edges: Sobel 3x3 gradient magnitude of luma (the input's own colour matrix; reflect-101 borders), grey, "
            "clamped to [0, 1].")
    params = (Param("scale", float, 1.0, low=0.0, high=100.0, low_exclusive=True, help="gain on the magnitude"),)

    def cpu(self, src, dst, scratch):
        dst[:] = sobel_cpu(src, self.scale, self.luma_matrix)[None]

    def prepare(self):
        load(self._kernel())

    def _kernel(self):
        """The kernel for the bound matrix, built once per matrix."""
        kernels = self.__dict__.setdefault("_kernels", {})
        if self.luma_matrix not in kernels:
            kernels[self.luma_matrix] = kernel(_SOBEL_SRC, f"pipeline_sobel_{self.luma_matrix}", LUMA=cuda_luma(self.luma_matrix))
        return kernels[self.luma_matrix]

    def cuda(self, src, dst, scratch):
        _, h, w = src.shape
        launch_2d(self._kernel(), w, h, (src, dst, i32(w), i32(h), f32(self.scale)))
