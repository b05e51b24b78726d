"""``bilateral``: edge-preserving smoothing.

    out(p) = sum_q w(p, q) I(q) / sum_q w(p, q)
    w(p, q) = exp(-|q - p|^2 / (2 sigma_s^2) - ||I(q) - I(p)||^2 / (2 sigma_r^2))

over the square window of radius ceil(2 sigma_s), with ||.|| the Euclidean distance of the RGB values
(one weight per neighbour, shared by the three channels, so colours do not shift) and the window
reflected at the borders (reflect-101). OpenCV's bilateralFilter uses a round window, an L1 colour
distance and a quantised exp table, so it is a look-alike, not a reference.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..gpu.cuda import f32, i32, launch_2d
from ..gpu.kernels import kernel, load
from .registry import Filter, Param, register_filter

_F = np.float32


def bilateral_cpu(src: np.ndarray, dst: np.ndarray, sigma_s: float, sigma_r: float) -> None:
    """NumPy reference, vectorised over pixels, looping over window offsets in the kernel's order."""
    _, h, w = src.shape
    r = window_radius(sigma_s)
    inv_s, inv_r = _F(1 / (2 * sigma_s**2)), _F(1 / (2 * sigma_r**2))
    pad = np.pad(src, ((0, 0), (r, r), (r, r)), mode="reflect")  # NumPy's "reflect" is reflect-101
    num = np.zeros_like(src)
    den = np.zeros((h, w), _F)
    for dy in range(-r, r + 1):
        for dx in range(-r, r + 1):
            q = pad[:, r + dy : r + dy + h, r + dx : r + dx + w]
            d = q - src
            d2 = (d[0] * d[0] + d[1] * d[1]) + d[2] * d[2]
            wgt = np.exp(-(_F(dx * dx + dy * dy) * inv_s + d2 * inv_r))
            den += wgt
            num += wgt * q
    np.divide(num, den, out=dst)


def window_radius(sigma_s: float) -> int:
    return max(1, math.ceil(2 * sigma_s))


_BILATERAL_SRC = r"""
extern "C" __global__ void @NAME@(const float* __restrict__ src, float* __restrict__ dst,
    int w, int h, int radius, float inv_s, float inv_r)
{
    PIPELINE_XY(w, h)
    size_t n = (size_t)w * h;
    size_t i = (size_t)y * w + x;
    float p0 = src[i], p1 = src[n + i], p2 = src[2 * n + i];
    float n0 = 0.f, n1 = 0.f, n2 = 0.f, den = 0.f;
    for (int dy = -radius; dy <= radius; ++dy) {
        size_t row = (size_t)reflect101(y + dy, h) * w;
        for (int dx = -radius; dx <= radius; ++dx) {
            size_t j = row + reflect101(x + dx, w);
            float q0 = src[j], q1 = src[n + j], q2 = src[2 * n + j];
            float d0 = __fsub_rn(q0, p0), d1 = __fsub_rn(q1, p1), d2 = __fsub_rn(q2, p2);
            float dist = __fadd_rn(__fadd_rn(__fmul_rn(d0, d0), __fmul_rn(d1, d1)), __fmul_rn(d2, d2));
            float wgt = expf(-__fadd_rn(__fmul_rn((float)(dx * dx + dy * dy), inv_s), __fmul_rn(dist, inv_r)));
            den = __fadd_rn(den, wgt);
            n0 = __fadd_rn(n0, __fmul_rn(wgt, q0));
            n1 = __fadd_rn(n1, __fmul_rn(wgt, q1));
            n2 = __fadd_rn(n2, __fmul_rn(wgt, q2));
        }
    }
    dst[i] = n0 / den;
    dst[n + i] = n1 / den;
    dst[2 * n + i] = n2 / den;
}
"""


@register_filter("bilateral")
class Bilateral(Filter):
    help = (
        "Edge-preserving blur: Gaussian in space (window radius ceil(2 sigma_s), reflect-101 borders) "
        "times Gaussian in RGB distance (Euclidean over the three channels)."
    )
    # The lower bounds keep 1 / (2 sigma^2) a finite float32 (near zero it overflows to infinity, and the
    # centre pixel's weight, exp(-(0 * inf)), is NaN), with room to spare, at values already past any use:
    # at sigma_s 0.1 a neighbour's spatial weight is exp(-50), and sigma_r 0.001 is about one 10-bit code value.
    params = (
        Param("sigma_s", float, 2.0, low=0.1, high=8.0, help="spatial standard deviation, pixels"),
        Param("sigma_r", float, 0.1, low=0.001, high=1.0,
              help="range standard deviation, in RGB units (0 to 1); small keeps edges"),
    )

    def cpu(self, src, dst, scratch):
        bilateral_cpu(src, dst, self.sigma_s, self.sigma_r)

    def prepare(self):
        load(self._kernel)

    @functools.cached_property
    def _kernel(self):
        return kernel(_BILATERAL_SRC, "pipeline_bilateral")

    def cuda(self, src, dst, scratch):
        _, h, w = src.shape
        inv_s, inv_r = f32(1 / (2 * self.sigma_s**2)), f32(1 / (2 * self.sigma_r**2))
        args = (src, dst, i32(w), i32(h), i32(window_radius(self.sigma_s)), inv_s, inv_r)
        launch_2d(self._kernel, w, h, args)
