"""Luma of planar RGB with the frames' own colour matrix: the NumPy twin of the prelude's ``luma601``,
``luma709`` and ``luma2020`` (the same float32 weights from :data:`pipeline.video.LUMA`, summed in the same
order), for the filters that take luma (``grayscale``, ``eq``'s saturation, ``sobel``).

With the input's matrix, the luma of a frame converted from YUV is its Y' again: grayscale keeps the Y plane.
"""

from __future__ import annotations

import functools

import numpy as np

from ..video import LUMA


@functools.cache
def weights(matrix: str) -> tuple[np.float32, np.float32, np.float32]:
    """(Kr, Kg, Kb) as float32."""
    kr, kg, kb = LUMA[matrix]
    return np.float32(kr), np.float32(kg), np.float32(kb)


def luma(rgb: np.ndarray, matrix: str) -> np.ndarray:
    """(Kr R + Kg G) + Kb B of a (3, ...) float32 array, rounded step by step as the kernels do."""
    kr, kg, kb = weights(matrix)
    return kr * rgb[0] + kg * rgb[1] + kb * rgb[2]


def cuda_luma(matrix: str) -> str:
    """The prelude's function for ``matrix``: ``luma601``, ``luma709`` or ``luma2020``."""
    if matrix not in LUMA:
        raise ValueError(f"Invalid colour matrix ({matrix!r}). Supported values are {', '.join(LUMA)}.")
    return f"luma{matrix[2:]}"
