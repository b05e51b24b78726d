"""Frame layouts at the processor's two ends, and the float32 constants of each colour matrix and depth."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..video import Colour, VideoFormat

LAYOUTS = ("i420", "i420p10", "rgb24", "nv12", "p010")
DEVICE_LAYOUTS = frozenset({"nv12", "p010"})  # frames already in device memory (a hardware decoder's surfaces)
INPUT_ONLY = DEVICE_LAYOUTS
DEPTH = {"i420": 8, "i420p10": 10, "rgb24": 8, "nv12": 8, "p010": 10}


def check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"Invalid frame layout ({layout!r}). Supported values are {', '.join(LAYOUTS)}.")


def layout_depth(layout: str) -> int:
    """Bits per sample of a layout: 8, or 10 (``i420p10``, ``p010``)."""
    check_layout(layout)
    return DEPTH[layout]


def layout_dtype(layout: str):
    """The sample type a consumer sees: uint16 for 10-bit I420, else uint8."""
    return np.uint16 if layout_depth(layout) > 8 else np.uint8


def layout_nbytes(layout: str, fmt: VideoFormat) -> int:
    check_layout(layout)
    if layout == "rgb24":
        return fmt.width * fmt.height * 3
    return fmt.nbytes * (2 if DEPTH[layout] > 8 else 1)


def layout_shape(layout: str, fmt: VideoFormat) -> tuple[int, ...]:
    """The shape a consumer sees: I420 as PyAV's ``from_numpy_buffer``/``from_ndarray`` take it (samples of
    :func:`layout_dtype`), RGB24 as H x W x 3."""
    check_layout(layout)
    return (fmt.height, fmt.width, 3) if layout == "rgb24" else fmt.shape


@dataclass(frozen=True)
class YuvCoefficients:
    """float32 constants for one colour matrix, range and bit depth.

    8 bits: Y = 16 + 219 Y', C = 128 + 224 C' (limited), Y = 255 Y', C = 128 + 255 C' (full);
    10 bits: Y = 64 + 876 Y', C = 512 + 896 C' (limited), Y = 1023 Y', C = 512 + 1023 C' (full)."""

    y_off: np.float32  # 16 or 0 (64 or 0)
    y_scale: np.float32  # 219 or 255 (876 or 1023) (RGB -> YUV)
    c_scale: np.float32  # 224 or 255 (896 or 1023)
    y_inv: np.float32  # 1 / y_scale
    c_inv: np.float32
    kr: np.float32
    kg: np.float32
    kb: np.float32
    r_cr: np.float32  # R = Y' + r_cr Cr'
    g_cb: np.float32  # G = Y' - g_cb Cb' - g_cr Cr'
    g_cr: np.float32
    b_cb: np.float32  # B = Y' + b_cb Cb'
    cb_inv: np.float32  # Cb' = (B' - Y') * cb_inv
    cr_inv: np.float32
    c_off: np.float32 = np.float32(128.0)  # 128 or 512: the code of zero chroma
    top: np.float32 = np.float32(255.0)  # the largest code: 255 or 1023

    @classmethod
    @functools.cache
    def of(cls, colour: Colour, depth: int = 8) -> YuvCoefficients:
        kr, kb = colour.coefficients
        kg = 1.0 - kr - kb
        scale = 1 << (depth - 8)  # limited range codes scale with the depth; full range spans 2^depth - 1
        top = float((1 << depth) - 1)
        y_scale, c_scale = (top, top) if colour.full_range else (219.0 * scale, 224.0 * scale)
        c = np.float32
        return cls(
            y_off=c(0.0 if colour.full_range else 16.0 * scale),
            y_scale=c(y_scale),
            c_scale=c(c_scale),
            y_inv=c(1.0 / y_scale),
            c_inv=c(1.0 / c_scale),
            kr=c(kr),
            kg=c(kg),
            kb=c(kb),
            r_cr=c(2 * (1 - kr)),
            g_cb=c(2 * kb * (1 - kb) / kg),
            g_cr=c(2 * kr * (1 - kr) / kg),
            b_cb=c(2 * (1 - kb)),
            cb_inv=c(1 / (2 - 2 * kb)),
            cr_inv=c(1 / (2 - 2 * kr)),
            c_off=c(128.0 * scale),
            top=c(top),
        )
