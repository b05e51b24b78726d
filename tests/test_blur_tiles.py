"""The fused separable kernel behind gblur, boxblur and unsharp on the GPU.

On the CPU: the tile choice per radius, the kernel names (what is baked in) and which kernels a filter
launches (one fused kernel up to MAX_FUSED_RADIUS, the two passes and unsharp's mix above), with a
recording stand-in for the kernels. On the GPU: every radius 1..40 (the fallback included) at sizes that are
and are not multiples of the tile, boxblur and unsharp, against the CPU reference (cv2.sepFilter2D,
BORDER_REFLECT_101), tolerance 1e-4 as the other kernel tests.
"""

from __future__ import annotations

import re

import cv2
import numpy as np
import pytest
from utils import noise_rgb, one_filter

from pipeline.filters import blur
from pipeline.filters.blur import (
    MAX_FUSED_RADIUS,
    SHARED_LIMIT,
    FusedTile,
    _fused_source,
    fused_tile,
    gaussian_taps,
    separable_cpu,
    separable_cuda,
)
from pipeline.filters.spatial import box_taps

# 14x8: smaller than most radii (repeated reflection); 190x106: no side a multiple of any tile.
SIZES = [(14, 8), (190, 106), (1920, 1080)]
SIZE_IDS = [f"{w}x{h}" for w, h in SIZES]
# Around the tiles' edges (64x32, 64x64, 128x64), odd widths (scalar writes), single rows and columns.
EDGE_SIZES = [(63, 31), (64, 32), (65, 33), (127, 65), (129, 97), (200, 140), (1, 1), (1, 5), (5, 1), (2, 2),
              (3, 40), (40, 3), (33, 7)]


def gauss_taps(radius: int) -> np.ndarray:
    """Gaussian taps of exactly this radius (sigma = radius / 3)."""
    return cv2.getGaussianKernel(2 * radius + 1, radius / 3.0, ktype=cv2.CV_32F).ravel()


# --- tile choice ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("radius", range(1, MAX_FUSED_RADIUS + 1))
def test_every_radius_up_to_the_limit_has_a_tile(radius):
    tile = fused_tile(radius)
    assert isinstance(tile, FusedTile) and tile.radius == radius
    assert tile.width % 64 == 0, "a warp makes 64 outputs of a row (float2 pairs)"
    assert tile.height % tile.block_y == 0 and tile.height % tile.rows == 0
    assert tile.threads == 256 and tile.rows <= 16
    assert tile.shared_bytes == 4 * tile.height * (tile.width + 2 * radius) <= SHARED_LIMIT
    # the halo re-read stays bounded: under 1.7 loads per output up to radius 4 (sigma 1.33), 7.5 at the limit
    assert tile.loads_per_output() <= (1.7 if radius <= 4 else 7.5)


@pytest.mark.parametrize("radius", [MAX_FUSED_RADIUS + 1, 40, 64, 96, 192])
def test_large_radii_fall_back(radius):
    assert fused_tile(radius) is None
    with pytest.raises(ValueError, match="fused"):
        _fused_source(gauss_taps(radius).tobytes(), "t", False)


def test_radius_zero_is_refused():
    with pytest.raises(ValueError, match="radius"):
        fused_tile(0)


