"""The CPU (NumPy) conversions: the reference the CUDA kernels give the same bits as.

Every step is one float32 operation in the order the kernels do it (see :mod:`pipeline.convert`).
"""

from __future__ import annotations

import numpy as np

from ..video import VideoFormat
from .layouts import YuvCoefficients

_F = np.float32
_INV255 = _F(1.0 / 255.0)


def _clamp(v: np.ndarray, low, high, out: np.ndarray | None = None) -> np.ndarray:
    """``v`` clamped to [low, high] as CUDA's fminf(fmaxf(v, low), high): NaN (a stage's own write) gives
    ``low``, where np.clip would keep it and casting it to an integer is undefined."""
    return np.fmin(np.fmax(v, low, out=out), high, out=out)


def _quantise(v: np.ndarray, out: np.ndarray, top: np.float32 = _F(255)) -> None:
    """round(v) clamped to [0, top], into ``out`` (``v`` is overwritten)."""
    _clamp(np.floor(v + _F(0.5), out=v), 0, top, out=v)
    out[...] = v


def _samples(buf: np.ndarray, dtype) -> np.ndarray:
    """A flat buffer as samples of ``dtype`` (a byte buffer holding 10-bit samples is viewed as uint16)."""
    flat = buf.reshape(-1)
    return flat if flat.dtype == dtype else flat.view(dtype)


def yuv_to_rgb(y: np.ndarray, u: np.ndarray, v: np.ndarray, k: YuvCoefficients, rgb: np.ndarray) -> None:
    """Y (H, W), U and V (H/2, W/2) code values -> (3, H, W) float32 in [0, 1]; chroma repeated over 2x2."""
    yp = (y.astype(_F) - k.y_off) * k.y_inv
    cb = ((u.astype(_F) - k.c_off) * k.c_inv).repeat(2, 0).repeat(2, 1)
    cr = ((v.astype(_F) - k.c_off) * k.c_inv).repeat(2, 0).repeat(2, 1)
    np.clip(yp + k.r_cr * cr, 0, 1, out=rgb[0])
    np.clip(yp - k.g_cb * cb - k.g_cr * cr, 0, 1, out=rgb[1])
    np.clip(yp + k.b_cb * cb, 0, 1, out=rgb[2])


def rgb_to_yuv(rgb: np.ndarray, k: YuvCoefficients, y: np.ndarray, u: np.ndarray, v: np.ndarray) -> None:
    """(3, H, W) float32 -> Y, U, V code values; chroma from the mean of each 2x2 block."""
    r, g, b = rgb[0], rgb[1], rgb[2]
    with np.errstate(invalid="ignore", over="ignore"):  # a stage's infinities and NaN, clamped as on CUDA
        _quantise(k.y_off + k.y_scale * (k.kr * r + k.kg * g + k.kb * b), y, k.top)
        ra, ga, ba = (_mean_2x2(c) for c in (r, g, b))
        lum = k.kr * ra + k.kg * ga + k.kb * ba
        _quantise(k.c_off + k.c_scale * ((ba - lum) * k.cb_inv), u, k.top)
        _quantise(k.c_off + k.c_scale * ((ra - lum) * k.cr_inv), v, k.top)


def _mean_2x2(c: np.ndarray) -> np.ndarray:
    return ((c[0::2, 0::2] + c[0::2, 1::2]) + (c[1::2, 0::2] + c[1::2, 1::2])) * _F(0.25)


def i420_to_rgb_cpu(yuv: np.ndarray, fmt: VideoFormat, rgb: np.ndarray) -> None:
    """I420 uint8 (flat) -> (3, H, W) float32 in [0, 1]; chroma is repeated over each 2x2 block."""
    yuv_to_rgb(*fmt.planes(yuv), YuvCoefficients.of(fmt.colour), rgb)


