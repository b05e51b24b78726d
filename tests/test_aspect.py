"""Anamorphic video: the input's pixel aspect ratio (SAR) reaches the output, through the filters that
stretch or turn the picture, so that it plays with the shape it had (a 720x480 16:9 DVD frame stays 16:9).
"""

from __future__ import annotations

from fractions import Fraction

import av
import pytest
from utils import all_devices, mux_noise, run_pipeline

from pipeline.filters import parse_chain
from pipeline.processor import FramePlan
from pipeline.video import VideoFormat, pixel_aspect

DVD = Fraction(32, 27)  # 720x480 shown at 16:9


def _clip(path, sar, codec="libx264", width=720, height=480):
    with av.open(str(path), "w") as c:
        s = c.add_stream(codec, rate=25)
        s.width, s.height, s.pix_fmt = width, height, "yuv420p"
        if sar is not None:
            s.codec_context.sample_aspect_ratio = sar
        mux_noise(c, s, 3, seed=1)
    return path


def _aspect(path):
    with av.open(str(path)) as c:
        v = c.streams.video[0]
        return pixel_aspect(v.sample_aspect_ratio), v.codec_context.width, v.codec_context.height


@pytest.mark.parametrize("device", all_devices())
@pytest.mark.parametrize("suffix", [".mp4", ".mkv"])
def test_the_pixel_aspect_ratio_is_kept(tmp_path, device, suffix):
    src, out = _clip(tmp_path / "dvd.mp4", DVD), tmp_path / f"out{suffix}"
    result = run_pipeline(src, "-o", out, "-vf", "invert", device=device, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert _aspect(src) == _aspect(out) == (DVD, 720, 480)


@pytest.mark.parametrize("chain, size, shape", [
    ("scale=w=640:h=-1", (640, 426), Fraction(16, 9)),  # the picture keeps its shape, its pixels stretch
    ("scale=w=1024:h=576", (1024, 576), Fraction(16, 9)),  # square pixels: a 16:9 frame of them
    ("transpose", (480, 720), Fraction(9, 16)),  # turned, the picture stands
    ("crop=w=360:h=480,hflip", (360, 480), Fraction(8, 9)),  # half of it, pixels as they were
])
def test_filters_that_change_the_geometry_carry_the_ratio(tmp_path, chain, size, shape):
    src, out = _clip(tmp_path / "dvd.mp4", DVD), tmp_path / "out.mp4"
    result = run_pipeline(src, "-o", out, "-vf", chain, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    sar, w, h = _aspect(out)
    assert (w, h) == size
    assert abs(float(w * sar / h) - float(shape)) < 0.01, (sar, w, h)  # display aspect ratio, as a player shows


@pytest.mark.parametrize("name, codec, kept", [
    ("out.mkv", "ffv1", False), ("out.avi", "ffv1", False), ("out.nut", "ffv1", False),
    ("out.mkv", "mpeg4", True), ("out.mkv", "mpeg2video", True), ("out.mkv", "mjpeg", True),
    ("out.mp4", "libsvtav1", True),  # AV1 codes none: MP4's header does
])
def test_an_output_that_cannot_keep_the_ratio_says_so(tmp_path, name, codec, kept):
    src, out = _clip(tmp_path / "dvd.mp4", DVD), tmp_path / name
    result = run_pipeline(src, "-o", out, "-c", codec, cwd=tmp_path, quiet=False)
    assert result.returncode == 0, result.stderr
    assert ("pixel aspect ratio 32:27 is not written" in result.stderr) is not kept, result.stderr
    assert (_aspect(out)[0] == DVD) is kept


def test_an_unknown_ratio_stays_unknown_and_square_stays_square(tmp_path):
    for sar in (None, Fraction(1)):
        src, out = _clip(tmp_path / "in.mp4", sar, width=64, height=48), tmp_path / "out.mp4"
        result = run_pipeline(src, "-o", out, "-vf", "scale=w=128:h=64", "-y", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert _aspect(out)[0] == (None if sar is None else Fraction(2, 3))  # 4:3 shown from 2:1 pixels


@pytest.mark.parametrize("value, expected", [
    (Fraction(32, 27), Fraction(32, 27)), (Fraction(0, 1), None), (None, None), (Fraction(-4, 3), None),
    (Fraction(1000, 1), None), ("4:3", None),
])
def test_ratios_no_codec_could_code_are_unknown(value, expected):
    assert pixel_aspect(value) == expected


@pytest.mark.parametrize("value", [Fraction(65537, 65536), Fraction(65536, 65537), Fraction(200003, 1000)])
def test_a_ratio_is_brought_to_the_16_bits_a_codec_codes_it_in(value):
    sar = pixel_aspect(value)
    assert max(sar.numerator, sar.denominator) <= 65535 and abs(sar - value) < 1e-4


def test_a_plan_gives_the_ratio_of_its_output():
    plan = FramePlan.build(VideoFormat(720, 480), parse_chain("scale=w=360:h=480,transpose"))
    assert plan.output_sar(DVD) == 1 / (DVD * 2)  # half as many columns, each twice as wide; then turned
    assert plan.output_sar(None) is None
