"""Pointwise filters and their fusion: neighbouring per-pixel filters run as one generated kernel.

A pointwise filter declares ``pointwise_expr()``: a block of CUDA C that updates the floats ``r``, ``g``,
``b`` of one pixel in place, and may read the ints ``x``, ``y`` (the pixel) and ``w``, ``h`` (the frame
size). Parameters are baked into the text as exact literals (:func:`~pipeline.gpu.cuda.float_literal`).
The prelude's helpers are in scope (``clamp01``, ``luma601``, ``luma709``, ``luma2020``, also under the names
``pw_clamp01(v)`` and ``pw_luma709(r, g, b)``: see :mod:`pipeline.gpu.kernels`); local names should start with
``pw_`` (each block gets its own braces, so two filters' locals never clash). An expression that takes luma
should use the frames' own matrix, ``self.luma_matrix`` (bound before the kernel is built), through
:func:`~pipeline.filters.luma.cuda_luma` (``luma601``, ``luma709`` or ``luma2020``).

:func:`fuse_pointwise` turns ``[gblur, eq, hue, vignette, sobel]`` into ``[gblur, fused(eq+hue+vignette), sobel]``:
one read and one write of the frame instead of three. The fused filter's CPU path runs the members' own
references one after the other, so the CPU backend stays the reference the kernels are tested against.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import numpy as np

from ..gpu.cuda import i32, launch_2d, raw_kernel
from ..gpu.kernels import load, source
from .registry import Filter

_HEAD = r"""(const float* __restrict__ src, float* __restrict__ dst, int w, int h)
{
    PIPELINE_XY(w, h)
    size_t n = (size_t)w * h;
    size_t i = (size_t)y * w + x;
    float r = src[i], g = src[n + i], b = src[2 * n + i];
"""
_TAIL = r"""
    dst[i] = r;
    dst[n + i] = g;
    dst[2 * n + i] = b;
}
"""


def is_pointwise(f: Filter) -> bool:
    """Declares a pointwise expression and keeps the frame size, with no scratch and no state."""
    if getattr(f, "pointwise_expr", None) is None:
        return False
    return f.output_size(16, 16) == (16, 16) and not f.scratch_shapes(16, 16) and not f.state_shapes(16, 16)


def _expr(f: Filter) -> str:
    expr = f.pointwise_expr
    return expr() if callable(expr) else str(expr)


def members_of(f: Filter) -> list[Filter]:
    """The pointwise filters a (possibly fused) filter applies, in order."""
    return list(f.members) if isinstance(f, FusedPointwise) else [f]


def pointwise_body(members: list[Filter]) -> tuple[str, str]:
    """(CUDA statements updating ``r, g, b`` for ``members`` in order, a name tag with their digest).

    Kernels are cached by name and the constants are in the text, so the tag carries a digest of it.
    """
    body = "\n".join(f"    {{ // {f.name}\n{_expr(f)}\n    }}" for f in members)
    digest = hashlib.sha1(body.encode()).hexdigest()[:10]
    names = "_".join(re.sub(r"\W", "_", f.name) for f in members[:6])
    return body, f"{names}_{digest}"


def pointwise_source(members: list[Filter]) -> tuple[str, str]:
    """(CUDA source, kernel name) of one kernel applying ``members`` in order."""
    body, tag = pointwise_body(members)
    name = f"pipeline_pw_{tag}"
    return source('extern "C" __global__ void @NAME@' + _HEAD + "@BODY@" + _TAIL, name, BODY=body), name


def pointwise_kernel(owner: Any, members: list[Filter]):
    """The kernel applying ``members``, built once and kept on ``owner`` (until a colour is bound to it:
    the expressions may read the matrix, see :func:`forget_kernel`)."""
    kernel = owner.__dict__.get("_pw_kernel")
    if kernel is None:
        kernel = owner.__dict__["_pw_kernel"] = raw_kernel(*pointwise_source(members))
    return kernel


def forget_kernel(owner: Any) -> None:
    owner.__dict__.pop("_pw_kernel", None)


def launch_pointwise(owner: Any, members: list[Filter], src, dst) -> None:
    """Run ``members`` as one kernel."""
    _, h, w = src.shape
    launch_2d(pointwise_kernel(owner, members), w, h, (src, dst, i32(w), i32(h)))


class PointwiseFilter(Filter):
    """Base for per-pixel filters: implement ``cpu`` and ``pointwise_expr``; ``cuda`` comes for free."""

    def pointwise_expr(self) -> str:
        raise NotImplementedError

    def use_colour(self, colour) -> None:
        super().use_colour(colour)
        forget_kernel(self)

    def cuda(self, src, dst, scratch):
        launch_pointwise(self, [self], src, dst)

    def prepare(self):
        load(pointwise_kernel(self, [self]))


class FusedPointwise(Filter):
    """Consecutive pointwise filters applied by one kernel (built by :func:`fuse_pointwise`)."""

    name = "fused"
    help = "Several pointwise filters in one kernel."

    def __init__(self, members: list[Filter]):
        super().__init__()
        self.members = list(members)
        self._tmp: np.ndarray | None = None

    def __repr__(self) -> str:
        return "+".join(repr(f) for f in self.members)

    def reset(self) -> None:
        for f in self.members:
            f.reset()

    def use_colour(self, colour) -> None:
        super().use_colour(colour)
        for f in self.members:
            f.use_colour(colour)
        forget_kernel(self)

    def cpu(self, src, dst, scratch):
        # Ping-pong between dst and one private temporary so that the last member writes dst.
        if self._tmp is None or self._tmp.shape != src.shape:
            self._tmp = np.empty_like(src)
        cur = src
        for k, f in enumerate(self.members):
            out = dst if (len(self.members) - 1 - k) % 2 == 0 else self._tmp
            f.cpu(cur, out, [])
            cur = out

    def cuda(self, src, dst, scratch):
        launch_pointwise(self, self.members, src, dst)

    def prepare(self):
        load(pointwise_kernel(self, self.members))


def fuse_pointwise(chain: list[Filter]) -> list[Filter]:
    """Merge each run of two or more neighbouring pointwise filters into one :class:`FusedPointwise`."""
    out: list[Filter] = []
    run: list[Filter] = []
    for f in [*chain, None]:
        if f is not None and is_pointwise(f):
            run.append(f)
            continue
        if len(run) > 1:
            out.append(FusedPointwise(run))
        else:
            out.extend(run)
        run = []
        if f is not None:
            out.append(f)
    return out
