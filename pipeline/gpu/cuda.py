"""The one place that imports CuPy for the pipeline's own machinery, and the kernel launch helpers."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..errors import GPUError


@functools.cache
def cupy() -> Any:
    """CuPy, imported on first use so CPU-only installs never need it."""
    try:
        import cupy as cp
    except ImportError as e:
        raise GPUError(f"CuPy is not installed ({e}); install the project with .[cuda12] or .[cuda13]") from e
    return cp


def gpu_status(index: int | None = None) -> tuple[bool, str]:
    """(usable, reason): whether CuPy imports and sees a working CUDA device (``index``, or any)."""
    try:
        cp = cupy()
        count = cp.cuda.runtime.getDeviceCount()
    except GPUError as e:
        return False, str(e)
    except Exception as e:  # CUDA driver missing or broken: CuPy raises its own runtime errors
        return False, f"no usable CUDA device ({e})"
    if count < 1:
        return False, "no CUDA device found"
    if index is not None and index >= count:
        return False, f"there is no GPU {index}; this machine has {_list_devices(cp, count)}"
    return True, ""


def _list_devices(cp, count: int) -> str:
    names = []
    for i in range(count):
        try:
            name = cp.cuda.runtime.getDeviceProperties(i)["name"]
            names.append(f"cuda:{i} ({name.decode() if isinstance(name, bytes) else name})")
        except Exception:  # a device that cannot be queried is still listed
            names.append(f"cuda:{i}")
    return ", ".join(names)


_KERNELS: dict[tuple[int, str, str, tuple[str, ...]], Any] = {}


def raw_kernel(source: str, name: str, options: tuple[str, ...] = ("-std=c++17",)) -> Any:
    """A compiled RawKernel, cached per device, source, name and options.

    Keyed on the source too, so two kernels that share a name (a plugin's and a built-in one, or one
    template with other constants baked in) never get each other's code. Names record parameters, for
    readable traces. CuPy compiles on first launch and keeps the binary in its on-disk cache.
    """
    cp = cupy()
    key = (cp.cuda.runtime.getDevice(), source, name, tuple(options))
    kernel = _KERNELS.get(key)
    if kernel is None:
        kernel = _KERNELS[key] = cp.RawKernel(source, name, options=tuple(options))
    return kernel


def launch_2d(
    kernel: Any, width: int, height: int, args: tuple, block: tuple[int, int] = (32, 8), planes: int = 1
) -> None:
    """Launch one thread per (x, y[, plane]) on the current stream (the caller's ``with stream:``)."""
    grid = ((width + block[0] - 1) // block[0], (height + block[1] - 1) // block[1], planes)
    kernel(grid, (*block, 1), args)


def launch_1d(kernel: Any, n: int, args: tuple, block: int = 256) -> None:
    kernel(((n + block - 1) // block,), (block,), args)


def float_literal(v: float) -> str:
    """An exact C++ float literal (hex), so constants baked into kernel source lose no bits."""
    return f"{float(np.float32(v)).hex()}f"


def i32(v: int) -> np.int32:
    return np.int32(v)


def f32(v: float) -> np.float32:
    return np.float32(v)