def rgb_to_i420_cpu(rgb: np.ndarray, fmt: VideoFormat, yuv: np.ndarray) -> None:
    """(3, H, W) float32 -> I420 uint8 (flat); chroma from the mean of each 2x2 block."""
    rgb_to_yuv(rgb, YuvCoefficients.of(fmt.colour), *fmt.planes(yuv))


def i420p10_to_rgb_cpu(yuv: np.ndarray, fmt: VideoFormat, rgb: np.ndarray) -> None:
    """10-bit I420 (flat uint16 samples 0..1023, or the bytes holding them) -> (3, H, W) float32."""
    yuv_to_rgb(*fmt.planes(_samples(yuv, np.uint16)), YuvCoefficients.of(fmt.colour, 10), rgb)


def rgb_to_i420p10_cpu(rgb: np.ndarray, fmt: VideoFormat, yuv: np.ndarray) -> None:
    """(3, H, W) float32 -> 10-bit I420 (flat uint16 samples, or the bytes that hold them)."""
    rgb_to_yuv(rgb, YuvCoefficients.of(fmt.colour, 10), *fmt.planes(_samples(yuv, np.uint16)))


def rgb24_to_rgb_cpu(packed: np.ndarray, fmt: VideoFormat, rgb: np.ndarray) -> None:
    """Packed uint8 RGB (flat or H x W x 3) -> (3, H, W) float32: value / 255."""
    hwc = packed.reshape(fmt.height, fmt.width, 3)
    for c in range(3):
        np.multiply(hwc[:, :, c], _INV255, out=rgb[c], dtype=_F)


def rgb_to_rgb24_cpu(rgb: np.ndarray, fmt: VideoFormat, packed: np.ndarray) -> None:
    """(3, H, W) float32 -> packed uint8 RGB: round(clamp(v, 0, 1) * 255)."""
    hwc = packed.reshape(fmt.height, fmt.width, 3)
    for c in range(3):
        v = _clamp(rgb[c], 0, 1) * _F(255)
        _quantise(v, hwc[:, :, c])


def _semi_planar(planes: tuple[np.ndarray, np.ndarray], fmt: VideoFormat, shift: int):
    """Y (H, >= W) and interleaved UV (H/2, >= W/2, 2) with padded rows -> the visible Y, U, V samples."""
    y, uv = planes
    w, h = fmt.width, fmt.height
    y, u, v = y[:h, :w], uv[: h // 2, : w // 2, 0], uv[: h // 2, : w // 2, 1]
    return (y >> shift, u >> shift, v >> shift) if shift else (y, u, v)


def nv12_to_rgb_cpu(planes: tuple[np.ndarray, np.ndarray], fmt: VideoFormat, rgb: np.ndarray) -> None:
    """(Y (H, >= W), UV (H/2, >= W/2, 2)) uint8 with padded rows -> (3, H, W) float32: the I420 reference on
    the same samples (what the CUDA kernel reads in place)."""
    yuv_to_rgb(*_semi_planar(planes, fmt, 0), YuvCoefficients.of(fmt.colour), rgb)


def p010_to_rgb_cpu(planes: tuple[np.ndarray, np.ndarray], fmt: VideoFormat, rgb: np.ndarray) -> None:
    """P010: NV12's planes in uint16, each 10-bit sample in the high bits (value << 6) -> (3, H, W) float32:
    the 10-bit I420 reference on the same samples."""
    yuv_to_rgb(*_semi_planar(planes, fmt, 6), YuvCoefficients.of(fmt.colour, 10), rgb)


CPU_IN = {"i420": i420_to_rgb_cpu, "i420p10": i420p10_to_rgb_cpu, "rgb24": rgb24_to_rgb_cpu,
          "nv12": nv12_to_rgb_cpu, "p010": p010_to_rgb_cpu}
CPU_OUT = {"i420": rgb_to_i420_cpu, "i420p10": rgb_to_i420p10_cpu, "rgb24": rgb_to_rgb24_cpu}
