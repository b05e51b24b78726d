"""Filters that remember the previous frame: ``tdenoise`` and ``motion``.

Their state is one (3, H, W) buffer from ``state_shapes``, reserved once by the processor and handed
over with ``bind_state``; its contents are undefined until the first frame, so ``reset`` only clears a
Python flag and the first frame after it initialises the buffer (the kernel takes ``primed`` as an int).
The processor orders frames that share state, even across streams, so each frame sees its predecessor's.
"""

from __future__ import annotations

import functools

import numpy as np

from ..gpu.cuda import f32, i32, launch_1d
from ..gpu.kernels import kernel, load
from .registry import Filter, Param, register_filter

_F = np.float32


class TemporalFilter(Filter):
    """One (3, H, W) state buffer and a 'primed' flag."""

    state: list | tuple = ()
    _primed = False

    def state_shapes(self, width, height):
        return [(3, height, width)]

    def reset(self):
        self._primed = False

    def _state(self, src):
        if not self.state or self.state[0].shape != src.shape:
            # A bug in the caller, not in the user's settings.
            raise RuntimeError(f"{self.name}: no state buffer for a {src.shape} frame; call bind_state first")
        return self.state[0]

    def _advance(self) -> int:
        """Whether the state held a frame before this one (as the kernel's int), then mark it filled."""
        primed = self._primed
        self._primed = True
        return int(primed)


def change(src: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """Per pixel, the largest absolute change over the three channels; (H, W)."""
    return np.abs(src - previous).max(axis=0)


_TDENOISE_SRC = r"""
// state: the previous output. One thread per pixel, all three channels.
extern "C" __global__ void @NAME@(const float* __restrict__ src, float* __restrict__ dst,
    float* __restrict__ state, int n, float alpha, float threshold, int primed)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s[3], p[3];
    float diff = 0.f;
    #pragma unroll
    for (int c = 0; c < 3; ++c) {
        s[c] = src[c * n + i];
        p[c] = state[c * n + i];
        diff = fmaxf(diff, fabsf(__fsub_rn(s[c], p[c])));
    }
    bool blend = primed && diff < threshold;
    #pragma unroll
    for (int c = 0; c < 3; ++c) {
        float v = blend ? __fadd_rn(p[c], __fmul_rn(alpha, __fsub_rn(s[c], p[c]))) : s[c];
        dst[c * n + i] = v;
        state[c * n + i] = v;
    }
}
"""


@register_filter("tdenoise")
class TDenoise(TemporalFilter):
    help = (
        "Temporal denoise, a running average: where a pixel changed by less than threshold (largest channel) "
        "since the previous output, out = previous + alpha * (src - previous); elsewhere out = src."
    )
    params = (
        Param("threshold", float, 0.05, low=0.0, high=1.0, help="changes at or above this pass through (motion)"),
        Param("alpha", float, 0.3, low=0.0, high=1.0, low_exclusive=True,
              help="weight of the new frame; 1 disables the filter, small is stronger"),
    )

    def cpu(self, src, dst, scratch):
        state = self._state(src)
        if self._advance():
            blend = change(src, state) < _F(self.threshold)
            np.copyto(dst, state + _F(self.alpha) * (src - state))
            np.copyto(dst, src, where=~blend[None])
        else:
            np.copyto(dst, src)
        np.copyto(state, dst)

    def cuda(self, src, dst, scratch):
        state = self._state(src)
        n = src.shape[1] * src.shape[2]
        args = (src, dst, state, i32(n), f32(self.alpha), f32(self.threshold), i32(self._advance()))
        launch_1d(self._kernel, n, args)

    def prepare(self):
        load(self._kernel)

    @functools.cached_property
    def _kernel(self):
        return kernel(_TDENOISE_SRC, "pipeline_tdenoise")


_MOTION_SRC = r"""
// state: the previous input. mode 0: white where moving, else black; mode 1: moving pixels tinted red.
extern "C" __global__ void @NAME@(const float* __restrict__ src, float* __restrict__ dst,
    float* __restrict__ state, int n, float threshold, int mode, int primed)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s[3];
    float diff = 0.f;
    #pragma unroll
    for (int c = 0; c < 3; ++c) {
        s[c] = src[c * n + i];
        diff = fmaxf(diff, fabsf(__fsub_rn(s[c], state[c * n + i])));
        state[c * n + i] = s[c];
    }
    bool moving = primed && diff > threshold;
    #pragma unroll
    for (int c = 0; c < 3; ++c) {
        float v;
        if (mode == 0) v = moving ? 1.f : 0.f;
        else v = moving ? __fadd_rn(__fmul_rn(0.5f, s[c]), c == 0 ? 0.5f : 0.f) : s[c];
        dst[c * n + i] = v;
    }
}
"""

_MODES = ("mask", "highlight")


@register_filter("motion")
class Motion(TemporalFilter):
    help = (
        "Motion detection against the previous input frame (largest channel change > threshold): "
        "mode=mask gives white moving pixels on black; mode=highlight tints them red (50% blend). "
        "The first frame shows no motion."
    )
    params = (
        Param("mode", str, "mask", choices=_MODES, help="mask or highlight"),
        Param("threshold", float, 0.1, low=0.0, high=1.0, help="a change above this counts as motion"),
    )

    def cpu(self, src, dst, scratch):
        state = self._state(src)
        primed = self._advance()
        moving = (change(src, state) > _F(self.threshold)) if primed else np.zeros(src.shape[1:], bool)
        if self.mode == "mask":
            dst[:] = moving[None].astype(_F)
        else:
            np.copyto(dst, src)
            tint = _F(0.5) * src + np.array([0.5, 0, 0], _F)[:, None, None]
            np.copyto(dst, tint, where=moving[None])
        np.copyto(state, src)

    def cuda(self, src, dst, scratch):
        state = self._state(src)
        n = src.shape[1] * src.shape[2]
        mode = _MODES.index(self.mode)
        args = (src, dst, state, i32(n), f32(self.threshold), i32(mode), i32(self._advance()))
        launch_1d(self._kernel, n, args)

    def prepare(self):
        load(self._kernel)

    @functools.cached_property
    def _kernel(self):
        return kernel(_MOTION_SRC, "pipeline_motion")
