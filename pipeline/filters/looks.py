"""Per-pixel looks: ``grayscale``, ``invert``, ``hue`` and ``vignette``.

Each is a :class:`~.fuse.PointwiseFilter`: a NumPy reference and a CUDA expression that the fusion pass
can merge with its neighbours. Both sides use the same float32 constants and, where it matters, the
same order of operations (``__fmul_rn``/``__fadd_rn`` stop the compiler contracting into FMAs).
"""

from __future__ import annotations

import math

import numpy as np

from ..gpu.cuda import float_literal as lit
from .fuse import PointwiseFilter
from .luma import cuda_luma, luma
from .registry import Param, register_filter

_F = np.float32


@register_filter("grayscale")
class Grayscale(PointwiseFilter):
    help = ("Grey: luma written to all three channels, weighed by the input's own colour matrix (BT.601, BT.709 "
            "or BT.2020), so the output's Y plane is the input's and its chroma neutral.")

    def cpu(self, src, dst, scratch):
        np.clip(luma(src, self.luma_matrix), 0, 1, out=dst[0])
        dst[1] = dst[0]
        dst[2] = dst[0]

    def pointwise_expr(self):
        return f"r = g = b = pw_clamp01({cuda_luma(self.luma_matrix)}(r, g, b));"


@register_filter("invert")
class Invert(PointwiseFilter):
    help = "Negative: every channel becomes 1 - value."

    def cpu(self, src, dst, scratch):
        np.subtract(_F(1), src, out=dst)

    def pointwise_expr(self):
        return "r = 1.f - r; g = 1.f - g; b = 1.f - b;"


def hue_matrix(degrees: float) -> np.ndarray:
    """3x3 float32 rotation by ``degrees`` around the grey axis (1, 1, 1): greys stay put, luma nearly so.

    Rodrigues' formula with k = (1, 1, 1) / sqrt(3): M = cos I + (1 - cos) k k^T + sin [k]x.
    """
    t = math.radians(degrees)
    c, s = math.cos(t), math.sin(t)
    cross = np.array([[0, -1, 1], [1, 0, -1], [-1, 1, 0]], np.float64) / math.sqrt(3)
    m = c * np.eye(3) + (1 - c) / 3 * np.ones((3, 3)) + s * cross
    return m.astype(np.float32)


@register_filter("hue")
class Hue(PointwiseFilter):
    help = "Rotate hue by an angle: a rotation of RGB around the grey axis, clamped to [0, 1]."
    params = (Param("degrees", float, 0.0, low=-360.0, high=360.0, help="rotation; 120 maps red to green"),)

    def __init__(self, **values):
        super().__init__(**values)
        self.matrix = hue_matrix(self.degrees)

    def cpu(self, src, dst, scratch):
        m = self.matrix
        for p in range(3):
            np.clip(m[p, 0] * src[0] + m[p, 1] * src[1] + m[p, 2] * src[2], 0, 1, out=dst[p])

    def pointwise_expr(self):
        m = [[lit(v) for v in row] for row in self.matrix]
        rows = "\n".join(
            f"{c} = pw_clamp01(__fadd_rn(__fadd_rn(__fmul_rn({m[p][0]}, pw_r), __fmul_rn({m[p][1]}, pw_g)),"
            f" __fmul_rn({m[p][2]}, pw_b)));"
            for p, c in enumerate("rgb")
        )
        return f"float pw_r = r, pw_g = g, pw_b = b;\n{rows}"


@register_filter("vignette")
class Vignette(PointwiseFilter):
    help = (
        "Darken towards the corners: each pixel is scaled by 1 - strength * (1 - cos^4(angle * d)), "
        "d = distance from the centre / half the diagonal (0 at the centre, 1 in the corners)."
    )
    params = (
        Param("angle", float, math.pi / 5, low=0.0, high=math.pi / 2,
              help="radians, 0 to pi/2 (default pi/5, as ffmpeg's vignette); larger darkens more"),
        Param("strength", float, 1.0, low=0.0, high=1.0, help="0 is no effect, 1 the full cos^4 fall-off"),
    )

    def factor(self, width: int, height: int) -> np.ndarray:
        """(H, W) float32 gain, in the same float32 steps as the kernel."""
        hw, hh = _F(0.5) * _F(width), _F(0.5) * _F(height)
        dx = (np.arange(width, dtype=_F) + _F(0.5)) - hw
        dy = (np.arange(height, dtype=_F) + _F(0.5)) - hh
        dmax = np.sqrt(hw * hw + hh * hh)
        d = np.sqrt(dy[:, None] * dy[:, None] + dx[None, :] * dx[None, :]) / dmax
        c = np.cos(_F(self.angle) * d)
        c2 = c * c
        return _F(1) - _F(self.strength) * (_F(1) - c2 * c2)

    def cpu(self, src, dst, scratch):
        cached = getattr(self, "_factor", None)
        if cached is None or cached.shape != src.shape[1:]:
            cached = self._factor = self.factor(src.shape[2], src.shape[1])
        np.multiply(src, cached[None], out=dst)

    def pointwise_expr(self):
        return f"""float pw_hw = __fmul_rn(0.5f, (float)w), pw_hh = __fmul_rn(0.5f, (float)h);
float pw_dx = __fsub_rn(__fadd_rn((float)x, 0.5f), pw_hw);
float pw_dy = __fsub_rn(__fadd_rn((float)y, 0.5f), pw_hh);
float pw_dmax = sqrtf(__fadd_rn(__fmul_rn(pw_hw, pw_hw), __fmul_rn(pw_hh, pw_hh)));
float pw_d = __fdiv_rn(sqrtf(__fadd_rn(__fmul_rn(pw_dy, pw_dy), __fmul_rn(pw_dx, pw_dx))), pw_dmax);
float pw_c = cosf(__fmul_rn({lit(self.angle)}, pw_d));
float pw_c2 = __fmul_rn(pw_c, pw_c);
float pw_f = __fsub_rn(1.f, __fmul_rn({lit(self.strength)}, __fsub_rn(1.f, __fmul_rn(pw_c2, pw_c2))));
r = __fmul_rn(r, pw_f); g = __fmul_rn(g, pw_f); b = __fmul_rn(b, pw_f);"""
