"""CUDA failures as one line: what was needed, what the device had free (cudaMemGetInfo), exit 5.

CuPy raises its own types (``OutOfMemoryError``, ``CUDARuntimeError``, ``CUDADriverError``, compile
errors): every one of them becomes a :class:`~pipeline.errors.GPUError`, at set-up or mid-run. And a CuPy
object whose constructor failed half-way still runs its ``__del__``, which then fails on the attribute
never set ("Exception ignored in: <function Stream.__del__>", with a traceback, after our one line):
:func:`quiet_half_built_objects` keeps that to the debug log.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from ..errors import GPUError
from ..log import log
from .cuda import cupy

_MiB = 2**20
_OOM_CODES = {2}  # cudaErrorMemoryAllocation
_ALLOCATING = re.compile(r"allocating ([\d,]+) bytes")


def is_cuda_error(error: BaseException) -> bool:
    return type(error).__module__.startswith(("cupy", "cupy_backends"))


def is_out_of_memory(error: BaseException) -> bool:
    if isinstance(error, MemoryError):
        return True
    status = getattr(error, "status", None)
    return status in _OOM_CODES or "out of memory" in str(error).lower() or "MemoryAllocation" in str(error)


def device_memory() -> tuple[int, int] | None:
    """(free, total) bytes of the current device; None when even that fails (a lost context)."""
    try:
        free, total = cupy().cuda.runtime.memGetInfo()
        return int(free), int(total)
    except Exception:
        return None


def _mib(n: int) -> str:
    return f"{n / _MiB:,.0f} MiB"


def _needed(error: BaseException) -> int | None:
    match = _ALLOCATING.search(str(error))  # CuPy's OutOfMemoryError: "Out of memory allocating 1,024 bytes"
    return int(match.group(1).replace(",", "")) if match else None


def cuda_error(error: BaseException, *, needed: int | None = None, what: str = "") -> GPUError:
    """The one line for a CUDA failure: out of device memory with the sizes, or the CUDA error itself,
    with the device's free memory either way (what the user can act on)."""
    memory = device_memory()
    have = f"{_mib(memory[0])} free of {_mib(memory[1])}" if memory else "free memory unknown"
    detail = " ".join(str(error).split())
    if is_out_of_memory(error):
        needed = needed if needed is not None else _needed(error)
        want = f"{what} needs {_mib(needed)}" if needed is not None else (what or "an allocation failed")
        return GPUError(f"out of device memory: {want}, {have} ({detail}); lower --in-flight, "
                        "--arena-headroom or the resolution")
    where = f" while {what}" if what else ""
    return GPUError(f"CUDA error{where}: {type(error).__name__}: {detail} ({have})")


def quiet_half_built_objects() -> None:
    """Send CuPy's destructor errors to the debug log instead of stderr (installed once per process)."""
    previous = sys.unraisablehook
    if getattr(previous, "_pipeline_quiet_cupy", False):
        return

    def hook(unraisable: Any) -> None:
        if _from_cupy(unraisable.object) or (unraisable.exc_value is not None and _raised_in_cupy(unraisable)):
            log.debug(f"ignored in a CuPy destructor: {unraisable.exc_type.__name__}: {unraisable.exc_value}")
            return
        previous(unraisable)

    hook._pipeline_quiet_cupy = True
    sys.unraisablehook = hook


def _from_cupy(obj: Any) -> bool:
    module = getattr(obj, "__module__", None) or getattr(type(obj), "__module__", "")
    return str(module).startswith(("cupy", "cupy_backends"))


def _raised_in_cupy(unraisable: Any) -> bool:
    tb = unraisable.exc_traceback
    while tb is not None:
        if tb.tb_frame.f_globals.get("__name__", "").startswith(("cupy", "cupy_backends")):
            return True
        tb = tb.tb_next
    return False


def creating(what: str, make):
    """``make()``, its CUDA failure turned into the one line (``what``: "creating CUDA streams")."""
    quiet_half_built_objects()
    try:
        return make()
    except Exception as e:
        if is_cuda_error(e):
            raise cuda_error(e, what=what) from e
        raise
