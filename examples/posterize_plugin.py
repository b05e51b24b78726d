"""An example plugin: ``posterize``, fewer levels per channel.

    pipeline run in.mp4 -o out.mp4 --plugin examples/posterize_plugin.py --filters posterize=levels=4
    pipeline filters posterize --plugin examples/posterize_plugin.py

A filter is one class: declared parameters (checked for you, with messages naming them), a CPU
reference in NumPy and a CUDA version. Frames are planar float32 RGB in [0, 1], shape (3, H, W);
write the result into ``dst`` (a buffer the pipeline owns) and allocate nothing per frame on the GPU.
Kernels run on the frame's CUDA stream, which the pipeline has made current.

A purely per-pixel filter like this one may instead subclass ``pipeline.filters.PointwiseFilter``
and give ``pointwise_expr()`` (a few lines of CUDA on ``r``, ``g``, ``b``): then ``cuda`` is written for
you and the filter can be fused with its neighbours into one kernel.
"""

import functools

import numpy as np

from pipeline.filters import Filter, Param, register_filter
from pipeline.gpu.cuda import f32, i32, launch_1d, raw_kernel

_SRC = r"""
extern "C" __global__ void plugin_posterize(const float* __restrict__ src, float* __restrict__ dst,
                                            int n, float steps)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = floorf(__fadd_rn(__fmul_rn(src[i], steps), 0.5f)) / steps;
}
"""


@register_filter("posterize")
class Posterize(Filter):
    help = "Posterize: round every channel to one of `levels` evenly spaced values (example plugin)."
    params = (Param("levels", int, 4, low=2, high=256, help="values per channel, 2 to 256"),)

    def cpu(self, src, dst, scratch):
        steps = np.float32(self.levels - 1)
        np.divide(np.floor(src * steps + np.float32(0.5)), steps, out=dst)

    @functools.cached_property
    def kernel(self):
        return raw_kernel(_SRC, "plugin_posterize")  # bound once: compiled on first use (and cached on disk)

    def cuda(self, src, dst, scratch):
        n = src.size  # all three planes: the kernel is per value
        launch_1d(self.kernel, n, (src, dst, i32(n), f32(self.levels - 1)))
