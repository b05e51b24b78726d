"""Kernel sources: one prelude of shared device functions, one templating style, one compile cache.

Every built-in kernel is written as a template whose parameters look like ``@NAME@`` and is compiled
through :func:`kernel`, which prepends :data:`PRELUDE`:

- ``PIPELINE_XY(w, h)``: the 2-D index prologue (``x``, ``y``; threads outside the frame return);
- ``clamp01(v)``, ``reflect101(i, n)`` (OpenCV's default border);
- ``luma(r, g, b, kr, kg, kb)`` and ``luma601/luma709/luma2020(r, g, b)``, whose weights come from the one
  table in :data:`pipeline.video.LUMA`;
- ``pw_clamp01`` and ``pw_luma709``, the names pointwise plugins use (see :mod:`pipeline.filters.fuse`).

The luma sums are rounded step by step (``__fmul_rn``/``__fadd_rn``: no FMA contraction), as the NumPy
references compute them, so the CPU backend stays a bit-exact reference for the kernels that use them.

Compiled kernels are cached by device, *source text*, name and options (:func:`pipeline.gpu.cuda.raw_kernel`):
a plugin that reuses a kernel name with other code gets its own kernel, never another's. Callers keep the
kernel object they get (a filter binds its kernels once), so the hot path builds no strings.
"""

from __future__ import annotations

import re
from typing import Any

from ..video import LUMA
from .cuda import float_literal, raw_kernel

_LUMA_FUNCTIONS = "\n".join(
    f"__device__ __forceinline__ float luma{name[2:]}(float r, float g, float b) {{\n"
    f"    return luma(r, g, b, {', '.join(float_literal(k) for k in weights)});\n}}"
    for name, weights in LUMA.items()
)

PRELUDE = (
    r"""
#define PIPELINE_XY(w, h)                                  \
    const int x = blockIdx.x * blockDim.x + threadIdx.x;   \
    const int y = blockIdx.y * blockDim.y + threadIdx.y;   \
    if (x >= (w) || y >= (h)) return;

__device__ __forceinline__ float clamp01(float v) { return fminf(fmaxf(v, 0.f), 1.f); }

__device__ __forceinline__ int reflect101(int i, int n) {
    if (n == 1) return 0;
    while (i < 0 || i >= n) i = i < 0 ? -i : 2 * n - 2 - i;
    return i;
}

__device__ __forceinline__ float luma(float r, float g, float b, float kr, float kg, float kb) {
    return __fadd_rn(__fadd_rn(__fmul_rn(kr, r), __fmul_rn(kg, g)), __fmul_rn(kb, b));
}
"""
    + _LUMA_FUNCTIONS
    + r"""
#define pw_clamp01 clamp01
#define pw_luma709 luma709
"""
)

_PARAM = re.compile(r"@([A-Z0-9_]+)@")


def render(template: str, **values: Any) -> str:
    """``template`` with every ``@KEY@`` replaced by ``values[KEY]``; a key left unfilled is an error."""

    def fill(match: re.Match) -> str:
        key = match.group(1)
        if key not in values:
            raise KeyError(f"kernel template parameter @{key}@ has no value")
        return str(values[key])

    return _PARAM.sub(fill, template)


def source(template: str, name: str, **values: Any) -> str:
    """The full source of a built-in kernel: the prelude, then the template rendered (``@NAME@`` is ``name``)."""
    return PRELUDE + render(template, NAME=name, **values)


def kernel(template: str, name: str, **values: Any) -> Any:
    """A built-in kernel (cached; see the module docstring). Keep the result: call this once."""
    return raw_kernel(source(template, name, **values), name)


def load(*kernels: Any) -> None:
    """Compile (or load from CuPy's on-disk cache) and load ``kernels`` now, not at their first launch:
    set-up pays for it before the first frame, which then flows at once (a live source drops nothing)."""
    for k in kernels:
        compile_now = getattr(k, "compile", None)  # CuPy's RawKernel has it; a stand-in may not
        if compile_now is not None:
            compile_now()
