"""10-bit conversions (i420p10, p010) and the filters that take luma, on every device.

As in test_kernels: each body runs on the CPU backend and on CUDA, is checked against float64 NumPy from the
formulas, and on CUDA must give the CPU reference's bits.
"""

from __future__ import annotations

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
    i420p10_to_rgb_cpu,
    layout_nbytes,
    p010_to_rgb_cpu,
    rgb_to_i420_cpu,
    rgb_to_i420p10_cpu,
    to_rgb_cuda,
)
from pipeline.filters import fuse_pointwise, parse_chain
from pipeline.filters.spatial import sobel_cpu
from pipeline.video import LUMA, Colour, VideoFormat

MATRICES = ["bt601", "bt709", "bt2020"]


def quantisation(colour: Colour, depth: int) -> tuple[float, float, float, float, int]:
    """(Y offset, Y scale, C offset, C scale, top code): limited Y = 64 + 876 Y', C = 512 + 896 C' at 10 bits."""
    top = (1 << depth) - 1
    if colour.full_range:
        return 0.0, top, 1 << (depth - 1), top, top
    s = 1 << (depth - 8)
    return 16.0 * s, 219.0 * s, 128.0 * s, 224.0 * s, top


def yuv_to_rgb_f64(y, u, v, colour: Colour, depth: int) -> np.ndarray:
    off, ys, coff, cs, _ = quantisation(colour, depth)
    up = lambda p: p.astype(np.float64).repeat(2, 0).repeat(2, 1)  # noqa: E731
    ycc = np.stack([(y.astype(np.float64) - off) / ys, (up(u) - coff) / cs, (up(v) - coff) / cs])
    return np.clip(np.einsum("ij,jhw->ihw", np.linalg.inv(ycbcr_matrix(colour)), ycc), 0, 1)


def rgb_to_yuv_f64(rgb: np.ndarray, colour: Colour, depth: int) -> list[np.ndarray]:
    off, ys, coff, cs, top = quantisation(colour, depth)
    m = ycbcr_matrix(colour)
    rgb = rgb.astype(np.float64)
    mean = (rgb[:, 0::2, 0::2] + rgb[:, 0::2, 1::2] + rgb[:, 1::2, 0::2] + rgb[:, 1::2, 1::2]) / 4
    chroma = np.einsum("ij,jhw->ihw", m[1:], mean)
    planes = [off + ys * np.einsum("j,jhw->hw", m[0], rgb), coff + cs * chroma[0], coff + cs * chroma[1]]
    return [np.clip(np.floor(p + 0.5), 0, top) for p in planes]


def noise_i420p10(fmt: VideoFormat, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 1024, fmt.nbytes, dtype=np.uint16)


def to_rgb(device: str, layout: str, src, fmt: VideoFormat, fused: tuple = ()) -> np.ndarray:
    cpu = converter("to_rgb", layout, fmt, "cpu") if device == "cpu" else None
    (rgb,) = on_device(device, lambda s, out: cpu(s, out), lambda s, out: to_rgb_cuda(layout, s, fmt, out, fused),
                       [src], [sentinel_like((3, fmt.height, fmt.width), np.float32)])
    return rgb


def from_rgb(device: str, layout: str, rgb: np.ndarray, fmt: VideoFormat, fused: tuple = ()) -> np.ndarray:
    dtype = np.uint16 if layout == "i420p10" else np.uint8
    cpu = converter("from_rgb", layout, fmt, "cpu") if device == "cpu" else None
    (out,) = on_device(device, lambda r, dst: cpu(r, dst), lambda r, dst: from_rgb_cuda(layout, r, fmt, dst, fused),
                       [rgb], [sentinel_like((fmt.nbytes,), dtype)])
    return out


# --- 10-bit I420 both ways --------------------------------------------------------------------------


