"""Kernels: the colour conversions, gblur and eq on every device.

Each test body runs on the CPU backend and on CUDA. On both it is checked against an independent
computation (float64 NumPy from the formulas, or OpenCV), so the CPU reference itself can fail; on
CUDA the kernel must also match the CPU reference to the rounding the two share.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from utils import (
    COLOUR_IDS,
    COLOURS,
    KERNEL_SIZES,
    all_devices,
    image,
    max_abs_diff,
    noise_rgb,
    on_device,
    run_filter,
    sentinel_like,
    smooth_rgb,
    ycbcr_matrix,
)
from pipeline.convert import (
    converter,
    from_rgb_cuda,
    i420_to_rgb_cpu,
    rgb_to_i420_cpu,
    rgb_to_rgb24_cpu,
    rgb24_to_rgb_cpu,
    to_rgb_cuda,
)
from pipeline.filters import parse_chain
from pipeline.filters.blur import gaussian_taps
from pipeline.video import LUMA, Colour, VideoFormat


# --- inputs -----------------------------------------------------------------------------------------


def noise_i420(fmt: VideoFormat, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, fmt.nbytes, dtype=np.uint8)


# --- running a kernel on a device ---------------------------------------------------------------------


def convert_to_rgb(device: str, src: np.ndarray, fmt: VideoFormat, layout: str = "i420") -> np.ndarray:
    cpu = {"i420": i420_to_rgb_cpu, "rgb24": rgb24_to_rgb_cpu}[layout]
    (rgb,) = on_device(
        device,
        lambda s, out: cpu(s, fmt, out),
        lambda s, out: to_rgb_cuda(layout, s, fmt, out),
        [src],
        [sentinel_like((3, fmt.height, fmt.width), np.float32)],
    )
    return rgb


def convert_from_rgb(device: str, rgb: np.ndarray, fmt: VideoFormat, layout: str = "i420") -> np.ndarray:
    cpu = {"i420": rgb_to_i420_cpu, "rgb24": rgb_to_rgb24_cpu}[layout]
    nbytes = fmt.nbytes if layout == "i420" else fmt.width * fmt.height * 3
    (out,) = on_device(
        device,
        lambda r, dst: cpu(r, fmt, dst),
        lambda r, dst: from_rgb_cuda(layout, r, fmt, dst),
        [rgb],
        [sentinel_like((nbytes,), np.uint8)],
    )
    return out


def reference_filter(f, src: np.ndarray) -> np.ndarray:
    return run_filter("cpu", f, src)


# --- independent references (float64, from the formulas) ----------------------------------------------


def quantisation(colour: Colour) -> tuple[float, float, float]:
    """(Y offset, Y scale, C scale) of 8-bit code values."""
    return (0.0, 255.0, 255.0) if colour.full_range else (16.0, 219.0, 224.0)


def i420_to_rgb_f64(yuv: np.ndarray, fmt: VideoFormat) -> np.ndarray:
    y, u, v = (p.astype(np.float64) for p in fmt.planes(yuv))
    off, ys, cs = quantisation(fmt.colour)
    ycc = np.stack([(y - off) / ys, ((u - 128) / cs).repeat(2, 0).repeat(2, 1), ((v - 128) / cs).repeat(2, 0).repeat(2, 1)])
    rgb = np.einsum("ij,jhw->ihw", np.linalg.inv(ycbcr_matrix(fmt.colour)), ycc)
    return np.clip(rgb, 0, 1)


def rgb_to_i420_f64(rgb: np.ndarray, fmt: VideoFormat) -> np.ndarray:
    off, ys, cs = quantisation(fmt.colour)
    m = ycbcr_matrix(fmt.colour)
    rgb = rgb.astype(np.float64)
    luma = np.einsum("j,jhw->hw", m[0], rgb)
    mean = (rgb[:, 0::2, 0::2] + rgb[:, 0::2, 1::2] + rgb[:, 1::2, 0::2] + rgb[:, 1::2, 1::2]) / 4
    chroma = np.einsum("ij,jhw->ihw", m[1:], mean)
    planes = [off + ys * luma, 128 + cs * chroma[0], 128 + cs * chroma[1]]
    return np.concatenate([np.clip(np.floor(p + 0.5), 0, 255).astype(np.uint8).ravel() for p in planes])


# --- colour conversion on every device -------------------------------------------------------------------


@pytest.mark.parametrize("device", all_devices())
@pytest.mark.parametrize("colour", COLOURS, ids=COLOUR_IDS)
@pytest.mark.parametrize("size", KERNEL_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_i420_to_rgb(device, colour, size):
    fmt = VideoFormat(*size, colour)
    yuv = noise_i420(fmt, seed=size[0])
    got = convert_to_rgb(device, yuv, fmt)
    assert not np.isnan(got).any(), "pixels left unwritten"
    assert got.min() >= 0.0 and got.max() <= 1.0
    np.testing.assert_allclose(got, i420_to_rgb_f64(yuv, fmt), rtol=0, atol=2e-6)
    if device == "cuda":
        np.testing.assert_array_equal(got, convert_to_rgb("cpu", yuv, fmt))


@pytest.mark.parametrize("device", all_devices())
@pytest.mark.parametrize("colour", COLOURS, ids=COLOUR_IDS)
@pytest.mark.parametrize("size", KERNEL_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("kind", ["noise", "smooth"])
def test_rgb_to_i420(device, colour, size, kind):
    fmt = VideoFormat(*size, colour)
    rgb = image(kind, *size, seed=7)
    got = convert_from_rgb(device, rgb, fmt)
    # float32 against float64 sums: a value at a rounding boundary may land one code away.
    assert max_abs_diff(got, rgb_to_i420_f64(rgb, fmt)) <= 1
    if device == "cuda":
        assert max_abs_diff(got, convert_from_rgb("cpu", rgb, fmt)) <= 1


@pytest.mark.parametrize("device", all_devices())
def test_rgb24_both_ways(device):
    fmt = VideoFormat(190, 106)
    packed = np.random.default_rng(3).integers(0, 256, (106, 190, 3), dtype=np.uint8)
    rgb = convert_to_rgb(device, packed.ravel(), fmt, "rgb24")
    np.testing.assert_allclose(rgb, packed.transpose(2, 0, 1) / 255.0, rtol=0, atol=1e-7)
    back = convert_from_rgb(device, rgb, fmt, "rgb24")
    np.testing.assert_array_equal(back.reshape(106, 190, 3), packed)  # exact round trip
    planar = noise_rgb(190, 106, seed=4) * np.float32(1.4) - np.float32(0.2)  # out of range too: clamped
    got = convert_from_rgb(device, planar, fmt, "rgb24").reshape(106, 190, 3)
    expected = np.floor(np.clip(planar.astype(np.float64), 0, 1) * 255 + 0.5).astype(np.uint8).transpose(1, 2, 0)
    assert max_abs_diff(got, expected) <= 1


# What a stage may write into frame.planes: past [0, 1], infinite, NaN. Each value fills one 2x2 block of all
# three channels; the codes it gives (NaN as the low end, as CUDA's fmaxf takes it; +-inf less +-inf is NaN).
# None: as on the CPU, whatever that is (3e38 times the matrix overflows).
STAGE_VALUES = {"i420": [(np.nan, 0, 0), (np.inf, 255, 0), (-np.inf, 0, 0), (2.0, 255, 128), (-1.0, 0, 128),
                         (3e38, 255, None)],
                "rgb24": [(np.nan, 0, None), (np.inf, 255, None), (-np.inf, 0, None), (2.0, 255, None),
                          (-1.0, 0, None), (3e38, 255, None)]}


@pytest.mark.parametrize("device", all_devices())
@pytest.mark.parametrize("layout", ["i420", "rgb24"])
def test_what_a_stage_may_write_converts_back_alike_on_every_device(device, layout):
    """Clamped, without a warning on the CPU (NaN cast to an integer is undefined there), the CPU's bits on
    CUDA, and no block but its own changed."""
    import warnings

    fmt = VideoFormat(190, 106, Colour("bt709", False))
    clean = smooth_rgb(fmt.width, fmt.height, seed=5)
    rgb = clean.copy()
    for k, (value, _, _) in enumerate(STAGE_VALUES[layout]):
        rgb[:, 2:4, 4 * k:4 * k + 2] = value
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = convert_from_rgb(device, rgb, fmt, layout)
        base = convert_from_rgb(device, clean, fmt, layout)
    if device == "cuda":
        np.testing.assert_array_equal(got, convert_from_rgb("cpu", rgb, fmt, layout))
    if layout == "rgb24":
        got, base = got.reshape(fmt.height, fmt.width, 3), base.reshape(fmt.height, fmt.width, 3)
        for k, (_, code, _) in enumerate(STAGE_VALUES[layout]):
            assert (got[2:4, 4 * k:4 * k + 2] == code).all()
            got[2:4, 4 * k:4 * k + 2] = base[2:4, 4 * k:4 * k + 2]
    else:
        y, u, v = (p.copy() for p in fmt.planes(got))
        by, bu, bv = fmt.planes(base)
        for k, (_, luma, chroma) in enumerate(STAGE_VALUES[layout]):
            assert (y[2:4, 4 * k:4 * k + 2] == luma).all()
            assert chroma is None or u[1, 2 * k] == chroma == v[1, 2 * k]
            y[2:4, 4 * k:4 * k + 2], u[1, 2 * k], v[1, 2 * k] = by[2:4, 4 * k:4 * k + 2], bu[1, 2 * k], bv[1, 2 * k]
        got = np.concatenate([p.ravel() for p in (y, u, v)])
    np.testing.assert_array_equal(got.ravel(), base.ravel())


# --- filters on every device ------------------------------------------------------------------------------


@pytest.mark.parametrize("device", all_devices())
@pytest.mark.parametrize("sigma", [0.5, 1.5, 4.0])
@pytest.mark.parametrize("size", [*KERNEL_SIZES, (14, 8)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("kind", ["noise", "smooth"])
def test_gblur(device, sigma, size, kind):
    (f,) = parse_chain(f"gblur=sigma={sigma}")
    src = image(kind, *size, seed=3)
    got = run_filter(device, f, src)
    assert got.shape == src.shape
    assert not np.isnan(got).any()
    k = len(f.taps)
    expected = np.stack([cv2.GaussianBlur(p, (k, k), sigma, borderType=cv2.BORDER_REFLECT_101) for p in src])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 if device == "cuda" else 1e-5)
    if device == "cuda":
        np.testing.assert_allclose(got, reference_filter(f, src), rtol=0, atol=1e-4)


def eq_f64(src: np.ndarray, contrast=1.0, brightness=0.0, saturation=1.0, gamma=1.0) -> np.ndarray:
    c = (src.astype(np.float64) - 0.5) * contrast + 0.5 + brightness
    kr, kg, kb = LUMA["bt709"]
    lum = kr * c[0] + kg * c[1] + kb * c[2]
    return np.clip(lum + (c - lum) * saturation, 0, 1) ** (1.0 / gamma)


EQ_SETTINGS = [
    {},
    {"contrast": 1.3, "brightness": -0.1, "saturation": 1.5},
    {"contrast": -0.5, "brightness": 0.2, "saturation": 0},
    {"contrast": 2, "saturation": 3},
    {"contrast": 1.1, "saturation": 1.2, "gamma": 0.5},
    {"contrast": 1.1, "saturation": 1.2, "gamma": 2.2},
]


@pytest.mark.parametrize("device", all_devices())
@pytest.mark.parametrize("params", EQ_SETTINGS, ids=lambda p: ":".join(f"{k}={v}" for k, v in p.items()) or "none")
@pytest.mark.parametrize("size", KERNEL_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_eq(device, params, size):
    (f,) = parse_chain("eq" + ("=" + ":".join(f"{k}={v}" for k, v in params.items()) if params else ""))
    src = noise_rgb(*size, seed=5)
    got = run_filter(device, f, src)
    # float32 rounding of the contrast and saturation steps, amplified near 0 by a gamma: a few 1e-6.
    np.testing.assert_allclose(got, eq_f64(src, **params), rtol=1e-5, atol=1e-5)
    if device == "cuda":
        np.testing.assert_allclose(got, reference_filter(f, src), rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
def test_default_chain_end_to_end_on_frame():
    """yuv -> rgb -> gblur -> eq -> yuv on CUDA, against the same steps on the CPU."""
    fmt = VideoFormat(190, 106, Colour("bt709", False))
    rgb0 = smooth_rgb(fmt.width, fmt.height, seed=11, low=0.05, high=0.95)
    yuv = np.zeros(fmt.nbytes, np.uint8)
    rgb_to_i420_cpu(rgb0, fmt, yuv)

    def chain_on(dev):
        rgb = convert_to_rgb(dev, yuv, fmt)
        for f in parse_chain("gblur=sigma=1.5,eq=contrast=1.1:saturation=1.1"):
            rgb = run_filter(dev, f, rgb)
        return convert_from_rgb(dev, rgb, fmt)

    assert max_abs_diff(chain_on("cuda"), chain_on("cpu")) <= 1


# --- the references on hand-computed frames -----------------------------------------------------------


@pytest.mark.parametrize("colour", COLOURS, ids=COLOUR_IDS)
def test_round_trip_on_smooth_image(colour):
    fmt = VideoFormat(190, 106, colour)
    rgb = smooth_rgb(fmt.width, fmt.height, seed=1, low=0.1, high=0.9)  # inside the gamut: nothing clips
    yuv = convert_from_rgb("cpu", rgb, fmt)
    back = convert_from_rgb("cpu", convert_to_rgb("cpu", yuv, fmt), fmt)
    luma = fmt.width * fmt.height
    assert max_abs_diff(back[:luma], yuv[:luma]) <= 2
    assert max_abs_diff(back[luma:], yuv[luma:]) <= 2


def _flat(fmt: VideoFormat, y: int, u: int, v: int) -> np.ndarray:
    buf = np.empty(fmt.nbytes, np.uint8)
    py, pu, pv = fmt.planes(buf)
    py[...], pu[...], pv[...] = y, u, v
    return buf


@pytest.mark.parametrize("matrix", ["bt601", "bt709", "bt2020"])
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
        yuv = convert_from_rgb("cpu", np.full((3, 2, 4), value, np.float32), fmt)
        assert np.array_equal(yuv, _flat(fmt, y, 128, 128))


def test_limited_range_pure_red_bt601():
    # BT.601 limited, R' = 1: Y = 16 + 219 * 0.299 = 81.48, Cr = 128 + 112 = 240, Cb = 128 - 112 * 0.299 / 0.886 = 90.2.
    fmt = VideoFormat(2, 2, Colour("bt601", False))
    red = np.zeros((3, 2, 2), np.float32)
    red[0] = 1.0
    y, u, v = fmt.planes(convert_from_rgb("cpu", red, fmt))
    assert (y == 81).all() and (u == 90).all() and (v == 240).all()


def test_limited_range_pure_green_bt2020():
    # BT.2020 limited, G' = 1: Y = 16 + 219 * 0.678 = 164.48, Cb = 128 - 112 * 0.678 / 0.9407 = 47.28,
    # Cr = 128 - 112 * 0.678 / 0.7373 = 25.01.
    fmt = VideoFormat(2, 2, Colour("bt2020", False))
    green = np.zeros((3, 2, 2), np.float32)
    green[1] = 1.0
    y, u, v = fmt.planes(convert_from_rgb("cpu", green, fmt))
    assert (y == 164).all() and (u == 47).all() and (v == 25).all()


def test_colour_matrix_matters():
    rgb = smooth_rgb(32, 16, seed=2)
    outs = [convert_from_rgb("cpu", rgb, VideoFormat(32, 16, Colour(m, False))) for m in ("bt601", "bt709", "bt2020")]
    assert not np.array_equal(outs[0], outs[1]) and not np.array_equal(outs[1], outs[2])


def test_gblur_taps_follow_opencv():
    for sigma in (0.5, 1.5, 3.0):
        k = len(gaussian_taps(sigma))
        assert k == 2 * max(1, int(np.ceil(3 * sigma))) + 1
        np.testing.assert_allclose(gaussian_taps(sigma), cv2.getGaussianKernel(k, sigma).ravel(), atol=1e-7)


def test_gblur_keeps_a_constant_image():
    (f,) = parse_chain("gblur=sigma=2")
    src = np.full((3, 20, 30), 0.25, np.float32)
    np.testing.assert_allclose(reference_filter(f, src), src, atol=1e-6)


def test_eq_zero_saturation_gives_grey():
    (f,) = parse_chain("eq=saturation=0:contrast=1.2")
    out = reference_filter(f, noise_rgb(64, 32, seed=8))
    np.testing.assert_allclose(out[0], out[1], atol=1e-6)
    np.testing.assert_allclose(out[1], out[2], atol=1e-6)


# --- pointwise filters folded into the colour conversions -------------------------------------------

FOLDABLE = ["eq=contrast=1.3:saturation=0.7:gamma=1.4", "hue=degrees=30", "invert", "vignette"]


@pytest.mark.gpu
@pytest.mark.parametrize("text", FOLDABLE)
@pytest.mark.parametrize("colour", COLOURS, ids=COLOUR_IDS)
def test_pointwise_folded_into_i420_to_rgb_is_bit_identical(text, colour):
    """i420->rgb with a filter folded in == i420->rgb, then the filter on its own."""
    fmt = VideoFormat(190, 106, colour)
    (f,) = parse_chain(text)
    yuv = noise_i420(fmt, seed=3)
    separate = run_filter("cuda", f, convert_to_rgb("cuda", yuv, fmt))
    (folded,) = on_device("cuda", None, lambda y, out: to_rgb_cuda("i420", y, fmt, out, (f,)), [yuv],
                          [sentinel_like((3, fmt.height, fmt.width), np.float32)])
    np.testing.assert_array_equal(folded, separate)


@pytest.mark.gpu
@pytest.mark.parametrize("text", FOLDABLE)
@pytest.mark.parametrize("layout", ["i420", "rgb24"])
def test_pointwise_folded_into_the_conversion_back_is_bit_identical(text, layout):
    fmt = VideoFormat(190, 106, Colour("bt709", False))
    (f,) = parse_chain(text)
    rgb = smooth_rgb(fmt.width, fmt.height, seed=4)
    separate = convert_from_rgb("cuda", run_filter("cuda", f, rgb), fmt, layout)
    nbytes = separate.size
    (folded,) = on_device("cuda", None, lambda r, out: from_rgb_cuda(layout, r, fmt, out, (f,)), [rgb],
                          [sentinel_like((nbytes,), np.uint8)])
    np.testing.assert_array_equal(folded, separate)


@pytest.mark.gpu
@pytest.mark.parametrize("matrix", ["bt601", "bt709", "bt2020"])
def test_prelude_luma_matches_the_table(matrix):
    """The prelude's luma601/709/2020, compiled, against the one table in pipeline.video."""
    import cupy

    from pipeline.gpu.kernels import kernel

    k = kernel(r"""extern "C" __global__ void @NAME@(const float* rgb, float* out, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) out[i] = luma@M@(rgb[i], rgb[n + i], rgb[2 * n + i]);
    }""", f"test_luma_{matrix}", M=matrix[2:])
    rgb = noise_rgb(64, 1, seed=1).reshape(3, 64)
    out = cupy.empty(64, cupy.float32)
    k((1,), (64,), (cupy.asarray(rgb), out, np.int32(64)))
    kr, kg, kb = (np.float32(v) for v in LUMA[matrix])
    np.testing.assert_array_equal(cupy.asnumpy(out), (kr * rgb[0] + kg * rgb[1]) + kb * rgb[2])


def test_converter_refuses_fusion_on_the_cpu_and_unknown_layouts():
    fmt = VideoFormat(4, 2)
    with pytest.raises(ValueError, match="fuse"):
        converter("to_rgb", "i420", fmt, "cpu", parse_chain("invert"))
    with pytest.raises(ValueError, match="layout"):
        converter("to_rgb", "yuv444", fmt, "cpu")
