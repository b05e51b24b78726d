"""The filter library: every filter's CPU reference (against OpenCV where it has the same operation and
against known values), its CUDA kernel against that reference, parameter errors, chain parsing, sizes
through the frame plan, temporal state, pointwise fusion, the example plugin and the CLI."""

from __future__ import annotations

import contextlib
import itertools
import math
import re
import sys
import warnings
from pathlib import Path

import cv2
import numpy as np
import pytest
from utils import ROOT, all_devices, environment, noise_rgb, one_filter, run_cli, video_frames

from pipeline import sample
from pipeline.config_file import PRESETS_DIR
from pipeline.errors import ConfigError
from pipeline.filters import FILTERS, fuse_pointwise, load_plugin, parse_chain
from pipeline.filters.bilateral import window_radius
from pipeline.filters.fuse import FusedPointwise, is_pointwise, pointwise_source
from pipeline.filters.geometry import resample_taps
from pipeline.filters.lut import identity_table, parse_cube, write_cube
from pipeline.video import VideoFormat
from pipeline.processor import FramePlan

WARM_LUT = PRESETS_DIR / "luts" / "warm.cube"
PLUGIN = ROOT / "examples" / "posterize_plugin.py"
# Neither side a multiple of the 32x8 launch block; even, as frames always are.
W, H = 46, 30

# Every built-in filter (and a few settings each); the GPU must reproduce the CPU reference on all.
CASES = [
    "boxblur=radius=1", "boxblur=radius=3",
    "unsharp", "unsharp=sigma=0.8:amount=2.5", "unsharp=amount=-1",
    "sobel", "sobel=scale=0.25",
    "grayscale", "invert", "hue=degrees=40", "hue=degrees=-200",
    "vignette", "vignette=angle=1.5:strength=0.5",
    f"lut3d=file={WARM_LUT}",
    "scale=w=96:h=64", "scale=w=22:h=14", "scale=w=30:h=20", "scale=w=64:h=-1", "scale=w=-1:h=18", "scale=w=60:h=20",
    "crop=w=20:h=10", "crop=w=30:h=16:x=5:y=13", "crop=h=20",
    "hflip", "vflip", "transpose", "transpose=dir=cclock",
    "bilateral", "bilateral=sigma_s=1:sigma_r=0.3",
    "gblur=sigma=2", "eq=contrast=1.2:saturation=1.3:gamma=1.5",
]
STATEFUL = ["tdenoise", "tdenoise=threshold=0.3:alpha=0.5", "motion", "motion=mode=highlight:threshold=0.2"]
WIDE = {"COLUMNS": "200"}  # for the CLI: rich tables wide enough that no name is cut


# --- helpers ---------------------------------------------------------------------------------------------


class Runner:
    """Runs one filter on a device with pipeline-like buffers: outputs and scratch start as NaN (a pixel
    left unwritten shows), state is bound once and carried across calls. On CUDA everything, the fills
    included, is issued on one non-blocking stream, as in the pipeline (it does not order with the legacy
    default stream)."""

    def __init__(self, device: str, f, w: int, h: int):
        self.device, self.f, self.w, self.h = device, f, w, h
        if device == "cuda":
            import cupy

            self.xp, self.stream = cupy, cupy.cuda.Stream(non_blocking=True)
        else:
            self.xp, self.stream = np, contextlib.nullcontext()
        self.out_w, self.out_h = f.output_size(w, h)
        if f.state_shapes(w, h):
            with self.stream:
                f.bind_state([self.xp.full(s, np.nan, np.float32) for s in f.state_shapes(w, h)])

    def __call__(self, src: np.ndarray) -> np.ndarray:
        xp, f = self.xp, self.f
        with self.stream:
            scratch = [xp.full(s, np.nan, np.float32) for s in f.scratch_shapes(self.w, self.h)]
            dst = xp.full((3, self.out_h, self.out_w), np.nan, np.float32)
            if self.device == "cpu":
                f.cpu(src.copy(), dst, scratch)
                return dst
            f.cuda(xp.asarray(src), dst, scratch)
            self.stream.synchronize()
            return xp.asnumpy(dst)


def run(device: str, f, src: np.ndarray) -> np.ndarray:
    return Runner(device, f, src.shape[2], src.shape[1])(src)


def cv_planes(fn, src: np.ndarray) -> np.ndarray:
    return np.stack([fn(np.ascontiguousarray(p)) for p in src])


def frame_size(path: Path) -> tuple[int, int, int]:
    frames = video_frames(path)
    return frames[0].width, frames[0].height, len(frames)


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    return sample.make_clip(tmp_path_factory.mktemp("clip") / "in.mp4", width=192, height=108, frames=5,
                                 audio=False)


