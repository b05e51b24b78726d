"""NVTX ranges for Nsight Systems (``--nvtx``): one per stage and frame, on the thread that runs it.

``nsys profile -t cuda,nvtx pipeline run in.mp4 --nvtx`` then shows, per thread, "decode 12",
"submit 12" (whose CUDA calls Nsight links to the copies and kernels they launched), "encode 12", so
the overlap of one frame's upload with another's kernels is visible on the timeline.

CuPy's own binding is used when CuPy is present, else the ``nvtx`` package; without either the ranges
are no-ops and one notice says so. Disabled, a range costs one call returning a shared null context.
"""

from __future__ import annotations

import contextlib
from typing import Callable, ContextManager

from ..log import log

_NULL = contextlib.nullcontext()


def _null(name: str) -> ContextManager:
    return _NULL


def ranges(enabled: bool) -> Callable[[str], ContextManager]:
    """A function ``range(name)`` returning a context manager that pushes/pops an NVTX range."""
    if not enabled:
        return _null
    push_pop = _cupy_nvtx() or _nvtx_package()
    if push_pop is None:
        log.warning("--nvtx: neither CuPy nor the nvtx package is installed; no NVTX ranges are emitted")
        return _null
    push, pop = push_pop

    @contextlib.contextmanager
    def nvtx_range(name: str):
        push(name)
        try:
            yield
        finally:
            pop()

    return nvtx_range


def _cupy_nvtx():
    try:
        from cupy.cuda import nvtx
    except (ImportError, OSError, RuntimeError):  # not installed, or its CUDA libraries are missing
        return None
    if not getattr(nvtx, "available", True):
        return None
    return nvtx.RangePush, nvtx.RangePop


def _nvtx_package():
    try:
        import nvtx
    except ImportError:
        return None
    return nvtx.push_range, nvtx.pop_range
