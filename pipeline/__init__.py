"""pipeline: real-time GPU video processing.

PyAV decodes into a ring of pinned host buffers, frames are uploaded on CUDA streams into a
preallocated device arena, filtered with CuPy kernels, downloaded into pinned buffers and encoded with PyAV.
"""

from .config import RunConfig
from .engine import Pipeline
from .errors import ConfigError, GPUError, InputError, OutputError, PipelineError

__version__ = "0.1.0"
__all__ = ["RunConfig", "Pipeline", "PipelineError", "ConfigError", "InputError", "OutputError", "GPUError"]
