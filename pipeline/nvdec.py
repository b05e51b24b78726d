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
import threading
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


class DecoderPool:
    """NVDEC decoders kept open from one run to the next in a long-lived process (a batch worker's files).

    Making a decoder costs 50-110 ms at its first packet and freeing one 130-250 ms, holding the
    interpreter's lock (H200, 1080p to 4K): more than a short clip's decoding. A run whose stream has the
    codec and parameter sets (extradata) of the last one decodes with that run's decoders, flushed as after
    a seek; a decoder whose frames are still held when its run ends is not kept. Only the last stream's
    decoders stay (their surface pools are device memory), and nothing is freed while a run holds them.
    One run at a time: runs side by side would each leave their decoders here. Used by runs with NVDEC
    sessions (:mod:`pipeline.gops`); a run with one session makes its own.
    """

    def __init__(self):
        self._key: tuple | None = None
        self._idle: list = []
        self._lock = threading.Lock()
        self.reused = 0  # decoders handed out again

    @staticmethod
    def key(ctx, hwaccel) -> tuple:
        """What a decoder serves: its GPU, codec and parameter sets."""
        return getattr(hwaccel, "device_id", None), ctx.name, bytes(ctx.extradata or b"")

    def take(self, key: tuple, count: int) -> list:
        """Up to ``count`` idle decoders of ``key`` (fewer or none: the caller makes the rest)."""
        with self._lock:
            if key != self._key:  # another stream's decoders will not serve: free them before this run's
                stale, self._idle, self._key = self._idle, [], None
                taken = []
            else:
                stale, taken, self._idle = [], self._idle[:count], self._idle[count:]
                self.reused += len(taken)
        del stale  # freed here, outside the lock
        return taken

    def give(self, key: tuple, contexts: list) -> None:
        """Decoders a run is done with (flushed, no frame of theirs held): kept for the next run of ``key``;
        another stream's idle ones go."""
        dropped: list = []
        with self._lock:
            if key != self._key:
                dropped, self._idle, self._key = self._idle, [], key
            self._idle = self._idle + list(contexts)
        del dropped  # freed here, outside the lock

    def close(self) -> None:
        """Free the idle decoders (the pool stays usable: the next run makes its own again)."""
        with self._lock:
            idle, self._idle, self._key = self._idle, [], None
        del idle

    def __enter__(self) -> DecoderPool:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