@pytest.mark.parametrize("device", all_devices())
@pytest.mark.parametrize("colour", COLOURS, ids=COLOUR_IDS)
@pytest.mark.parametrize("size", KERNEL_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_i420p10_to_rgb(device, colour, size):
    fmt = VideoFormat(*size, colour, 10)
    yuv = noise_i420p10(fmt, seed=size[0])
    got = to_rgb(device, "i420p10", yuv, fmt)
    assert not np.isnan(got).any() and got.min() >= 0.0 and got.max() <= 1.0
    np.testing.assert_allclose(got, yuv_to_rgb_f64(*fmt.planes(yuv), colour, 10), rtol=0, atol=2e-6)
    if device == "cuda":
        np.testing.assert_array_equal(got, to_rgb("cpu", "i420p10", yuv, fmt))


@pytest.mark.parametrize("device", all_devices())
@pytest.mark.parametrize("colour", COLOURS, ids=COLOUR_IDS)
@pytest.mark.parametrize("size", KERNEL_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("kind", ["noise", "smooth"])
def test_rgb_to_i420p10(device, colour, size, kind):
    fmt = VideoFormat(*size, colour, 10)
    rgb = image(kind, *size, seed=7)
    got = from_rgb(device, "i420p10", rgb, fmt)
    assert got.max() <= 1023
    for plane, expected in zip(fmt.planes(got), rgb_to_yuv_f64(rgb, colour, 10)):
        assert max_abs_diff(plane, expected) <= 1  # float32 against float64 at a rounding boundary
    if device == "cuda":
        np.testing.assert_array_equal(got, from_rgb("cpu", "i420p10", rgb, fmt))


def test_i420p10_reference_takes_the_bytes_that_hold_the_samples():
    """The frame plan's buffers are bytes: the references view them as uint16."""
    fmt = VideoFormat(32, 16, Colour("bt2020"), 10)
    yuv = noise_i420p10(fmt, seed=1)
    a, b = (np.empty((3, 16, 32), np.float32) for _ in range(2))
    i420p10_to_rgb_cpu(yuv, fmt, a)
    i420p10_to_rgb_cpu(yuv.view(np.uint8), fmt, b)
    np.testing.assert_array_equal(a, b)
    out = np.zeros(layout_nbytes("i420p10", fmt), np.uint8)
    rgb_to_i420p10_cpu(a, fmt, out)
    words = np.zeros(fmt.nbytes, np.uint16)
    rgb_to_i420p10_cpu(a, fmt, words)
    np.testing.assert_array_equal(out.view(np.uint16), words)


@pytest.mark.parametrize("matrix", MATRICES)
@pytest.mark.parametrize("full_range, black, white", [(False, 64, 940), (True, 0, 1023)], ids=["limited", "full"])
def test_10bit_known_values(matrix, full_range, black, white):
    fmt = VideoFormat(4, 2, Colour(matrix, full_range), 10)

    def flat(y: int) -> np.ndarray:
        buf = np.empty(fmt.nbytes, np.uint16)
        py, pu, pv = fmt.planes(buf)
        py[...], pu[...], pv[...] = y, 512, 512
        return buf

    for value, y in ((0.0, black), (1.0, white)):
        np.testing.assert_allclose(to_rgb("cpu", "i420p10", flat(y), fmt), value, atol=1e-6)
        assert np.array_equal(from_rgb("cpu", "i420p10", np.full((3, 2, 4), value, np.float32), fmt), flat(y))
    grey = to_rgb("cpu", "i420p10", flat((black + white) // 2), fmt)
    assert np.ptp(grey) == 0  # neutral chroma: R = G = B


def test_10bit_limited_range_pure_green_bt2020():
    # Y = 64 + 876 * 0.678 = 657.93; Cb = 512 - 896 * 0.678 / 1.8814 = 189.11; Cr = 512 - 896 * 0.678 / 1.4746 = 100.03.
    fmt = VideoFormat(2, 2, Colour("bt2020", False), 10)
    green = np.zeros((3, 2, 2), np.float32)
    green[1] = 1.0
    y, u, v = fmt.planes(from_rgb("cpu", "i420p10", green, fmt))
    assert (y == 658).all() and (u == 189).all() and (v == 100).all()


# --- P010: NVDEC's 10-bit surfaces, read in place --------------------------------------------------------


def p010_planes(fmt: VideoFormat, yuv: np.ndarray, pitch: int, low_bits: bool, xp=np):
    """(Y, UV) views as NVDEC gives them: uint16 with rows padded to ``pitch`` samples, each sample << 6
    (``low_bits``: garbage in the 6 low bits, which a reader must ignore)."""
    w, h = fmt.width, fmt.height
    y, u, v = fmt.planes(yuv)
    rng = np.random.default_rng(5)
    y_full = rng.integers(0, 65536, (h, pitch), dtype=np.uint16)
    uv_full = rng.integers(0, 65536, (h // 2, pitch), dtype=np.uint16)
    noise = (lambda shape: rng.integers(0, 64, shape, dtype=np.uint16)) if low_bits else (lambda shape: 0)
    y_full[:, :w] = (y << 6) | noise(y.shape)
    uv = uv_full.reshape(h // 2, pitch // 2, 2)
    uv[:, : w // 2, 0] = (u << 6) | noise(u.shape)
    uv[:, : w // 2, 1] = (v << 6) | noise(v.shape)
    y_dev, uv_dev = xp.asarray(y_full), xp.asarray(uv_full).reshape(h // 2, pitch // 2, 2)
    return y_dev[:, :w], uv_dev[:, : w // 2, :]


@pytest.mark.parametrize("low_bits", [False, True], ids=["clean", "low-bits-set"])
@pytest.mark.parametrize("colour", COLOURS, ids=COLOUR_IDS)
def test_p010_reference_is_the_10bit_reference_on_the_same_samples(colour, low_bits):
    fmt = VideoFormat(190, 106, colour, 10)
    yuv = noise_i420p10(fmt, seed=2)
    planes = p010_planes(fmt, yuv, pitch=256, low_bits=low_bits)
    assert planes[0].strides == (512, 2) and planes[1].strides == (512, 4, 2)
    got = np.full((3, fmt.height, fmt.width), np.nan, np.float32)
    p010_to_rgb_cpu(planes, fmt, got)
    np.testing.assert_array_equal(got, to_rgb("cpu", "i420p10", yuv, fmt))


@pytest.mark.gpu
@pytest.mark.parametrize("low_bits", [False, True], ids=["clean", "low-bits-set"])
@pytest.mark.parametrize("colour", COLOURS, ids=COLOUR_IDS)
@pytest.mark.parametrize("text", ["", "grayscale", "eq=contrast=1.2:saturation=0.5"])
def test_p010_kernel_reads_a_padded_cupy_surface_in_place(colour, low_bits, text):
    """The device path: P010 planes in CuPy arrays with a padded pitch (as NVDEC leaves them), converted in
    place (with pointwise filters folded in), give the CPU reference's bits."""
    import cupy

    fmt = VideoFormat(190, 106, colour, 10)
    yuv = noise_i420p10(fmt, seed=4)
    chain = parse_chain(text)
    for f in chain:
        f.use_colour(colour)
    expected = to_rgb("cpu", "i420p10", yuv, fmt)
    for f in chain:
        expected = run_filter("cpu", f, expected)
    y, uv = p010_planes(fmt, yuv, pitch=256, low_bits=low_bits, xp=cupy)
    out = cupy.full((3, fmt.height, fmt.width), cupy.nan, cupy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        converter("to_rgb", "p010", fmt, "cuda", tuple(chain))((y, uv), out)
    stream.synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(out), expected)


def nv12_planes(fmt: VideoFormat, yuv: np.ndarray, pitch: int, xp=np):
    """NV12 (Y, UV) uint8 views with rows padded to ``pitch`` bytes, as NVDEC leaves 8-bit surfaces."""
    w, h = fmt.width, fmt.height
    y, u, v = fmt.planes(yuv)
    rng = np.random.default_rng(7)
    y_full = rng.integers(0, 256, (h, pitch), dtype=np.uint8)
    uv_full = rng.integers(0, 256, (h // 2, pitch), dtype=np.uint8)
    y_full[:, :w] = y
    uv = uv_full.reshape(h // 2, pitch // 2, 2)
    uv[:, : w // 2, 0], uv[:, : w // 2, 1] = u, v
    return xp.asarray(y_full)[:, :w], xp.asarray(uv_full).reshape(h // 2, pitch // 2, 2)[:, : w // 2, :]


def test_nv12_reference_is_the_i420_reference_on_the_same_samples():
    fmt = VideoFormat(190, 106, Colour("bt709"))
    yuv = np.random.default_rng(3).integers(0, 256, fmt.nbytes, dtype=np.uint8)
    got = np.full((3, fmt.height, fmt.width), np.nan, np.float32)
    converter("to_rgb", "nv12", fmt, "cpu")(nv12_planes(fmt, yuv, pitch=256), got)
    np.testing.assert_array_equal(got, to_rgb("cpu", "i420", yuv, fmt))


@pytest.mark.gpu
@pytest.mark.parametrize("colour", COLOURS, ids=COLOUR_IDS)
def test_nv12_kernel_reads_a_padded_cupy_surface_in_place(colour):
    import cupy

    fmt = VideoFormat(190, 106, colour)
    yuv = np.random.default_rng(4).integers(0, 256, fmt.nbytes, dtype=np.uint8)
    y, uv = nv12_planes(fmt, yuv, pitch=256, xp=cupy)
    out = cupy.full((3, fmt.height, fmt.width), cupy.nan, cupy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        converter("to_rgb", "nv12", fmt, "cuda")((y, uv), out)
    stream.synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(out), to_rgb("cpu", "i420", yuv, fmt))


# --- filters that take luma: the input's own matrix ----------------------------------------------------------


def in_gamut_yuv(fmt: VideoFormat, seed: int = 0) -> np.ndarray:
    """Noise YUV whose RGB never clips: Y' in [0.25, 0.75], |Cb'|, |Cr'| <= 0.1 (so R, G, B stay in (0, 1))."""
    rng = np.random.default_rng(seed)
    off, ys, coff, cs, _ = quantisation(fmt.colour, fmt.depth)
    dtype = np.uint16 if fmt.depth > 8 else np.uint8
    buf = np.empty(fmt.nbytes, dtype)
    y, u, v = fmt.planes(buf)
    y[...] = np.round(off + ys * rng.uniform(0.25, 0.75, y.shape))
    u[...] = np.round(coff + cs * rng.uniform(-0.1, 0.1, u.shape))
    v[...] = np.round(coff + cs * rng.uniform(-0.1, 0.1, v.shape))
    return buf


def through(device: str, text: str, yuv: np.ndarray, fmt: VideoFormat, fold: bool = False) -> np.ndarray:
    """YUV -> RGB -> the chain (bound to the input's colour, as the frame plan binds it) -> YUV."""
    layout = "i420p10" if fmt.depth > 8 else "i420"
    chain = fuse_pointwise(parse_chain(text))
    for f in chain:
        f.use_colour(fmt.colour)
    if fold:  # on CUDA, a pointwise chain runs inside the conversion kernels
        return from_rgb(device, layout, to_rgb(device, layout, yuv, fmt, tuple(chain)), fmt)
    rgb = to_rgb(device, layout, yuv, fmt)
    for f in chain:
        rgb = run_filter(device, f, rgb)
    return from_rgb(device, layout, rgb, fmt)


@pytest.mark.parametrize("device", all_devices())
@pytest.mark.parametrize("depth", [8, 10])
@pytest.mark.parametrize("colour", COLOURS, ids=COLOUR_IDS)
@pytest.mark.parametrize("text", ["grayscale", "eq=saturation=0"])
def test_grey_keeps_the_luma_plane_and_makes_chroma_neutral(device, depth, colour, text):
    fmt = VideoFormat(190, 106, colour, depth)
    yuv = in_gamut_yuv(fmt, seed=depth)
    y0 = fmt.planes(yuv)[0]
    neutral = 1 << (depth - 1)
    for fold in ([False, True] if device == "cuda" else [False]):
        y, u, v = fmt.planes(through(device, text, yuv, fmt, fold))
        assert max_abs_diff(y, y0) <= 1, f"{text} moved Y' (fold={fold})"
        assert (u == neutral).all() and (v == neutral).all()
        if device == "cuda":
            np.testing.assert_array_equal(np.concatenate([y.ravel(), u.ravel(), v.ravel()]),
                                          through("cpu", text, yuv, fmt))


def test_grey_with_another_matrix_would_move_luma():
    """The check above can fail: BT.709 weights on a BT.2020 frame move Y' by many codes."""
    fmt = VideoFormat(64, 32, Colour("bt2020"), 10)
    rgb = smooth_rgb(64, 32, seed=3, low=0.1, high=0.9)
    yuv = from_rgb("cpu", "i420p10", rgb, fmt)
    (f,) = parse_chain("grayscale")
    f.use_colour(Colour("bt709"))
    out = from_rgb("cpu", "i420p10", run_filter("cpu", f, to_rgb("cpu", "i420p10", yuv, fmt)), fmt)
    assert max_abs_diff(fmt.planes(out)[0], fmt.planes(yuv)[0]) > 4


@pytest.mark.parametrize("matrix", MATRICES)
def test_sobel_takes_the_luma_of_the_bound_matrix(matrix):
    (f,) = parse_chain("sobel=scale=0.5")
    f.use_colour(Colour(matrix))
    src = smooth_rgb(64, 40, seed=6)
    got = run_filter("cpu", f, src)
    kr, kg, kb = LUMA[matrix]
    lum = np.pad(kr * src[0].astype(np.float64) + kg * src[1] + kb * src[2], 1, mode="reflect")
    at = lambda j, k: lum[j:j + 40, k:k + 64]  # noqa: E731
    gx = (at(0, 2) - at(0, 0)) + 2 * (at(1, 2) - at(1, 0)) + (at(2, 2) - at(2, 0))
    gy = (at(2, 0) - at(0, 0)) + 2 * (at(2, 1) - at(0, 1)) + (at(2, 2) - at(0, 2))
    np.testing.assert_allclose(got[0], np.minimum(np.hypot(gx, gy) * 0.5, 1), atol=2e-6)
    assert np.array_equal(got[0], got[2])
    other = "bt709" if matrix != "bt709" else "bt601"
    assert not np.array_equal(got[0], sobel_cpu(src, 0.5, other))


@pytest.mark.parametrize("device", all_devices())
@pytest.mark.parametrize("matrix", MATRICES)
@pytest.mark.parametrize("text", ["grayscale", "eq=contrast=1.3:saturation=1.6:gamma=1.2", "sobel=scale=2"])
def test_luma_filters_on_every_device(device, matrix, text):
    (f,) = parse_chain(text)
    f.use_colour(Colour(matrix))
    src = noise_rgb(190, 106, seed=9)
    got = run_filter(device, f, src)
    assert not np.isnan(got).any()
    if device == "cuda":  # the same float32 steps as the reference
        np.testing.assert_allclose(got, run_filter("cpu", f, src), rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("matrix", MATRICES)
@pytest.mark.parametrize("layout", ["i420", "i420p10"])
def test_luma_filters_folded_into_the_conversions_are_bit_identical(matrix, layout):
    depth = 10 if layout == "i420p10" else 8
    fmt = VideoFormat(190, 106, Colour(matrix, False), depth)
    yuv = in_gamut_yuv(fmt, seed=1)
    for text in ("grayscale", "eq=contrast=1.3:saturation=0.7:gamma=1.4"):
        (f,) = parse_chain(text)
        f.use_colour(fmt.colour)
        separate = run_filter("cuda", f, to_rgb("cuda", layout, yuv, fmt))
        np.testing.assert_array_equal(to_rgb("cuda", layout, yuv, fmt, (f,)), separate)
        back = from_rgb("cuda", layout, run_filter("cuda", f, separate), fmt)
        np.testing.assert_array_equal(from_rgb("cuda", layout, separate, fmt, (f,)), back)


def test_plain_8bit_i420_is_unchanged_by_the_depth_parameter():
    """The 8-bit constants are the ones they always were (128 is zero chroma, 255 the top code)."""
    fmt = VideoFormat(64, 32, Colour("bt709"))
    rgb = smooth_rgb(64, 32, seed=2)
    a = np.zeros(fmt.nbytes, np.uint8)
    rgb_to_i420_cpu(rgb, fmt, a)
    expected = np.concatenate([p.astype(np.uint8).ravel() for p in rgb_to_yuv_f64(rgb, fmt.colour, 8)])
    assert max_abs_diff(a, expected) <= 1
