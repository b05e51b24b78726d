"""The CUDA driver's context calls through ctypes, for the start-up work that runs before CuPy is imported.

CuPy works in each GPU's primary context. Retaining that context through the driver (what CuPy's first
call would do) and making it current in a thread lets the driver create it while Python imports, and lets
FFmpeg open NVDEC in it (``current_ctx=1``) while CuPy is still importing: both end up in the context CuPy
takes. ctypes lets go of the interpreter's lock for each call. Retained contexts stay retained for the
life of the process, as CuPy keeps its own.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from typing import Any

from ..errors import GPUError

_SIGNATURES = (
    ("cuInit", [ctypes.c_uint]),
    ("cuDeviceGet", [ctypes.POINTER(ctypes.c_int), ctypes.c_int]),
    ("cuDevicePrimaryCtxRetain", [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]),
    ("cuCtxSetCurrent", [ctypes.c_void_p]),
)
_contexts: dict[int, ctypes.c_void_p] = {}
_lock = threading.Lock()


@functools.cache
def _load() -> Any:
    """libcuda with its calls' C types set (a CUresult each), or None where there is no driver."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
        for name, argtypes in _SIGNATURES:
            function = getattr(driver, name)
            function.argtypes, function.restype = argtypes, ctypes.c_int
    except (OSError, AttributeError):
        return None
    return driver


def primary_context(index: int) -> ctypes.c_void_p | None:
    """GPU ``index``'s primary context, retained once per process; None where there is no driver or no
    such GPU."""
    if not 0 <= index < 2**31:  # a C int: ctypes would pass a larger one cut down to another GPU's index
        return None
    with _lock:
        if index in _contexts:
            return _contexts[index]
        driver = _load()
        if driver is None:
            return None
        device, context = ctypes.c_int(), ctypes.c_void_p()
        try:
            ok = (driver.cuInit(0) == 0 and driver.cuDeviceGet(ctypes.byref(device), index) == 0
                  and driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), device.value) == 0)
        except ctypes.ArgumentError:
            return None
        if ok:
            _contexts[index] = context
        return context if ok else None


def retain_primary_context(index: int) -> bool:
    """Make GPU ``index``'s primary context (see :func:`pipeline.startup.create_cuda_context_early`);
    False where there is no driver or no such GPU."""
    return primary_context(index) is not None


def make_primary_current(index: int) -> None:
    """GPU ``index``'s primary context, CuPy's, current in the calling thread."""
    context = primary_context(index)
    if context is None or _load().cuCtxSetCurrent(context) != 0:
        raise GPUError(f"cannot use GPU {index}: no CUDA driver or no such GPU")


class EarlyDevice:
    """The GPU a run will use, before its backend exists: enough to open NVDEC in the primary context
    while CuPy imports (duck-types the two things a source takes from a CUDA backend)."""

    name = "cuda"

    def __init__(self, device_id: int):
        self.device_id = device_id

    def make_current(self) -> None:
        make_primary_current(self.device_id)
