"""Separable Gaussian blur (``gblur``): a horizontal and a vertical pass, border reflect-101 (OpenCV's default)."""

from __future__ import annotations

import functools
import hashlib
import math

import cv2
import numpy as np

from ..gpu.cuda import float_literal, i32, launch_2d, raw_kernel
from .registry import Filter, Param, register_filter

_SEP_SRC = r"""
__device__ __forceinline__ int reflect101(int i, int n) {
    if (n == 1) return 0;
    while (i < 0 || i >= n) i = i < 0 ? -i : 2 * n - 2 - i;
    return i;
}

// One pass of a separable filter over every plane (blockIdx.z); DX, DY select the direction.
extern "C" __global__ void NAME(const float* __restrict__ src, float* __restrict__ dst, int w, int h)
{
    const float taps[2 * RADIUS + 1] = { TAPS };
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    const float* plane = src + (size_t)blockIdx.z * w * h;
    float acc = 0.f;
    #pragma unroll
    for (int k = -RADIUS; k <= RADIUS; ++k) {
        int xx = DX ? reflect101(x + k, w) : x;
        int yy = DY ? reflect101(y + k, h) : y;
        acc += taps[k + RADIUS] * plane[(size_t)yy * w + xx];
    }
    dst[(size_t)blockIdx.z * w * h + (size_t)y * w + x] = acc;
}
"""


@functools.lru_cache(maxsize=64)
def _sep_source(taps_bytes: bytes, horizontal: bool, tag: str) -> tuple[str, str]:
    """(source, name) of one pass; built once per taps, not per frame."""
    taps = np.frombuffer(taps_bytes, np.float32)
    radius = len(taps) // 2
    # Kernels are cached by name: a digest of the taps keeps two sigmas that print alike apart.
    digest = hashlib.sha1(taps_bytes).hexdigest()[:8]
    name = f"pipeline_{tag}_{'h' if horizontal else 'v'}_r{radius}_{digest}"
    src = (
        _SEP_SRC.replace("NAME", name)
        .replace("RADIUS", str(radius))
        .replace("TAPS", ", ".join(float_literal(t) for t in taps))
        .replace("DX", "1" if horizontal else "0")
        .replace("DY", "0" if horizontal else "1")
    )
    return src, name


def _sep_kernel(taps: np.ndarray, horizontal: bool, tag: str):
    return raw_kernel(*_sep_source(np.asarray(taps, np.float32).tobytes(), horizontal, tag))


def gaussian_taps(sigma: float) -> np.ndarray:
    radius = max(1, math.ceil(3 * sigma))
    return cv2.getGaussianKernel(2 * radius + 1, sigma, ktype=cv2.CV_32F).ravel()


def separable_cpu(src: np.ndarray, dst: np.ndarray, taps: np.ndarray) -> None:
    for c in range(src.shape[0]):
        cv2.sepFilter2D(src[c], cv2.CV_32F, taps, taps, dst=dst[c], borderType=cv2.BORDER_REFLECT_101)


def separable_cuda(src, dst, tmp, taps: np.ndarray, tag: str) -> None:
    planes, h, w = src.shape
    launch_2d(_sep_kernel(taps, True, tag), w, h, (src, tmp, i32(w), i32(h)), planes=planes)
    launch_2d(_sep_kernel(taps, False, tag), w, h, (tmp, dst, i32(w), i32(h)), planes=planes)


@register_filter("gblur")
class GBlur(Filter):
    help = "Gaussian blur (separable, radius ceil(3 sigma), borders reflected)."
    params = (Param("sigma", float, 1.0, low=0.0, high=64.0, low_exclusive=True, help="standard deviation in pixels"),)

    def __init__(self, **values):
        super().__init__(**values)
        self.taps = gaussian_taps(self.sigma)

    def scratch_shapes(self, width, height):
        return [(3, height, width)]

    def cpu(self, src, dst, scratch):
        separable_cpu(src, dst, self.taps)

    def cuda(self, src, dst, scratch):
        separable_cuda(src, dst, scratch[0], self.taps, f"gblur_s{self.sigma:g}".replace(".", "p"))
