"""Decoding on the GPU (NVDEC) through PyAV's hardware acceleration, frames left in device memory.

``--decode nvdec`` opens the input with a CUDA ``HWAccel``: FFmpeg decodes on the GPU's video engines
and leaves each picture in an NV12 surface in device memory, which the processor reads in place (no
host round trip, no upload, no extra copy; see :mod:`pipeline.gpu.surfaces`). ``--decode auto`` tries
that and falls back to the CPU decoder with a notice when NVDEC cannot take the stream.

FFmpeg must use CuPy's CUDA context, not make its own: asking for the primary context (PyAV's default)
fails once CuPy has made it current with other flags (EOPNOTSUPP), so the device context is created with
``primary_ctx=0, current_ctx=1`` in a thread where CuPy's context is current. Software fallback is off:
a stream NVDEC refuses fails at its first frame (:class:`~pipeline.errors.DecoderRefused`) instead of
decoding silently on the CPU into frames the device path cannot read.
"""

from __future__ import annotations

import gc
from typing import Callable

from av.codec.hwaccel import HWAccel

from .errors import DecoderRefused, GPUError
from .log import log

def accel(device_id: int = 0) -> HWAccel:
    return HWAccel(device_type="cuda", device=str(device_id), allow_software_fallback=False, is_hw_owned=True,
                   options={"primary_ctx": "0", "current_ctx": "1"})


def open_decoded(open_source: Callable, decode: str, device_id: int):
    """The source for ``decode`` ("nvdec" or "auto"): ``open_source(hwaccel)`` with NVDEC, and for "auto"
    the CPU decoder (``open_source(None)``) with a notice when NVDEC refuses the stream or the GPU."""
    try:
        return open_source(accel(device_id))
    except (DecoderRefused, GPUError) as e:
        if decode == "nvdec":
            raise
        reason = _first_line(e)
    # What the refused try half-made is in reference cycles nothing can close: PyAV's container when it
    # refuses the hardware decoder in its constructor, a source refused at its first frame. A collection
    # frees them (and the file they hold open) now, not at some later one: a batch worker would hold one
    # per such file. Once per refused input, after the exception and its frames are gone.
    gc.collect()
    log.info(f"{reason}; decoding on the CPU")
    return open_source(None)


def _first_line(error: BaseException) -> str:
    text = str(error).splitlines()
    return text[0] if text else type(error).__name__