def test_sigma_one_uses_the_64x32_tile():
    tile = fused_tile(len(gaussian_taps(1.0)) // 2)
    assert (tile.radius, tile.width, tile.height, tile.block_y, tile.rows) == (3, 64, 32, 8, 16)
    assert tile.grid(3840, 2160, 3) == (60, 68, 3)
    assert tile.grid(190, 106, 3) == (3, 4, 3)
    assert tile.grid(1, 1, 3) == (1, 1, 3)
    assert tile.loads_per_output() == pytest.approx(70 * 44 / (64 * 32))


# --- kernel names and sources -------------------------------------------------------------------------------


def test_names_record_radius_taps_tile_and_mix():
    a, b = gaussian_taps(1.0), gaussian_taps(0.9)  # both radius 3
    src_a, name_a, _ = _fused_source(a.tobytes(), "gblur_s1", False)
    _, name_b, _ = _fused_source(b.tobytes(), "gblur_s1", False)
    _, name_mix, _ = _fused_source(a.tobytes(), "gblur_s1", True)
    assert name_a.startswith("pipeline_gblur_s1_fused_r3_") and name_a.endswith("_t64x32")
    assert name_a != name_b, "same radius, other taps: the digest tells them apart"
    assert name_mix == name_a + "_mix"
    assert re.fullmatch(r"[A-Za-z_]\w*", name_a)
    assert "@" not in src_a and name_a in src_a
    for t in a:
        assert float.hex(float(t)) + "f" in src_a  # taps baked in exactly


def test_box_taps_get_their_own_kernel():
    _, name, tile = _fused_source(box_taps(20).tobytes(), "boxblur_r20", False)
    assert "_fused_r20_" in name and name.endswith(f"_t{tile.width}x{tile.height}")


# --- what a filter launches (a recording stand-in for CuPy's kernels) ----------------------------------------


class Recorder:
    def __init__(self, calls: list, name: str):
        self.calls, self.name = calls, name

    def __call__(self, grid, block, args):
        self.calls.append((self.name, tuple(grid), tuple(block), args))


@pytest.fixture
def launches(monkeypatch):
    calls: list = []
    monkeypatch.setattr(blur, "raw_kernel", lambda source, name, *a: Recorder(calls, name))
    return calls


def run_recorded(spec: str, w: int = 190, h: int = 106):
    f = one_filter(spec)
    src = np.zeros((3, h, w), np.float32)
    dst, scratch = np.zeros_like(src), [np.zeros(s, np.float32) for s in f.scratch_shapes(w, h)]
    f.cuda(src, dst, scratch)
    return src, dst, scratch


def test_gblur_is_one_fused_launch(launches):
    src, dst, _ = run_recorded("gblur=sigma=1")
    ((name, grid, block, args),) = launches
    assert "_fused_r3_" in name and not name.endswith("_mix")
    assert grid == (3, 4, 3) and block == (32, 8, 1)
    assert args[0] is src and args[1] is dst
    assert [type(a) for a in args[2:]] == [np.int32, np.int32, np.float32]
    assert (int(args[2]), int(args[3])) == (190, 106)


def test_unsharp_mixes_in_the_fused_write(launches):
    run_recorded("unsharp=sigma=0.8:amount=2.5")
    ((name, _, _, args),) = launches
    assert name.startswith("pipeline_unsharp_s0p8_fused_r3_") and name.endswith("_mix")
    assert args[4] == np.float32(2.5)


def test_boxblur_at_the_limit_is_fused_and_above_it_takes_two_passes(launches):
    run_recorded(f"boxblur=radius={MAX_FUSED_RADIUS}")
    assert len(launches) == 1 and f"_fused_r{MAX_FUSED_RADIUS}_" in launches[0][0]
    launches.clear()
    src, dst, (tmp,) = run_recorded(f"boxblur=radius={MAX_FUSED_RADIUS + 1}")
    (h, _, _, h_args), (v, _, _, v_args) = launches
    assert "_h_r33_" in h and "_v_r33_" in v
    assert h_args[:2] == (src, tmp) and v_args[:2] == (tmp, dst)


def test_large_unsharp_takes_two_passes_and_the_mix(launches):
    run_recorded("unsharp=sigma=12:amount=2")  # radius 36
    names = [c[0] for c in launches]
    assert len(names) == 3 and "_h_r36_" in names[0] and "_v_r36_" in names[1]
    assert names[2] == "pipeline_unsharp_mix" and launches[2][3][3] == np.float32(2)


def test_sigma_printed_with_an_exponent_still_names_a_valid_kernel(launches):
    run_recorded("gblur=sigma=1e-05")
    assert re.fullmatch(r"[A-Za-z_]\w*", launches[0][0]), launches[0][0]


@pytest.mark.parametrize("spec", ["gblur=sigma=64", "gblur=sigma=11", "gblur=sigma=10.6"])
def test_largest_radii(launches, spec):
    radius = len(one_filter(spec).taps) // 2
    run_recorded(spec)
    assert len(launches) == (1 if radius <= MAX_FUSED_RADIUS else 2)


# --- on the GPU ---------------------------------------------------------------------------------------------


def gpu_separable(src: np.ndarray, taps: np.ndarray, amount: float | None = None, tag: str = "test"):
    """(dst, scratch) after separable_cuda on one non-blocking stream; both start as NaN."""
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        d_src = cupy.asarray(src)
        dst = cupy.full(src.shape, np.nan, np.float32)
        tmp = cupy.full(src.shape, np.nan, np.float32)
        separable_cuda(d_src, dst, tmp, taps, tag, amount)
        stream.synchronize()
        return cupy.asnumpy(dst), cupy.asnumpy(tmp)


def gpu_filter(f, src: np.ndarray) -> np.ndarray:
    import cupy

    _, h, w = src.shape
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        scratch = [cupy.full(s, np.nan, np.float32) for s in f.scratch_shapes(w, h)]
        dst = cupy.full(src.shape, np.nan, np.float32)
        f.cuda(cupy.asarray(src), dst, scratch)
        stream.synchronize()
        return cupy.asnumpy(dst)


def cpu_filter(f, src: np.ndarray) -> np.ndarray:
    _, h, w = src.shape
    dst = np.full(src.shape, np.nan, np.float32)
    f.cpu(src.copy(), dst, [np.full(s, np.nan, np.float32) for s in f.scratch_shapes(w, h)])
    return dst


def cpu_separable(src: np.ndarray, taps: np.ndarray) -> np.ndarray:
    dst = np.full(src.shape, np.nan, np.float32)
    separable_cpu(src, dst, taps)
    return dst


def check(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape
    assert np.isfinite(got).all(), "pixels left unwritten"
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
@pytest.mark.parametrize("radius", range(1, 41))
def test_gaussian_every_radius_matches_reference(radius, size):
    taps = gauss_taps(radius)
    src = noise_rgb(*size, seed=radius)
    got, scratch = gpu_separable(src, taps, tag=f"gauss_r{radius}")
    check(got, cpu_separable(src, taps))
    if radius <= MAX_FUSED_RADIUS:
        assert np.isnan(scratch).all(), "the fused kernel needs no scratch frame"


@pytest.mark.gpu
@pytest.mark.parametrize("size", EDGE_SIZES, ids=[f"{w}x{h}" for w, h in EDGE_SIZES])
@pytest.mark.parametrize("radius", [1, 2, 3, 4, 5, 16, 17, 32])
def test_tile_edges_and_tiny_frames(radius, size):
    taps = gauss_taps(radius)
    src = noise_rgb(*size, seed=7)
    check(gpu_separable(src, taps, tag=f"edge_r{radius}")[0], cpu_separable(src, taps))


@pytest.mark.gpu
@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
@pytest.mark.parametrize("radius", [1, 2, 3, 5, 8, 16, 17, 31, 32, 33, 40, 64])
def test_boxblur_matches_reference(radius, size):
    f = one_filter(f"boxblur=radius={radius}")
    src = noise_rgb(*size, seed=radius + 100)
    check(gpu_filter(f, src), cpu_filter(f, src))


UNSHARP = [
    "unsharp",  # sigma 1.5: radius 5
    "unsharp=sigma=0.3:amount=1",  # radius 1
    "unsharp=sigma=0.8:amount=2.5",
    "unsharp=amount=-1",
    "unsharp=sigma=4:amount=0.7",  # radius 12
    "unsharp=sigma=10.5:amount=5",  # radius 32, the fused limit
    "unsharp=sigma=12:amount=2",  # radius 36: two passes, then the mix kernel
]


@pytest.mark.gpu
@pytest.mark.parametrize("size", [*SIZES, (65, 33), (33, 7)], ids=[*SIZE_IDS, "65x33", "33x7"])
@pytest.mark.parametrize("spec", UNSHARP)
def test_unsharp_matches_reference(spec, size):
    f = one_filter(spec)
    src = noise_rgb(*size, seed=len(spec))
    check(gpu_filter(f, src), cpu_filter(f, src))


@pytest.mark.gpu
@pytest.mark.parametrize("spec", ["gblur=sigma=0.3", "gblur", "gblur=sigma=1.5", "gblur=sigma=4", "gblur=sigma=10.6",
                                  "gblur=sigma=11", "gblur=sigma=64", "gblur=sigma=1e-05"])
def test_gblur_filter_matches_reference(spec):
    f = one_filter(spec)
    src = noise_rgb(190, 106, seed=3)
    check(gpu_filter(f, src), cpu_filter(f, src))


@pytest.mark.gpu
@pytest.mark.parametrize("radius", [1, 3, 7, 20, 32])
def test_fused_equals_the_two_pass_fallback(radius, monkeypatch):
    taps = gauss_taps(radius)
    src = noise_rgb(190, 106, seed=11)
    fused, _ = gpu_separable(src, taps, tag="cmp")
    again, _ = gpu_separable(src, taps, tag="cmp")
    np.testing.assert_array_equal(again, fused)  # the cached kernel, a second frame: same answer
    monkeypatch.setattr(blur, "fused_tile", lambda r: None)
    two_pass, scratch = gpu_separable(src, taps, tag="cmp")
    assert np.isfinite(scratch).all()  # the fallback did run through the scratch frame
    np.testing.assert_allclose(fused, two_pass, rtol=0, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("spec", ["gblur", "unsharp=sigma=0.8:amount=2.5", "boxblur=radius=20"])
def test_frames_not_8_byte_aligned_take_scalar_writes(spec):
    """Views one float into a buffer: the float2 writes (and unsharp's float2 reads) must not be used."""
    import cupy

    f = one_filter(spec)
    w, h = 190, 106
    src = noise_rgb(w, h, seed=5)
    n = src.size
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        src_buf = cupy.zeros(n + 1, np.float32)
        dst_buf = cupy.full(n + 1, np.nan, np.float32)
        d_src, dst = src_buf[1:].reshape(src.shape), dst_buf[1:].reshape(src.shape)
        d_src[...] = cupy.asarray(src)
        f.cuda(d_src, dst, [cupy.full(s, np.nan, np.float32) for s in f.scratch_shapes(w, h)])
        stream.synchronize()
        got = cupy.asnumpy(dst_buf)
    assert np.isnan(got[0])
    check(got[1:].reshape(src.shape), cpu_filter(f, src))


@pytest.mark.gpu
@pytest.mark.parametrize("mix", [False, True], ids=["blur", "mix"])
@pytest.mark.parametrize("radius", range(1, MAX_FUSED_RADIUS + 1))
def test_fused_kernel_resources(radius, mix):
    """The launch fits (256 threads, static shared memory) and the register cap holds without real spills."""
    from pipeline.gpu.cuda import raw_kernel

    tile = fused_tile(radius)
    source, name, _ = _fused_source(gauss_taps(radius).tobytes(), "res", mix)
    attrs = raw_kernel(source, name).attributes
    assert tile.shared_bytes <= attrs["shared_size_bytes"] <= SHARED_LIMIT
    assert attrs["max_threads_per_block"] >= tile.threads
    assert attrs["num_regs"] <= 65536 // (tile.threads * tile.min_blocks)
    assert attrs["local_size_bytes"] <= 64, "ptxas on sm_90 spills at most a few words (radius >= 17)"
