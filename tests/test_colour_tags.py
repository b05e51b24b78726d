"""What a stream's colour tags mean: the matrix each AVColorSpace selects, and what RGB input is written as."""

from __future__ import annotations

import pytest

from pipeline.video import Colour, VideoFormat


@pytest.mark.parametrize("colorspace, height, matrix", [
    (1, 360, "bt709"),     # BT.709
    (5, 1080, "bt601"),    # BT.470BG
    (6, 1080, "bt601"),    # SMPTE 170M
    (9, 360, "bt2020"),    # BT.2020 non-constant luminance
    (10, 2160, "bt2020"),  # BT.2020 constant luminance: read as non-constant (the source says so)
    (2, 720, "bt709"),     # unspecified HD: BT.709 by convention
    (2, 576, "bt601"),     # unspecified SD
    (0, 1080, "bt709"),    # "RGB" on YUV frames: as unspecified
])
def test_from_tags(colorspace, height, matrix):
    colour = Colour.from_tags(colorspace, 1, 9, 16, height)
    assert colour.matrix == matrix and not colour.full_range
    assert (colour.colorspace, colour.color_range, colour.color_primaries, colour.color_trc) == (colorspace, 1, 9, 16)
    assert Colour.from_tags(colorspace, 2, height=height).full_range


def test_rgb_input_is_written_with_a_real_matrix():
    hd, sd = Colour.for_rgb(1080, primaries=1, trc=13), Colour.for_rgb(480)
    assert (hd.matrix, hd.colorspace, hd.color_range, hd.color_primaries, hd.color_trc) == ("bt709", 1, 1, 1, 13)
    assert (sd.matrix, sd.colorspace, sd.color_range) == ("bt601", 6, 1)
    assert hd.name == "BT.709 limited range" and Colour("bt2020", True).name == "BT.2020 full range"


def test_video_format_depth():
    fmt = VideoFormat(64, 32, Colour("bt2020"), 10)
    assert fmt.resized(32, 16).depth == 10 and fmt.with_depth(8).depth == 8
    assert fmt.nbytes == 64 * 32 * 3 // 2  # samples: the layouts say how many bytes each takes
    with pytest.raises(ValueError, match="bit depth"):
        VideoFormat(64, 32, depth=12)
