"""Kernels: colour conversion, gblur and eq on every device against the CPU references, and the references
themselves against known values and OpenCV."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from conftest import all_devices
from pipeline.filters import parse_chain
from pipeline.filters.blur import gaussian_taps
from pipeline.filters.color import rgb_to_yuv_cpu, rgb_to_yuv_cuda, yuv_to_rgb_cpu, yuv_to_rgb_cuda
from pipeline.frames import Colour, VideoFormat

# 190x106: neither side a multiple of the launch blocks (32x8, and 16x8 over the 95x53 chroma grid).
SIZES = [(160, 96), (190, 106)]
COLOURS = [Colour(matrix=m, full_range=r) for m in ("bt601", "bt709") for r in (False, True)]
COLOUR_IDS = [f"{c.matrix}-{'full' if c.full_range else 'limited'}" for c in COLOURS]


# --- inputs -----------------------------------------------------------------------------------------


def noise_rgb(w: int, h: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((3, h, w), dtype=np.float32)


def smooth_rgb(w: int, h: int, seed: int = 0, low: float = 0.0, high: float = 1.0) -> np.ndarray:
    """Random but smooth: a coarse random grid upscaled with cubic interpolation, then clipped."""
    coarse = np.random.default_rng(seed).random((3, h // 8 + 2, w // 8 + 2), dtype=np.float32)
    planes = [cv2.resize(p, (w, h), interpolation=cv2.INTER_CUBIC) for p in coarse]
    return np.clip(np.stack(planes) * (high - low) + low, low, high).astype(np.float32)


def noise_i420(fmt: VideoFormat, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, fmt.nbytes, dtype=np.uint8)


def image(kind: str, w: int, h: int, seed: int = 0) -> np.ndarray:
    return noise_rgb(w, h, seed) if kind == "noise" else smooth_rgb(w, h, seed)


# --- running a kernel on a device ---------------------------------------------------------------------


def on_device(device: str, cpu_call, cuda_call, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> list:
    """Run ``cpu_call(*inputs, *outputs)`` or its CUDA twin on copies; return the outputs as NumPy arrays.

    Outputs start as NaN / 0xAB, so a pixel a kernel forgets to write shows up as a mismatch.
    """
    if device == "cpu":
        outs = [o.copy() for o in outputs]
        cpu_call(*[i.copy() for i in inputs], *outs)
        return outs
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        d_in = [cupy.asarray(i) for i in inputs]
        d_out = [cupy.asarray(o) for o in outputs]
        cuda_call(*d_in, *d_out)
        stream.synchronize()
        result = [cupy.asnumpy(o) for o in d_out]
    stream.synchronize()
    return result


def sentinel_like(shape, dtype) -> np.ndarray:
    return np.full(shape, np.nan if np.dtype(dtype).kind == "f" else 0xAB, dtype)


def convert_to_rgb(device: str, yuv: np.ndarray, fmt: VideoFormat) -> np.ndarray:
    (rgb,) = on_device(
        device,
        lambda y, out: yuv_to_rgb_cpu(y, fmt, out),
        lambda y, out: yuv_to_rgb_cuda(y, fmt, out),
        [yuv],
        [sentinel_like((3, fmt.height, fmt.width), np.float32)],
    )
    return rgb


def convert_to_yuv(device: str, rgb: np.ndarray, fmt: VideoFormat) -> np.ndarray:
    (yuv,) = on_device(
        device,
        lambda r, out: rgb_to_yuv_cpu(r, fmt, out),
        lambda r, out: rgb_to_yuv_cuda(r, fmt, out),
        [rgb],
        [sentinel_like((fmt.nbytes,), np.uint8)],
    )
    return yuv


def run_filter(device: str, f, src: np.ndarray) -> np.ndarray:
    _, h, w = src.shape
    ow, oh = f.output_size(w, h)
    scratch = [sentinel_like(s, np.float32) for s in f.scratch_shapes(w, h)]
    n = len(scratch)

    def call(method):
        return lambda s, *rest: method(s, rest[n], list(rest[:n]))

    outputs = on_device(device, call(f.cpu), call(f.cuda), [src], [*scratch, sentinel_like((3, oh, ow), np.float32)])
    return outputs[-1]


def reference_filter(f, src: np.ndarray) -> np.ndarray:
    return run_filter("cpu", f, src)


def max_lsb(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.abs(a.astype(np.int16) - b.astype(np.int16)).max())


# --- colour conversion on every device -------------------------------------------------------------------


@pytest.mark.parametrize("device", all_devices())
@pytest.mark.parametrize("colour", COLOURS, ids=COLOUR_IDS)
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_yuv_to_rgb_matches_reference(device, colour, size):
    fmt = VideoFormat(*size, colour)
    yuv = noise_i420(fmt, seed=size[0])
    expected = np.full((3, fmt.height, fmt.width), np.nan, np.float32)
    yuv_to_rgb_cpu(yuv, fmt, expected)
    got = convert_to_rgb(device, yuv, fmt)
    assert not np.isnan(got).any(), "pixels left unwritten"
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    assert got.min() >= 0.0 and got.max() <= 1.0


@pytest.mark.parametrize("device", all_devices())
@pytest.mark.parametrize("colour", COLOURS, ids=COLOUR_IDS)
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("kind", ["noise", "smooth"])
def test_rgb_to_yuv_matches_reference(device, colour, size, kind):
    fmt = VideoFormat(*size, colour)
    rgb = image(kind, *size, seed=7)
    expected = np.zeros(fmt.nbytes, np.uint8)
    rgb_to_yuv_cpu(rgb, fmt, expected)
    got = convert_to_yuv(device, rgb, fmt)
    assert max_lsb(got, expected) <= 1


# --- filters on every device ------------------------------------------------------------------------------


@pytest.mark.parametrize("device", all_devices())
@pytest.mark.parametrize("sigma", [0.5, 1.5, 4.0])
@pytest.mark.parametrize("size", [*SIZES, (14, 8)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("kind", ["noise", "smooth"])
def test_gblur_matches_reference(device, sigma, size, kind):
    (f,) = parse_chain(f"gblur=sigma={sigma}")
    src = image(kind, *size, seed=3)
    got = run_filter(device, f, src)
    assert got.shape == src.shape
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, reference_filter(f, src), rtol=0, atol=1e-4)


EQ_SETTINGS = [
    "eq",
    "eq=contrast=1.3:brightness=-0.1:saturation=1.5",
    "eq=contrast=-0.5:brightness=0.2:saturation=0",
    "eq=contrast=2:saturation=3",
]


@pytest.mark.parametrize("device", all_devices())
@pytest.mark.parametrize("chain", EQ_SETTINGS)
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_eq_matches_reference(device, chain, size):
    (f,) = parse_chain(chain)
    src = noise_rgb(*size, seed=5)
    got = run_filter(device, f, src)
    np.testing.assert_allclose(got, reference_filter(f, src), rtol=0, atol=1e-5)


@pytest.mark.parametrize("device", all_devices())
@pytest.mark.parametrize("gamma", [0.5, 2.2])
def test_eq_gamma_matches_reference(device, gamma):
    (f,) = parse_chain(f"eq=contrast=1.1:saturation=1.2:gamma={gamma}")
    src = smooth_rgb(190, 106, seed=9)
    got = run_filter(device, f, src)
    np.testing.assert_allclose(got, reference_filter(f, src), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("device", all_devices())
def test_default_chain_end_to_end_on_frame(device):
    """yuv -> rgb -> gblur -> eq -> yuv on one device, against the same steps on the CPU."""
    fmt = VideoFormat(190, 106, Colour("bt709", False))
    rgb0 = smooth_rgb(fmt.width, fmt.height, seed=11, low=0.05, high=0.95)
    yuv = np.zeros(fmt.nbytes, np.uint8)
    rgb_to_yuv_cpu(rgb0, fmt, yuv)

    def chain_on(dev):
        rgb = convert_to_rgb(dev, yuv, fmt)
        for f in parse_chain("gblur=sigma=1.5,eq=contrast=1.1:saturation=1.1"):
            rgb = run_filter(dev, f, rgb)
        return convert_to_yuv(dev, rgb, fmt)

    assert max_lsb(chain_on(device), chain_on("cpu")) <= 1


# --- the CPU references themselves -----------------------------------------------------------------------


@pytest.mark.parametrize("colour", COLOURS, ids=COLOUR_IDS)
def test_round_trip_on_smooth_image(colour):
    fmt = VideoFormat(190, 106, colour)
    rgb = smooth_rgb(fmt.width, fmt.height, seed=1, low=0.1, high=0.9)  # inside the gamut: nothing clips
    yuv = np.zeros(fmt.nbytes, np.uint8)
    rgb_to_yuv_cpu(rgb, fmt, yuv)
    back = np.zeros(fmt.nbytes, np.uint8)
    rgb_to_yuv_cpu(convert_to_rgb("cpu", yuv, fmt), fmt, back)
    luma = fmt.width * fmt.height
    assert max_lsb(back[:luma], yuv[:luma]) <= 2
    assert max_lsb(back[luma:], yuv[luma:]) <= 2


def _flat(fmt: VideoFormat, y: int, u: int, v: int) -> np.ndarray:
    buf = np.empty(fmt.nbytes, np.uint8)
    py, pu, pv = fmt.planes(buf)
    py[...], pu[...], pv[...] = y, u, v
    return buf


@pytest.mark.parametrize("matrix", ["bt601", "bt709"])
@pytest.mark.parametrize(
    "full_range, black, white", [(False, 16, 235), (True, 0, 255)], ids=["limited", "full"]
)
def test_known_values(matrix, full_range, black, white):
    fmt = VideoFormat(4, 2, Colour(matrix, full_range))
    for y, value in ((black, 0.0), (white, 1.0)):
        rgb = convert_to_rgb("cpu", _flat(fmt, y, 128, 128), fmt)
        np.testing.assert_allclose(rgb, value, atol=1e-6)
    grey = convert_to_rgb("cpu", _flat(fmt, (black + white) // 2, 128, 128), fmt)
    assert np.ptp(grey) == 0  # neutral chroma: R = G = B
    for value, y in ((0.0, black), (1.0, white)):
        yuv = convert_to_yuv("cpu", np.full((3, 2, 4), value, np.float32), fmt)
        assert np.array_equal(yuv, _flat(fmt, y, 128, 128))


def test_limited_range_pure_red_bt601():
    # BT.601 limited, R' = 1: Y = 16 + 219 * 0.299 = 81.48, Cr = 128 + 112 = 240, Cb = 128 - 112 * 0.299 / 0.886 = 90.2.
    fmt = VideoFormat(2, 2, Colour("bt601", False))
    red = np.zeros((3, 2, 2), np.float32)
    red[0] = 1.0
    y, u, v = fmt.planes(convert_to_yuv("cpu", red, fmt))
    assert (y == 81).all() and (u == 90).all() and (v == 240).all()


def test_colour_matrix_matters():
    rgb = smooth_rgb(32, 16, seed=2)
    a = convert_to_yuv("cpu", rgb, VideoFormat(32, 16, Colour("bt601", False)))
    b = convert_to_yuv("cpu", rgb, VideoFormat(32, 16, Colour("bt709", False)))
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("sigma", [0.5, 1.5, 3.0])
@pytest.mark.parametrize("size", [(190, 106), (14, 8)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_gblur_cpu_equals_opencv(sigma, size):
    (f,) = parse_chain(f"gblur=sigma={sigma}")
    src = noise_rgb(*size, seed=4)
    k = len(gaussian_taps(sigma))
    assert k == 2 * max(1, int(np.ceil(3 * sigma))) + 1
    expected = np.stack([cv2.GaussianBlur(p, (k, k), sigma, borderType=cv2.BORDER_REFLECT_101) for p in src])
    np.testing.assert_allclose(reference_filter(f, src), expected, rtol=0, atol=1e-5)


def test_gblur_keeps_a_constant_image():
    (f,) = parse_chain("gblur=sigma=2")
    src = np.full((3, 20, 30), 0.25, np.float32)
    np.testing.assert_allclose(reference_filter(f, src), src, atol=1e-6)


def test_eq_defaults_are_identity():
    (f,) = parse_chain("eq")
    src = noise_rgb(64, 32, seed=6)
    np.testing.assert_allclose(reference_filter(f, src), src, rtol=0, atol=1e-6)


def test_eq_zero_saturation_gives_grey():
    (f,) = parse_chain("eq=saturation=0:contrast=1.2")
    out = reference_filter(f, noise_rgb(64, 32, seed=8))
    np.testing.assert_allclose(out[0], out[1], atol=1e-6)
    np.testing.assert_allclose(out[1], out[2], atol=1e-6)


def test_eq_brightness_and_gamma():
    src = smooth_rgb(32, 16, seed=10, low=0.2, high=0.7)
    (bright,) = parse_chain("eq=brightness=0.1")
    np.testing.assert_allclose(reference_filter(bright, src), src + np.float32(0.1), atol=1e-6)
    (gamma,) = parse_chain("eq=gamma=2")
    np.testing.assert_allclose(reference_filter(gamma, src), np.sqrt(src), rtol=1e-6)


# --- pointwise filters folded into the colour conversions -------------------------------------------

FOLDABLE = ["eq=contrast=1.3:saturation=0.7:gamma=1.4", "hue=degrees=30", "invert", "vignette"]


@pytest.mark.gpu
@pytest.mark.parametrize("text", FOLDABLE)
@pytest.mark.parametrize("colour", COLOURS, ids=COLOUR_IDS)
def test_pointwise_folded_into_yuv_to_rgb_is_bit_identical(text, colour):
    """yuv->rgb with a filter folded in == yuv->rgb, then the filter on its own."""
    fmt = VideoFormat(190, 106, colour)
    (f,) = parse_chain(text)
    yuv = noise_i420(fmt, seed=3)
    separate = run_filter("cuda", f, convert_to_rgb("cuda", yuv, fmt))
    (folded,) = on_device("cuda", None, lambda y, out: yuv_to_rgb_cuda(y, fmt, out, (f,)), [yuv],
                          [sentinel_like((3, fmt.height, fmt.width), np.float32)])
    np.testing.assert_array_equal(folded, separate)


@pytest.mark.gpu
@pytest.mark.parametrize("text", FOLDABLE)
def test_pointwise_folded_into_rgb_to_yuv_is_bit_identical(text):
    fmt = VideoFormat(190, 106, Colour("bt709", False))
    (f,) = parse_chain(text)
    rgb = smooth_rgb(fmt.width, fmt.height, seed=4)
    separate = convert_to_yuv("cuda", run_filter("cuda", f, rgb), fmt)
    (folded,) = on_device("cuda", None, lambda r, out: rgb_to_yuv_cuda(r, fmt, out, (f,)), [rgb],
                          [sentinel_like((fmt.nbytes,), np.uint8)])
    np.testing.assert_array_equal(folded, separate)
