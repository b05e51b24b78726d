"""``pipeline warmup``: compile every built-in CUDA kernel once per machine, ahead of the first run.

CuPy compiles a kernel with NVRTC the first time its source is seen and keeps the binary in its on-disk
cache (``CUPY_CACHE_DIR``, by default ``~/.cupy/kernel_cache``); later processes only load it. A first
run on a fresh machine therefore spends seconds compiling before its first frame. This command pays that
cost ahead: the conversions in every layout, the default chain as ``pipeline run`` folds it, and every
built-in filter at its default settings (for each colour matrix). A marker in the cache directory records
that it ran, so a run can say, once, that it is compiling.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from . import __version__
from .config import DEFAULT_FILTERS
from .errors import ConfigError
from .log import log

def cache_dir() -> Path:
    return Path(os.environ.get("CUPY_CACHE_DIR") or Path.home() / ".cupy" / "kernel_cache")


def marker() -> Path:
    from .gpu.cuda import cupy

    cc = cupy().cuda.Device().compute_capability
    return cache_dir() / f"pipeline-{__version__}-sm{cc}.warm"


def is_warm() -> bool:
    try:
        return marker().exists()
    except OSError:
        return True  # an unreadable cache is CuPy's to report; say nothing here


def notice_if_cold() -> None:
    """Say once per machine (and cache) that kernels are being compiled, before the first run does it."""
    if is_warm():
        return
    log.info("first run with this GPU's kernel cache: compiling CUDA kernels (seconds, once; "
             "`pipeline warmup` compiles them all ahead of time)")
    _mark("kernels compiled by a first run")


def _mark(text: str) -> None:
    try:
        path = marker()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"pipeline {__version__}: {text}\n")
    except OSError:
        pass  # a read-only cache: CuPy compiles in memory, and the notice may repeat


def warm(chains: tuple[str, ...] = (DEFAULT_FILTERS,)) -> dict[str, float | int | str]:
    """Compile the conversions, ``chains`` as runs fold them, and every built-in filter; write the marker."""
    from .filters import FILTERS, fuse_pointwise, parse_chain
    from .processor import prepare_kernels
    from .video import Colour

    t0 = time.perf_counter()
    count = 0
    for in_layout in ("i420", "i420p10", "nv12", "p010", "rgb24"):
        for out_layout in ("i420", "i420p10", "rgb24"):
            prepare_kernels([], in_layout, out_layout)
            count += 2
    for text in chains:
        chain = fuse_pointwise(parse_chain(text))
        for in_layout in ("i420", "nv12"):
            prepare_kernels(chain, in_layout, "i420")
        count += len(chain) + 2
    parse_chain("")  # registers the built-ins
    for name, cls in sorted(FILTERS.items()):
        if not cls.__module__.startswith("pipeline."):
            continue
        try:
            f = cls()
        except ConfigError:  # needs settings of its own (a file, a size): compiled by its first run
            continue
        for matrix in ("bt709", "bt601", "bt2020"):  # filters that take luma have a kernel per matrix
            f.use_colour(Colour(matrix))
            f.prepare()
        count += 1
    _mark("kernels compiled by `pipeline warmup`")
    return {"kernels": count, "seconds": round(time.perf_counter() - t0, 2), "cache": str(cache_dir())}