# --- every filter: smoke, shape, GPU vs CPU ---------------------------------------------------------------


@pytest.mark.parametrize("spec", CASES)
def test_cpu_reference_smoke(spec):
    f = one_filter(spec)
    src = noise_rgb(W, H)
    got = run("cpu", f, src)
    assert got.shape == (3, *reversed(f.output_size(W, H)))
    assert np.isfinite(got).all(), "pixels left unwritten"
    assert got.min() >= 0 and got.max() <= 1 + 1e-6


@pytest.mark.gpu
@pytest.mark.parametrize("spec", CASES)
@pytest.mark.parametrize("size", [(W, H), (128, 72)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_cuda_matches_cpu(spec, size):
    f = one_filter(spec)
    src = noise_rgb(*size, seed=len(spec))
    expected = run("cpu", f, src)
    got = run("cuda", f, src)
    assert got.shape == expected.shape
    assert np.isfinite(got).all(), "pixels left unwritten"
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)


@pytest.mark.gpu
def test_cuda_kernels_use_the_current_stream_and_run_twice():
    """Cached kernels and uploaded tables are reused: a second frame gives the same answer."""
    for spec in (f"lut3d=file={WARM_LUT}", "scale=w=30:h=20", "hue=degrees=10"):
        f = one_filter(spec)
        runner = Runner("cuda", f, W, H)
        first = runner(noise_rgb(W, H, seed=1))
        np.testing.assert_array_equal(runner(noise_rgb(W, H, seed=1)), first)


def builtin_filters() -> dict:
    parse_chain("")  # registers the built-ins
    return {n: cls for n, cls in FILTERS.items() if cls.__module__.startswith("pipeline.filters.")}


def test_every_filter_has_help():
    for name, cls in builtin_filters().items():
        assert cls.help, f"{name} has no help"
        for p in cls.params:
            assert p.help, f"{name}: parameter {p.name} has no help"
            assert p.describe().startswith(p.name)


def test_filters_command_lists_everything():
    result = run_cli("filters", "--plugin", PLUGIN, env=environment(**WIDE))
    assert result.returncode == 0, result.stderr
    for name in [*builtin_filters(), "posterize"]:
        assert re.search(rf"^\W*{name}\s", result.stdout, re.MULTILINE), f"{name} not listed"
    shown = run_cli("filters", "transpose", env=environment(**WIDE))
    assert shown.returncode == 0 and "cclock" in shown.stdout


# --- bad parameters --------------------------------------------------------------------------------------


BAD = [
    ("boxblur=radius=0", "radius"), ("boxblur=radius=two", "radius"), ("boxblur=size=3", "size"),
    ("unsharp=sigma=0", "sigma"), ("unsharp=amount=9", "amount"),
    ("sobel=scale=-1", "scale"),
    ("hue=degrees=400", "degrees"),
    ("vignette=angle=2", "angle"), ("vignette=strength=1.5", "strength"),
    ("lut3d", "file"), ("lut3d=file=/nonexistent/x.cube", "/nonexistent/x.cube"),
    ("scale=w=101:h=50", "w"), ("scale=w=100:h=51", "h"), ("scale=w=0:h=20", "w"), ("scale", "w or h"),
    ("scale=w=-2:h=20", "w"),
    ("crop=w=11", "w"), ("crop=h=7", "h"), ("crop=x=-5", "x"),
    ("transpose=dir=up", "dir"),
    ("bilateral=sigma_s=0", "sigma_s"), ("bilateral=sigma_r=2", "sigma_r"),
    ("tdenoise=alpha=0", "alpha"), ("tdenoise=threshold=2", "threshold"),
    ("motion=mode=blink", "mode"), ("motion=threshold=-0.1", "threshold"),
]


@pytest.mark.parametrize("spec,needle", BAD)
def test_bad_parameters_name_the_parameter(spec, needle):
    with pytest.raises(ConfigError) as e:
        parse_chain(spec)
    message = str(e.value)
    assert needle in message
    assert spec.partition("=")[0] in message


HOSTILE_FLOATS = ["nan", "inf", "-inf", "-0", "0", "1e308", "-1e308", "5e-324", "-5e-324", "1e-30", "1e-8"]


@pytest.mark.parametrize("value", HOSTILE_FLOATS)
@pytest.mark.parametrize("setting", [f"{name}={p.name}" for name, cls in sorted(builtin_filters().items())
                                     for p in cls.params if p.kind is float])
def test_extreme_float_parameters_are_refused_or_give_finite_frames(setting, value):
    """NaN, infinities, signed zero, the largest and the smallest doubles: each is refused when the chain is
    parsed, or the filter's output is finite with no NumPy warning (a NaN frame encodes as garbage)."""
    try:
        f = one_filter(f"{setting}={value}")
    except ConfigError:
        return
    src = noise_rgb(W, H, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow or an invalid value on the way is a failure too
        runner = Runner("cpu", f, W, H)
        for _ in range(2):  # temporal filters: the first frame fills the state, the second uses it
            out = runner(src)
    assert np.isfinite(out).all()


# --- chain syntax ------------------------------------------------------------------------------------------


def test_positional_values_fill_params_in_order():
    scale, crop, transpose = parse_chain("scale=320:180,crop=100:50:10:20,transpose=cclock")
    assert (scale.w, scale.h) == (320, 180)
    assert (crop.w, crop.h, crop.x, crop.y) == (100, 50, 10, 20)
    assert transpose.dir == "cclock"
    assert [type(f).__name__ for f in parse_chain(" hflip , vflip ")] == ["HFlip", "VFlip"]


@pytest.mark.parametrize(
    "chain,token,column",
    [
        ("boxblur=radius=2,nosuch", "nosuch", 18),
        ("hflip,scale=w=3:h=2", "scale=w=3:h=2", 7),
        ("hue=1:2", "hue=1:2", 1),
        ("transpose=dir=clock:dir=cclock", "transpose=dir=clock:dir=cclock", 1),
    ],
)
def test_chain_errors_point_at_the_token(chain, token, column):
    with pytest.raises(ConfigError) as e:
        parse_chain(chain)
    assert f"bad filter {token!r} at column {column}" in str(e.value)


# --- references against OpenCV and known values -------------------------------------------------------------


@pytest.mark.parametrize("radius", [1, 2, 5])
def test_boxblur_matches_opencv(radius):
    src = noise_rgb(W, H)
    k = 2 * radius + 1
    expected = cv_planes(lambda p: cv2.blur(p, (k, k), borderType=cv2.BORDER_REFLECT_101), src)
    np.testing.assert_allclose(run("cpu", one_filter(f"boxblur={radius}"), src), expected, atol=1e-5)


def test_unsharp_matches_opencv():
    src = noise_rgb(W, H)
    f = one_filter("unsharp=sigma=1.5:amount=0.7")
    r = len(f.taps) // 2
    blur = cv_planes(lambda p: cv2.GaussianBlur(p, (2 * r + 1, 2 * r + 1), 1.5, borderType=cv2.BORDER_REFLECT_101), src)
    np.testing.assert_allclose(run("cpu", f, src), np.clip(src + 0.7 * (src - blur), 0, 1), atol=1e-5)


def test_sobel_matches_opencv():
    src = noise_rgb(W, H)
    luma = (0.2126 * src[0] + 0.7152 * src[1] + 0.0722 * src[2]).astype(np.float32)
    gx = cv2.Sobel(luma, cv2.CV_32F, 1, 0, ksize=3, borderType=cv2.BORDER_REFLECT_101)
    gy = cv2.Sobel(luma, cv2.CV_32F, 0, 1, ksize=3, borderType=cv2.BORDER_REFLECT_101)
    expected = np.clip(np.sqrt(gx * gx + gy * gy) * 0.25, 0, 1)
    got = run("cpu", one_filter("sobel=scale=0.25"), src)
    for c in range(3):
        np.testing.assert_allclose(got[c], expected, atol=1e-5)


def test_flips_and_rotations_match_opencv():
    src = noise_rgb(W, H)
    np.testing.assert_array_equal(run("cpu", one_filter("hflip"), src), cv_planes(lambda p: cv2.flip(p, 1), src))
    np.testing.assert_array_equal(run("cpu", one_filter("vflip"), src), cv_planes(lambda p: cv2.flip(p, 0), src))
    clock = cv_planes(lambda p: cv2.rotate(p, cv2.ROTATE_90_CLOCKWISE), src)
    cclock = cv_planes(lambda p: cv2.rotate(p, cv2.ROTATE_90_COUNTERCLOCKWISE), src)
    np.testing.assert_array_equal(run("cpu", one_filter("transpose"), src), clock)
    np.testing.assert_array_equal(run("cpu", one_filter("transpose=dir=cclock"), src), cclock)


def test_crop_takes_the_rectangle():
    src = noise_rgb(W, H)
    np.testing.assert_array_equal(run("cpu", one_filter("crop=w=20:h=10:x=4:y=6"), src), src[:, 6:16, 4:24])
    np.testing.assert_array_equal(run("cpu", one_filter("crop=w=20:h=10"), src), src[:, 10:20, 13:33])  # centred


@pytest.mark.parametrize(
    "size,interpolation,atol",
    [
        ((96, 64), cv2.INTER_LINEAR, 1e-5),  # enlarge
        ((70, 30), cv2.INTER_LINEAR, 1e-5),  # enlarge one axis, keep the other
        ((23, 15), cv2.INTER_AREA, 1e-5),  # shrink by an integer factor
        ((30, 20), cv2.INTER_AREA, 1 / 255),  # fractional shrink
    ],
)
def test_scale_matches_opencv(size, interpolation, atol):
    src = noise_rgb(W, H)
    f = one_filter(f"scale=w={size[0] + size[0] % 2}:h={size[1] + size[1] % 2}")
    ow, oh = f.output_size(W, H)
    expected = cv_planes(lambda p: cv2.resize(p, (ow, oh), interpolation=interpolation), src)
    np.testing.assert_allclose(run("cpu", f, src), expected, atol=atol)


def test_scale_taps_are_normalised_and_in_range():
    for n_in, n_out in [(46, 96), (46, 22), (1080, 720), (7, 3), (3, 7), (10, 10)]:
        idx, wt = resample_taps(n_in, n_out)
        assert idx.min() >= 0 and idx.max() < n_in
        np.testing.assert_allclose(wt.sum(axis=1), 1, atol=1e-6)
        assert wt.min() >= 0


def test_scale_keeps_aspect_rounded_to_even():
    assert one_filter("scale=w=250:h=-1").output_size(640, 360) == (250, 140)  # 140.6 -> 140
    assert one_filter("scale=w=-1:h=720").output_size(1920, 1080) == (1280, 720)
    assert one_filter("scale=w=-1:h=100").output_size(640, 480) == (134, 100)  # 133.3 -> 134


def test_grayscale_and_invert_values():
    src = np.zeros((3, 2, 2), np.float32)
    src[0, 0, 0] = 1  # red
    src[:, 1, 1] = 0.5  # grey
    grey = run("cpu", one_filter("grayscale"), src)
    np.testing.assert_allclose(grey[:, 0, 0], 0.2126, atol=1e-6)
    np.testing.assert_allclose(grey[:, 1, 1], 0.5, atol=1e-6)
    np.testing.assert_array_equal(run("cpu", one_filter("invert"), src), 1 - src)


def test_hue_rotates_around_grey():
    src = np.zeros((3, 2, 2), np.float32)
    src[0, 0, 0] = 1  # red
    src[:, 1, 1] = 0.4  # grey
    np.testing.assert_allclose(run("cpu", one_filter("hue=120"), src)[:, 0, 0], [0, 1, 0], atol=1e-6)
    np.testing.assert_allclose(run("cpu", one_filter("hue=-120"), src)[:, 0, 0], [0, 0, 1], atol=1e-6)
    for deg in (0, 37, 360):
        np.testing.assert_allclose(run("cpu", one_filter(f"hue={deg}"), src)[:, 1, 1], 0.4, atol=1e-6)
    smooth = noise_rgb(W, H) * 0.5 + 0.25  # away from clipping: a full turn is the identity
    np.testing.assert_allclose(run("cpu", one_filter("hue=360"), smooth), smooth, atol=1e-5)


def test_vignette_darkens_towards_the_corners():
    src = np.ones((3, 40, 60), np.float32)
    out = run("cpu", one_filter("vignette=angle=0.8:strength=1"), src)[0]
    diagonal = [out[round(i * 19 / 29), i] for i in range(30)]  # corner to centre
    assert all(a <= b + 1e-7 for a, b in itertools.pairwise(diagonal))
    assert out[20, 30] > 0.999
    # The corner pixel's centre is just inside the half-diagonal: close to cos^4(angle).
    assert abs(out[0, 0] - math.cos(0.8) ** 4) < 0.02
    np.testing.assert_array_equal(run("cpu", one_filter("vignette=strength=0"), src), src)


def bilateral_naive(src: np.ndarray, sigma_s: float, sigma_r: float) -> np.ndarray:
    """The definition, one pixel at a time (float64)."""
    _, h, w = src.shape
    r = window_radius(sigma_s)
    refl = lambda i, n: abs(i) if i < 0 else (2 * n - 2 - i if i >= n else i)
    out = np.zeros_like(src, np.float64)
    for y in range(h):
        for x in range(w):
            num, den = np.zeros(3), 0.0
            for dy in range(-r, r + 1):
                for dx in range(-r, r + 1):
                    q = src[:, refl(y + dy, h), refl(x + dx, w)].astype(np.float64)
                    d2 = ((q - src[:, y, x]) ** 2).sum()
                    wgt = math.exp(-(dx * dx + dy * dy) / (2 * sigma_s**2) - d2 / (2 * sigma_r**2))
                    num, den = num + wgt * q, den + wgt
            out[:, y, x] = num / den
    return out


def test_bilateral_reference_is_the_definition():
    src = noise_rgb(10, 8, seed=4)
    got = run("cpu", one_filter("bilateral=sigma_s=1.2:sigma_r=0.3"), src)
    np.testing.assert_allclose(got, bilateral_naive(src, 1.2, 0.3), atol=1e-5)


def test_bilateral_keeps_edges_and_smooths_flat_areas():
    rng = np.random.default_rng(5)
    src = np.full((3, 32, 32), 0.2, np.float32)
    src[:, :, 16:] = 0.8
    src += rng.normal(0, 0.02, src.shape).astype(np.float32)
    out = run("cpu", one_filter("bilateral=sigma_s=2:sigma_r=0.1"), src)
    assert out[:, :, :14].std() < 0.5 * src[:, :, :14].std()
    assert abs(out[:, :, 15].mean() - 0.2) < 0.01 and abs(out[:, :, 16].mean() - 0.8) < 0.01


# --- lut3d ---------------------------------------------------------------------------------------------------


def test_identity_lut_is_identity(tmp_path):
    write_cube(tmp_path / "id.cube", identity_table(5), title="identity # with a hash")
    lut = parse_cube(tmp_path / "id.cube")
    assert lut.size == 5 and lut.title == "identity # with a hash"
    src = noise_rgb(W, H)
    np.testing.assert_allclose(run("cpu", one_filter(f"lut3d={tmp_path / 'id.cube'}"), src), src, atol=2e-6)


def test_lut_domain_scales_the_input(tmp_path):
    lines = ["# domain 0..2", "LUT_3D_SIZE 2", "DOMAIN_MIN 0 0 0", "DOMAIN_MAX 2 2 2"]
    lines += [f"{r} {g} {b}" for b in (0, 1) for g in (0, 1) for r in (0, 1)]
    (tmp_path / "half.cube").write_text("\n".join(lines))
    src = noise_rgb(W, H)
    np.testing.assert_allclose(run("cpu", one_filter(f"lut3d={tmp_path / 'half.cube'}"), src), src / 2, atol=1e-6)


def test_lut_swaps_channels(tmp_path):
    """A table that outputs (B, G, R) checks the file order: red varies fastest."""
    write_cube(tmp_path / "swap.cube", identity_table(3)[..., ::-1])
    src = noise_rgb(W, H)
    np.testing.assert_allclose(run("cpu", one_filter(f"lut3d={tmp_path / 'swap.cube'}"), src), src[::-1], atol=2e-6)


def test_shipped_lut_is_the_generator_output(tmp_path):
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import make_warm_lut
    finally:
        sys.path.remove(str(ROOT / "examples"))
    shipped = parse_cube(WARM_LUT)
    assert shipped.size == 17
    np.testing.assert_allclose(shipped.table, make_warm_lut.warm_table(17), atol=1e-5)


BAD_CUBES = {
    "no size": ("0 0 0\n1 1 1\n", "no LUT_3D_SIZE"),
    "short": ("LUT_3D_SIZE 2\n0 0 0\n", "needs 8 rows"),
    "words": ("LUT_3D_SIZE 2\n" + "0 zero 0\n" * 8, ":2: expected numbers"),
    "columns": ("LUT_3D_SIZE 2\n" + "0 0\n" * 8, ":2: expected 3 numbers"),
    "1d": ("LUT_1D_SIZE 16\n", "1D LUTs are not supported"),
    "keyword": ("LUT_3D_SIZE 2\nFOO 1\n", "unknown keyword 'FOO'"),
    "size": ("LUT_3D_SIZE 1\n", "LUT_3D_SIZE must be 2"),
    "domain": ("LUT_3D_SIZE 2\nDOMAIN_MIN 1 0 0\nDOMAIN_MAX 1 1 1\n" + "0 0 0\n" * 8, "DOMAIN_MAX"),
    # past float32: the domain's scale overflowed to an index of -2**31 (an internal error), a value to NaN pixels
    "narrow domain": ("LUT_3D_SIZE 2\nDOMAIN_MAX 1e-44 1e-44 1e-44\n" + "0 0 0\n" * 8, "too narrow"),
    "huge domain": ("LUT_3D_SIZE 2\nDOMAIN_MIN -1e39 0 0\n" + "0 0 0\n" * 8, ":2: expected numbers from"),
    "other digits": ("LUT_3D_SIZE \u0662\n" + "0 0 0\n" * 8, ":1: expected numbers in ASCII digits"),
    "underscore": ("LUT_3D_SIZE 2\n" + "0 0 0\n" * 7 + "1_0 1 1\n", ":9: expected numbers in ASCII digits"),
    "huge value": ("LUT_3D_SIZE 2\n" + "0 0 0\n" * 7 + "1e39 1 1\n", ":9: expected numbers from -1000000"),
    "nan row": ("LUT_3D_SIZE 2\n" + "0 0 0\n" * 7 + "nan 0 0\n", ":9: expected finite numbers, got 'nan 0 0'"),
    "inf row": ("LUT_3D_SIZE 2\n" + "0 0 0\n" * 7 + "-inf 0 0\n", ":9: expected finite numbers"),
    "infinity row": ("LUT_3D_SIZE 2\nInfinity 0 0\n" + "0 0 0\n" * 7, ":2: expected finite numbers"),
}


@pytest.mark.parametrize("case", BAD_CUBES)
def test_bad_cube_files(tmp_path, case):
    text, needle = BAD_CUBES[case]
    (tmp_path / "bad.cube").write_text(text)
    with pytest.raises(ConfigError) as e:
        parse_chain(f"lut3d=file={tmp_path / 'bad.cube'}")
    assert needle in str(e.value) and "bad.cube" in str(e.value)


# --- sizes through the frame plan and the CLI ----------------------------------------------------------------


def test_size_changing_chain_through_the_frame_plan():
    fmt = VideoFormat(640, 360)
    plan = FramePlan.build(fmt, parse_chain("scale=w=320:h=-1,crop=w=200:h=100,transpose,hflip"))
    assert (plan.out_format.width, plan.out_format.height) == (100, 200)
    assert plan.out_format.nbytes == 100 * 200 * 3 // 2
    shapes = [plan.specs[dst].shape for _, _, dst, _ in plan.steps]
    assert shapes == [(3, 180, 320), (3, 100, 200), (3, 200, 100), (3, 200, 100)]
    scale_scratch = [plan.specs[i].shape for i in plan.steps[0][3]]
    assert scale_scratch == [(3, 360, 320)]


@pytest.mark.parametrize("chain, said", [("scale=w=16384:h=2,scale=w=-1:h=16384", "134217728x16384 (from 16384x2)"),
                                         ("scale=w=-1:h=16384", "29128x16384 (from 640x360)")])
def test_a_size_derived_past_the_limit_is_refused_by_the_frame_plan(chain, said):
    # Each argument within its range, the aspect ratio made a size no buffer fits: out of GPU memory, exit 5.
    with pytest.raises(ConfigError, match=re.escape(f"scale: its output would be {said}; frame sides are 2 to")):
        FramePlan.build(VideoFormat(640, 360), parse_chain(chain))


@pytest.mark.parametrize("fold, buffers", [(True, 4), (False, 5)])
def test_the_frame_plan_holds_only_the_buffers_the_kernels_use(fold, buffers):
    """The default chain where the backend folds pointwise ends (CUDA): input, RGB, blurred, output; the
    eq runs inside the conversion back, and the blur (radius 5) is one kernel that needs no scratch."""
    chain = fuse_pointwise(parse_chain("gblur=sigma=1.5,eq=contrast=1.1:saturation=1.1"))
    plan = FramePlan.build(VideoFormat(64, 32), chain, fold=fold)
    assert len(plan.specs) == buffers
    assert [f.name for f in plan.tail] == (["eq"] if fold else [])
    assert plan.steps[0][0].name == "gblur" and plan.steps[0][3] == ()


@pytest.mark.parametrize(
    "chain,needle",
    [("crop=w=800:h=100", "larger than the input"), ("crop=w=600:h=100:x=100", "x + w"),
     ("scale=w=100:h=100,crop=w=40:h=40:y=70", "y + h")],
)
def test_crop_checked_against_the_input_size(chain, needle):
    with pytest.raises(ConfigError) as e:
        FramePlan.build(VideoFormat(640, 360), parse_chain(chain))
    assert needle in str(e.value)


def test_cli_scales_the_output(clip, tmp_path):
    out = tmp_path / "small.mp4"
    result = run_cli("run", clip, "-o", out, "--device", "cpu", "-q", "--filters", "scale=w=160:h=90",
                     env=environment(**WIDE))
    assert result.returncode == 0, result.stderr
    assert frame_size(out) == (160, 90, 5)


def test_cli_reports_a_bad_crop(clip, tmp_path):
    result = run_cli("run", clip, "-o", tmp_path / "x.mp4", "--device", "cpu", "-q", "--filters", "crop=w=400:h=50",
                     env=environment(**WIDE))
    assert result.returncode == 2
    assert "crop" in result.stderr and "larger than the input" in result.stderr


# --- temporal filters ------------------------------------------------------------------------------------------


def frames_with_motion(n: int = 4):
    """A still noisy scene with small frame-to-frame noise and a block that jumps each frame."""
    rng = np.random.default_rng(9)
    base = rng.random((3, H, W), dtype=np.float32) * 0.5 + 0.25
    frames = []
    for i in range(n):
        f = np.clip(base + rng.normal(0, 0.01, base.shape).astype(np.float32), 0, 1)
        block = f[:, 4:10, 6 * i : 6 * i + 6]
        block += np.where(block < 0.5, np.float32(0.3), np.float32(-0.3))  # a change of 0.3 in one block
        frames.append(f)
    return frames


def tdenoise_model(frames, threshold, alpha):
    state, outs = None, []
    for src in frames:
        if state is None:
            out = src.copy()
        else:
            still = np.abs(src - state).max(axis=0) < np.float32(threshold)
            out = np.where(still, state + np.float32(alpha) * (src - state), src)
        state = out
        outs.append(out)
    return outs


@pytest.mark.parametrize("device", all_devices())
def test_tdenoise_averages_still_pixels_and_passes_motion(device):
    frames = frames_with_motion()
    f = one_filter("tdenoise=threshold=0.05:alpha=0.25")
    runner = Runner(device, f, W, H)
    outs = [runner(s) for s in frames]
    np.testing.assert_array_equal(outs[0], frames[0])  # first frame initialises the state
    for got, expected in zip(outs, tdenoise_model(frames, 0.05, 0.25)):
        np.testing.assert_allclose(got, expected, atol=1e-5)
    np.testing.assert_array_equal(outs[2][:, 4:10, 12:18], frames[2][:, 4:10, 12:18])  # moving block
    assert np.abs(outs[3] - frames[0]).mean() < np.abs(frames[3] - frames[0]).mean()  # less noise
    f.reset()
    np.testing.assert_array_equal(runner(frames[3]), frames[3])  # re-primed


@pytest.mark.parametrize("device", all_devices())
def test_motion_mask_and_highlight(device):
    frames = frames_with_motion()
    mask = one_filter("motion=mode=mask:threshold=0.1")
    runner = Runner(device, mask, W, H)
    outs = [runner(s) for s in frames]
    np.testing.assert_array_equal(outs[0], 0)  # nothing to compare with yet
    expected = np.zeros((H, W), np.float32)
    expected[4:10, 0:12] = 1  # frame 1: the block left 0:6 and arrived at 6:12
    for c in range(3):
        np.testing.assert_array_equal(outs[1][c], expected)
    mask.reset()
    np.testing.assert_array_equal(runner(frames[2]), 0)

    tint = one_filter("motion=mode=highlight:threshold=0.1")
    runner = Runner(device, tint, W, H)
    runner(frames[0])
    got = runner(frames[1])
    moving = frames[1][:, 4:10, 0:12]
    np.testing.assert_allclose(got[:, 4:10, 0:12], 0.5 * moving + np.array([0.5, 0, 0], np.float32)[:, None, None],
                               atol=1e-6)
    np.testing.assert_array_equal(got[:, 12:, :], frames[1][:, 12:, :])


@pytest.mark.gpu
@pytest.mark.parametrize("spec", STATEFUL)
def test_temporal_cuda_matches_cpu(spec):
    frames = frames_with_motion(5)
    cpu, gpu = Runner("cpu", one_filter(spec), W, H), Runner("cuda", one_filter(spec), W, H)
    for src in frames:
        np.testing.assert_allclose(gpu(src), cpu(src), atol=1e-4)


def test_temporal_filters_declare_state():
    plan = FramePlan.build(VideoFormat(64, 32), parse_chain("tdenoise,scale=w=32:h=16,motion"))
    assert [tuple(s.shape for s in specs) for specs in plan.state] == [((3, 32, 64),), (), ((3, 16, 32),)]
    f = one_filter("motion")
    with pytest.raises(RuntimeError, match="bind_state"):
        f.cpu(noise_rgb(W, H), np.empty((3, H, W), np.float32), [])


# --- fusion ------------------------------------------------------------------------------------------------------


FUSABLE = "eq=contrast=1.2:saturation=1.3:gamma=1.4,hue=25,vignette=angle=1:strength=0.7,invert,grayscale"


def test_fuse_merges_neighbouring_pointwise_filters():
    chain = parse_chain(f"gblur,{FUSABLE},sobel,invert,lut3d=file={WARM_LUT},hue=10,tdenoise")
    fused = fuse_pointwise(chain)
    kinds = [type(f).__name__ for f in fused]
    assert kinds == ["GBlur", "FusedPointwise", "Sobel", "Invert", "Lut3d", "Hue", "TDenoise"]
    assert [f.name for f in fused[1].members] == ["eq", "hue", "vignette", "invert", "grayscale"]
    assert fuse_pointwise([]) == []
    assert not is_pointwise(one_filter("tdenoise")) and not is_pointwise(one_filter("scale=w=2:h=2"))


def test_fused_kernel_names_follow_the_constants():
    a = pointwise_source(parse_chain("hue=10,invert"))
    b = pointwise_source(parse_chain("hue=10,invert"))
    c = pointwise_source(parse_chain("hue=11,invert"))
    assert a == b and a[1] != c[1]
    assert a[1].startswith("pipeline_pw_hue_invert_") and f'void {a[1]}(' in a[0]


@pytest.mark.parametrize("device", all_devices())
@pytest.mark.parametrize("chain", [FUSABLE, "invert,hue=60", "grayscale,invert,vignette"])
def test_fused_chain_equals_unfused(device, chain):
    src = noise_rgb(W, H, seed=2)

    def apply(filters):
        out = src
        for f in filters:
            out = run(device, f, out)
        return out

    fused = fuse_pointwise(parse_chain(chain))
    assert len(fused) == 1 and isinstance(fused[0], FusedPointwise)
    expected = apply(parse_chain(chain))
    got = apply(fused)
    np.testing.assert_allclose(got, expected, atol=0 if device == "cpu" else 1e-5)
    if device == "cuda":
        np.testing.assert_allclose(got, apply(fuse_pointwise(parse_chain(chain))[0].members), atol=1e-5)


# --- the example plugin ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", all_devices())
def test_posterize_plugin_loads_and_runs(device):
    load_plugin(PLUGIN)
    load_plugin(PLUGIN)  # a second load is a no-op, not a clash
    f = one_filter("posterize=levels=4")
    src = noise_rgb(W, H)
    got = run(device, f, src)
    assert set(np.unique(np.round(got * 3, 5))) <= {0.0, 1.0, 2.0, 3.0}
    np.testing.assert_allclose(got, np.floor(src * 3 + 0.5) / 3, atol=1e-6)
    with pytest.raises(ConfigError, match="levels"):
        parse_chain("posterize=levels=1")


def test_posterize_plugin_through_the_cli(clip, tmp_path):
    out = tmp_path / "poster.mp4"
    result = run_cli("run", clip, "-o", out, "--device", "cpu", "-q", "--plugin", PLUGIN,
                     "--filters", "posterize=levels=4", env=environment(**WIDE))
    assert result.returncode == 0, result.stderr
    assert frame_size(out) == (192, 108, 5)


def test_gaussian_taps_are_opencvs():
    """The blur's taps, computed without OpenCV, are OpenCV's own getGaussianKernel, bit for bit."""
    import cv2

    from pipeline.filters.blur import gaussian_taps

    for sigma in (5e-324, 1e-10, 0.3, 0.5, 1.0, 1.5, 2.25, 3.0, 7.7, 16.0):
        radius = max(1, int(np.ceil(3 * sigma)))
        expected = cv2.getGaussianKernel(2 * radius + 1, sigma, ktype=cv2.CV_32F).ravel()
        np.testing.assert_array_equal(gaussian_taps(sigma), expected)


def test_a_plugins_filter_is_described_as_json_holds_it_and_named_as_a_chain_can():
    """`filters --json` printed NaN and Infinity (which JSON parsers refuse) for a plugin's bounds, or failed
    on a default of its own type; a name with a space or a comma was registered, though no chain could name it."""
    import json

    from pipeline.errors import ConfigError
    from pipeline.filters.registry import Param, register_filter

    param = Param("level", float, float("nan"), low=float("-inf"), high=float("inf"), choices=(1 + 2j,))
    described = param.to_dict()
    assert (described["default"], described["min"], described["max"], described["choices"]) == (None, None, None,
                                                                                                ["(1+2j)"])
    json.dumps(described, allow_nan=False)
    for name in ("bad name", "a,b", "x=y", "", 7):
        with pytest.raises(ConfigError, match="a chain could not name it"):
            register_filter(name)(type("F", (), {}))
