"""Per-pixel colour filters: ``eq`` (brightness, contrast, saturation, gamma)."""

from __future__ import annotations

import numpy as np

from ..gpu.cuda import f32, float_literal, i32, launch_1d
from ..gpu.kernels import kernel, load
from .luma import cuda_luma, luma
from .registry import Filter, Param, register_filter

# Saturation mixes each channel with luma, weighed by the input's own matrix: saturation 0 keeps Y'.
_F = np.float32

_EQ_SRC = r"""
extern "C" __global__ void @NAME@(const float* __restrict__ src, float* __restrict__ dst, int n,
                                  float contrast, float brightness, float saturation, float inv_gamma)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float c[3];
    #pragma unroll
    for (int p = 0; p < 3; ++p)
        c[p] = __fadd_rn(__fadd_rn(__fmul_rn(__fsub_rn(src[p * n + i], 0.5f), contrast), 0.5f), brightness);
    float l = @LUMA@(c[0], c[1], c[2]);
    #pragma unroll
    for (int p = 0; p < 3; ++p) {
        float v = fminf(fmaxf(__fadd_rn(l, __fmul_rn(__fsub_rn(c[p], l), saturation)), 0.f), 1.f);
        dst[p * n + i] = inv_gamma == 1.f ? v : powf(v, inv_gamma);
    }
}
"""


@register_filter("eq")
class Eq(Filter):
    help = ("Brightness, contrast, saturation and gamma, as ffmpeg's eq (applied to RGB; saturation mixes with the "
            "luma of the input's own colour matrix).")
    params = (
        Param("contrast", float, 1.0, low=-10.0, high=10.0, help="gain around mid-grey"),
        Param("brightness", float, 0.0, low=-1.0, high=1.0, help="added after contrast"),
        Param("saturation", float, 1.0, low=0.0, high=3.0, help="0 is grey, 1 unchanged"),
        Param("gamma", float, 1.0, low=0.1, high=10.0, help="output = input ** (1 / gamma)"),
    )

    def cpu(self, src, dst, scratch):
        c = (src - _F(0.5)) * _F(self.contrast) + _F(0.5) + _F(self.brightness)
        lum = luma(c, self.luma_matrix)
        np.clip(lum + (c - lum) * _F(self.saturation), 0, 1, out=dst)
        if self.gamma != 1.0:
            np.power(dst, _F(1.0 / self.gamma), out=dst)

    def pointwise_expr(self) -> str:
        """The kernel's per-pixel body, for the fusion pass (see :mod:`.fuse`)."""
        con, bri, sat = (float_literal(v) for v in (self.contrast, self.brightness, self.saturation))
        gamma = "" if self.gamma == 1.0 else f"pw_v = powf(pw_v, {float_literal(1.0 / self.gamma)});"
        return f"""float pw_c[3] = {{r, g, b}};
#pragma unroll
for (int p = 0; p < 3; ++p)
    pw_c[p] = __fadd_rn(__fadd_rn(__fmul_rn(__fsub_rn(pw_c[p], 0.5f), {con}), 0.5f), {bri});
float pw_l = {cuda_luma(self.luma_matrix)}(pw_c[0], pw_c[1], pw_c[2]);
#pragma unroll
for (int p = 0; p < 3; ++p) {{
    float pw_v = fminf(fmaxf(__fadd_rn(pw_l, __fmul_rn(__fsub_rn(pw_c[p], pw_l), {sat})), 0.f), 1.f);
    {gamma}
    pw_c[p] = pw_v;
}}
r = pw_c[0]; g = pw_c[1]; b = pw_c[2];"""

    def prepare(self):
        load(self._kernel())

    def _kernel(self):
        """The kernel for the bound matrix, built once per matrix."""
        kernels = self.__dict__.setdefault("_kernels", {})
        if self.luma_matrix not in kernels:
            kernels[self.luma_matrix] = kernel(_EQ_SRC, f"pipeline_eq_{self.luma_matrix}", LUMA=cuda_luma(self.luma_matrix))
        return kernels[self.luma_matrix]

    def cuda(self, src, dst, scratch):
        n = src.shape[1] * src.shape[2]
        args = (src, dst, i32(n), f32(self.contrast), f32(self.brightness), f32(self.saturation))
        launch_1d(self._kernel(), n, args + (f32(1.0 / self.gamma),))
