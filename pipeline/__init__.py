"""pipeline: real-time GPU video processing.

PyAV decodes into a ring of pinned host buffers, frames are uploaded on CUDA streams into a
preallocated device arena, filtered with CuPy kernels, downloaded into pinned buffers and encoded with PyAV.

The Python API::

    import pipeline

    with pipeline.frames("input.mp4", filters="gblur=sigma=2") as frames:
        for frame in frames:              # frame.array: H x W x 3 uint8 RGB (CuPy on CUDA, NumPy on the CPU)
            ...

    stats = pipeline.run("input.mp4", "output.mp4", filters="eq=contrast=1.2", stage=my_stage)
    result = pipeline.run_many(["cam1.mp4", "cam2.mp4"], "out/")   # side by side, one GPU's memory shared

Importing the package loads neither PyAV, CuPy nor OpenCV: the names below are imported on first use.
"""

from __future__ import annotations

import importlib

from .errors import (ConfigError, GPUError, GPUStalled, InputError, Interrupted, OutputError, PipelineError,
                     PluginError, StageError)

# typing.TYPE_CHECKING without importing typing or logging here: until the command's first lines take
# Ctrl-C (pipeline.launch), one would end in the interpreter's traceback of the import it interrupted.
TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers see; at run time each is imported on first use (__getattr__)
    from typing import Any

    from .adapters import ArraySource, NullSink
    from .api import Frame, FrameIterator, frames, run, run_many
    from .config import RunConfig
    from .engine import Pipeline
    from .nvdec import DecoderPool
    from .processor import StageFrame

__version__ = "0.1.0"

_LAZY = {
    "frames": "api",
    "run": "api",
    "run_many": "api",
    "DecoderPool": "nvdec",
    "Frame": "api",
    "FrameIterator": "api",
    "StageFrame": "processor",
    "ArraySource": "adapters",
    "NullSink": "adapters",
    "Pipeline": "engine",
    "RunConfig": "config",
}

__all__ = ["ConfigError", "GPUError", "GPUStalled", "InputError", "Interrupted", "OutputError", "PipelineError",
           "PluginError", "StageError", "__version__", *_LAZY]

def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
