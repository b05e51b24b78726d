"""What a stream's colour tags mean: the matrix each AVColorSpace selects, and what RGB input is written as."""

from __future__ import annotations

import pytest
from utils import all_devices

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
    (2, (1280, 536), "bt709"),  # an untagged HD film cropped to 2.39:1: HD by its width
    (2, (1024, 576), "bt601"),  # SD's widest
    (2, (960, 720), "bt709"),   # 4:3 HD
    (7, 480, "bt709"),     # SMPTE 240M: BT.709's weights to 0.005, not BT.601's
    (4, 1080, "bt601"),    # FCC: BT.601's to 0.01
])
def test_from_tags(colorspace, height, matrix):
    width, height = height if isinstance(height, tuple) else (0, height)
    colour = Colour.from_tags(colorspace, 1, 9, 16, height, width)
    assert colour.matrix == matrix and not colour.full_range
    assert (colour.colorspace, colour.color_range, colour.color_primaries, colour.color_trc) == (colorspace, 1, 9, 16)
    assert Colour.from_tags(colorspace, 2, height=height, width=width).full_range


def test_rgb_input_is_written_with_a_real_matrix():
    hd, sd = Colour.for_rgb(1080, primaries=1, trc=13), Colour.for_rgb(480)
    assert Colour.for_rgb(536, width=1280).matrix == "bt709" and Colour.for_rgb(576, width=1024).matrix == "bt601"
    assert (hd.matrix, hd.colorspace, hd.color_range, hd.color_primaries, hd.color_trc) == ("bt709", 1, 1, 1, 13)
    assert (sd.matrix, sd.colorspace, sd.color_range) == ("bt601", 6, 1)
    assert hd.name == "BT.709 limited range" and Colour("bt2020", True).name == "BT.2020 full range"


def test_video_format_depth():
    fmt = VideoFormat(64, 32, Colour("bt2020"), 10)
    assert fmt.resized(32, 16).depth == 10 and fmt.with_depth(8).depth == 8
    assert fmt.nbytes == 64 * 32 * 3 // 2  # samples: the layouts say how many bytes each takes
    with pytest.raises(ValueError, match="bit depth"):
        VideoFormat(64, 32, depth=12)


def _flat_clip(path, width: int, height: int, yuv: tuple[int, int, int], **tags):
    """Two frames of one flat colour, coded losslessly, with the given stream and frame tags."""
    import av
    import numpy as np

    y, u, v = yuv
    planes = np.concatenate([np.full((height, width), y, np.uint8),
                             np.full((height // 4, width), u, np.uint8), np.full((height // 4, width), v, np.uint8)])
    with av.open(str(path), "w") as out:
        stream = out.add_stream("ffv1", rate=25)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for name, value in tags.items():
            setattr(stream.codec_context, name, value)
        for i in range(2):
            frame = av.VideoFrame.from_ndarray(planes, format="yuv420p")
            frame.pts = i
            for name, value in tags.items():
                setattr(frame, name, value)
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path


def _first_frame(path):
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return stream.codec_context, next(container.decode(stream))


def test_untagged_hd_into_an_rgb_encoder_is_converted_with_bt709(tmp_path):
    """The run works in BT.709 for untagged HD, but the frames went to the encoder's RGB conversion untagged:
    swscale's default, BT.601, turned a colour 35 levels off. The reference here is the H.273 formula."""
    import numpy as np

    from utils import run_pipeline, ycbcr_matrix

    yuv = (170, 60, 40)  # inside RGB's gamut in BT.709 (the run's [0, 1] clamp leaves it), 17 levels off in BT.601
    clip = _flat_clip(tmp_path / "hd.mkv", 1280, 720, yuv)
    out = tmp_path / "hd.mov"
    result = run_pipeline(clip, "-o", out, "-vf", "", "-c", "png")
    assert result.returncode == 0, result.stderr
    _, frame = _first_frame(out)
    got = frame.to_ndarray(format="rgb24")[360, 640].astype(float)
    ycc = np.array([(yuv[0] - 16) / 219, (yuv[1] - 128) / 224, (yuv[2] - 128) / 224])
    want, bt601 = (np.clip(np.linalg.inv(ycbcr_matrix(Colour(m))) @ ycc, 0, 1) * 255 for m in ("bt709", "bt601"))
    assert np.abs(got - want).max() <= 4, (got, want)  # swscale's 8-bit RGB path is a few levels off exact
    assert np.abs(got - bt601).max() > 15, (got, bt601)


def test_the_primaries_and_transfer_reach_encoders_that_code_them_per_frame_and_rgb_in_mov(tmp_path):
    """ProRes codes them in each frame's header, from the frame (they came out unspecified: PQ lost); an
    RGB stream in MOV got none, since the muxer writes them only beside a matrix tag."""
    from utils import run_pipeline

    clip = _flat_clip(tmp_path / "pq.mkv", 64, 48, (300 // 4, 128, 128), colorspace=9, color_range=1,
                      color_primaries=9, color_trc=16)
    for codec in ("prores_ks", "png"):
        out = tmp_path / f"{codec}.mov"
        result = run_pipeline(clip, "-o", out, "-vf", "", "-c", codec)
        assert result.returncode == 0, result.stderr
        cc, frame = _first_frame(out)
        assert (cc.color_primaries, cc.color_trc) == (9, 16), codec
        assert (frame.color_primaries, frame.color_trc) == (9, 16), codec


@pytest.mark.parametrize("pix_fmt", ["gray", "gray10le"])
def test_grey_output_is_tagged_with_the_range_it_is_coded_in(tmp_path, pix_fmt):
    """swscale codes grey in full range whatever is asked; the stream said limited (or nothing), and a player
    stretched it again: black and white crushed."""
    import numpy as np

    from utils import run_pipeline

    clip = _flat_clip(tmp_path / "in.mkv", 64, 48, (16 + 219 // 2, 128, 128), colorspace=6, color_range=1)
    out = tmp_path / "grey.mkv"
    result = run_pipeline(clip, "-o", out, "-vf", "", "-c", "ffv1", "-pix_fmt", pix_fmt)
    assert result.returncode == 0, result.stderr
    cc, frame = _first_frame(out)
    assert cc.color_range == 2 and frame.format.name == pix_fmt
    grey = frame.to_ndarray().astype(float) / (4 if pix_fmt.endswith("10le") else 1)
    assert np.abs(grey - 255 / 2).max() <= 1.5  # mid-grey in full range: what the stream now says


@pytest.mark.parametrize("pix_fmt, codec", [("gray", "ffv1"), ("gray10le", "ffv1"), ("ya8", "png")])
def test_grey_output_of_bt709_input_is_its_luma(tmp_path, pix_fmt, codec):
    """Grey is the Y plane, range-expanded. From frames tagged BT.709 swscale went through RGB and weighed it
    with BT.601's luma: BT.709 red came out 76, not 54 (its Y, 63, at full range)."""
    import numpy as np

    from utils import run_pipeline

    red = (63, 102, 240)  # BT.709 limited range, the H.273 formula: pure red
    clip = _flat_clip(tmp_path / "red.mkv", 64, 48, red, colorspace=1, color_range=1)
    out = tmp_path / ("grey.mkv" if codec == "ffv1" else "grey.mov")
    result = run_pipeline(clip, "-o", out, "-vf", "", "-c", codec, "-pix_fmt", pix_fmt)
    assert result.returncode == 0, result.stderr
    _, frame = _first_frame(out)
    if pix_fmt == "ya8":  # grey and alpha interleaved, which to_ndarray does not take
        grey = np.frombuffer(frame.planes[0], np.uint8).reshape(48, -1)[:, 0:128:2].astype(float)
    else:
        grey = frame.to_ndarray().astype(float) / (4 if pix_fmt.endswith("10le") else 1)
    assert np.abs(grey - (red[0] - 16) * 255 / 219).max() <= 1.5, np.unique(grey)


def test_float_grey_is_made_full_range_too():
    """swscale expands integer grey to full range, not float grey: OpenEXR's frames (grayf32le) from
    limited-range input had black at 0.0625 and white at 0.918."""
    import av
    import numpy as np

    from pipeline.encoder_frames import EncoderFrames
    from pipeline.video import Colour

    codes = np.concatenate([np.array([16, 126, 235] * 4, np.uint8).repeat(4)[None].repeat(8, 0),
                            np.full((4, 48), 128, np.uint8)])
    frame = av.VideoFrame.from_ndarray(codes, format="yuv420p")
    frame.colorspace, frame.color_range = 1, 1
    grey = EncoderFrames("grayf32le", Colour("bt709", False, 1, 1), "x.exr").convert(frame).to_ndarray()
    assert np.allclose(grey[0, [0, 4, 8]], [0, 110 / 219, 1], atol=1e-3), grey[0, :12]


def _limited_codes(rgb, matrix: str) -> tuple[int, int, int]:
    """The 8-bit limited-range YUV of ``rgb`` (0 to 1) in ``matrix``: the H.273 formula."""
    import numpy as np

    from utils import ycbcr_matrix

    y, cb, cr = ycbcr_matrix(Colour(matrix)) @ np.asarray(rgb, float)
    return round(16 + 219 * y), round(128 + 224 * cb), round(128 + 224 * cr)


@pytest.mark.parametrize("codec, out, size, matrix, tag, said", [
    ("mjpeg", "out.mkv", (64, 48), "bt709", 1, "codes BT.601 only: the BT.709 frames are converted to BT.601"),
    ("mjpeg", "out.avi", (64, 48), "bt2020", 9, "codes BT.601 only: the BT.2020 frames are converted to BT.601"),
    ("ljpeg", "out.avi", (64, 48), "bt709", 1, "codes BT.601 only"),
    ("libwebp", "out.webp", (64, 48), "bt709", 1, "codes BT.601 only"),
    ("dnxhd", "out.mov", (1280, 720), "bt601", 6, "codes BT.709 only: the BT.601 frames are converted to BT.709"),
    ("utvideo", "out.avi", (1280, 720), "bt2020", 9,
     "codes BT.601 or BT.709 only: the BT.2020 frames are converted to BT.709"),
], ids=["mjpeg", "mjpeg-2020", "ljpeg", "webp", "dnxhd", "utvideo"])
def test_an_encoder_read_back_in_one_matrix_gets_its_frames_in_it(tmp_path, codec, out, size, matrix, tag, said):
    """JPEG's and WebP's decoders read every frame as BT.601, DNxHD's as BT.709, UT Video's as the one of two it
    has a flag for: other codes went in as they were, and pure red read back as (233, 0, 1)."""
    import numpy as np

    from utils import run_pipeline

    clip = _flat_clip(tmp_path / "red.mkv", *size, _limited_codes([1, 0, 0], matrix), colorspace=tag, color_range=1)
    options = {"dnxhd": ["--encoder-opt", "profile=dnxhr_hq"], "libwebp": ["--frames", 1]}.get(codec, [])
    result = run_pipeline(clip, "-o", tmp_path / out, "-vf", "", "-c", codec, *options, quiet=False)
    assert result.returncode == 0, result.stderr
    assert f"{codec} {said}" in result.stderr
    _, frame = _first_frame(tmp_path / out)
    got = frame.to_ndarray(format="rgb24").astype(int)
    assert np.abs(got - [255, 0, 0]).max() <= (8 if codec == "libwebp" else 4), got[0, 0]  # WebP is lossy


@pytest.mark.parametrize("suffix, pix_fmt", [(".tiff", "rgb24"), (".jp2", "rgb24")])
def test_pictures_whose_yuv_carries_no_tags_are_rgb(tmp_path, suffix, pix_fmt):
    """TIFF's and JPEG 2000's YUV holds no matrix (TIFF's readers assume BT.601): they were YUV by default."""
    import numpy as np

    from utils import run_pipeline

    clip = _flat_clip(tmp_path / "red.mkv", 64, 48, _limited_codes([1, 0, 0], "bt709"), colorspace=1, color_range=1)
    out = tmp_path / f"red{suffix}"
    result = run_pipeline(clip, "-o", out, "-vf", "", "--frames", 1)
    assert result.returncode == 0, result.stderr
    _, frame = _first_frame(out)
    assert frame.format.name == pix_fmt
    assert np.abs(frame.to_ndarray(format="rgb24").astype(int) - [255, 0, 0]).max() <= 2


def test_packed_yuv_is_tagged_as_yuv(tmp_path):
    """uyvy422 (the raw format MOV and AVI read back) was taken for something not YUV: no matrix or range
    tag, and BT.709 red read back as (231, 0, 1)."""
    import numpy as np

    from utils import run_pipeline

    clip = _flat_clip(tmp_path / "red.mkv", 64, 48, _limited_codes([1, 0, 0], "bt709"), colorspace=1, color_range=1)
    out = tmp_path / "raw.mkv"
    result = run_pipeline(clip, "-o", out, "-vf", "", "-c", "rawvideo", "-pix_fmt", "uyvy422")
    assert result.returncode == 0, result.stderr
    cc, frame = _first_frame(out)
    assert (cc.colorspace, cc.color_range) == (1, 1)
    assert np.abs(frame.to_ndarray(format="rgb24").astype(int) - [255, 0, 0]).max() <= 3


def test_full_range_into_mov_without_a_range_tag_is_made_limited(tmp_path):
    """MOV's colour box has no range flag: full-range raw video read back as limited (15 codes off)."""
    import numpy as np

    from utils import run_pipeline

    codes = _limited_codes([1, 0, 0], "bt601")
    full = (round((codes[0] - 16) * 255 / 219), round((codes[1] - 128) * 255 / 224 + 128), 255)
    clip = _flat_clip(tmp_path / "red.mkv", 64, 48, full, colorspace=6, color_range=2)
    out = tmp_path / "raw.mov"
    result = run_pipeline(clip, "-o", out, "-vf", "", "-c", "rawvideo", "-pix_fmt", "uyvy422", quiet=False)
    assert result.returncode == 0, result.stderr
    assert ("mov keeps no range tag for rawvideo (.mkv or .mp4 keeps full range): the full-range frames are "
            "converted to limited range") in result.stderr
    _, frame = _first_frame(out)
    assert np.abs(frame.to_ndarray(format="rgb24").astype(int) - [255, 0, 0]).max() <= 3


def test_mp4_keeps_a_matrix_tagged_alone(tmp_path):
    """MP4 and MOV wrote their colour box only where primaries, transfer and matrix were all tagged: SD
    BT.709 tagged with its matrix alone read back as BT.601. The user's own movflags stay."""
    import numpy as np

    from utils import run_pipeline

    clip = _flat_clip(tmp_path / "red.mkv", 64, 48, _limited_codes([1, 0, 0], "bt709"), colorspace=1, color_range=1)
    out = tmp_path / "out.mp4"
    result = run_pipeline(clip, "-o", out, "-vf", "", "-c", "ffv1", "--output-opt", "movflags=+faststart")
    assert result.returncode == 0, result.stderr
    cc, frame = _first_frame(out)
    assert cc.colorspace == 1
    assert np.abs(frame.to_ndarray(format="rgb24").astype(int) - [255, 0, 0]).max() <= 3
    data = out.read_bytes()
    assert data.index(b"moov") < data.index(b"mdat")  # faststart: the index first


@pytest.mark.parametrize("size, tags, codec, suffix, notice", [
    ((64, 48), {"colorspace": 1, "color_range": 1}, "mpeg4", ".avi", "BT.709 limited range frames as BT.601 limited"),
    ((64, 48), {"colorspace": 6, "color_range": 2}, "rawvideo", ".nut", "BT.601 full range frames as BT.601 limited"),
    ((1280, 720), {"colorspace": 6, "color_range": 1}, "mpeg4", ".avi", "BT.601 limited range frames as BT.709"),
    ((1280, 720), {"colorspace": 1, "color_range": 1}, "mpeg4", ".avi", None),  # what players assume of HD
    ((64, 48), {"colorspace": 1, "color_range": 1}, "libx264", ".avi", None),  # H.264's VUI says it
    ((64, 48), {"colorspace": 1, "color_range": 1}, "mpeg4", ".mkv", None),
    ((64, 48), {"colorspace": 1, "color_range": 1}, "mpeg4", ".ts", "BT.709 limited range frames as BT.601 limited"),
], ids=["sd-709", "full-range", "hd-601", "hd-709", "h264", "mkv", "mpegts"])
def test_a_container_without_colour_tags_gets_a_notice_where_players_would_misread(tmp_path, size, tags, codec,
                                                                                    suffix, notice):
    from utils import run_pipeline

    clip = _flat_clip(tmp_path / "in.mkv", *size, (120, 100, 150), **tags)
    out = tmp_path / f"out{suffix}"
    result = run_pipeline(clip, "-o", out, "-vf", "", "-c", codec, "--frames", "1", quiet=False)
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "keeps no colour tags" in line]
    if notice is None:
        assert said == []
    else:
        assert len(said) == 1 and notice in said[0] and "(.mkv or .mov keeps the tags)" in said[0], said


def test_png_frames_say_full_range_as_their_rgb_is(tmp_path):
    """PNG's cICP chunk (primaries, transfer, matrix, full-range flag) took the range of the YUV frames before
    their conversion to RGB: limited-range input made PNGs that said "narrow range" of full-range pixels."""
    from utils import run_pipeline

    clip = _flat_clip(tmp_path / "in.mkv", 64, 48, (120, 100, 150), colorspace=1, color_range=1, color_primaries=1,
                      color_trc=1)
    for pix_fmt in ("rgb24", "gray"):  # grey too: full range, as the Y plane is made
        (tmp_path / pix_fmt).mkdir()
        result = run_pipeline(clip, "-o", tmp_path / pix_fmt / "%03d.png", "-vf", "", "-pix_fmt", pix_fmt)
        assert result.returncode == 0, result.stderr
        data = (tmp_path / pix_fmt / "001.png").read_bytes()
        at = data.index(b"cICP") + 4
        assert data[at:at + 4] == bytes([1, 1, 0, 1]), pix_fmt  # BT.709 primaries and transfer, RGB, full range


def test_rgb_output_of_a_matrix_read_as_another_is_converted_with_the_run_s(tmp_path):
    """BT.2020 constant luminance is processed with non-constant luminance's weights: the RGB output was left
    to swscale, which refused the CL tag (exit 2); it is converted as the run worked."""
    import numpy as np

    from utils import run_pipeline

    for name, tag in (("cl", 10), ("ncl", 9)):
        clip = _flat_clip(tmp_path / f"{name}.mkv", 64, 48, (120, 100, 150), colorspace=tag, color_range=1)
        result = run_pipeline(clip, "-o", tmp_path / f"{name}.png", "-vf", "", "--frames", 1)
        assert result.returncode == 0, result.stderr
    got, want = (_first_frame(tmp_path / f"{n}.png")[1].to_ndarray(format="rgb24") for n in ("cl", "ncl"))
    assert np.array_equal(got, want)


def test_openexr_frames_keep_their_colour(tmp_path):
    """OpenEXR's encoder lists grey first: a sequence of .exr frames came out grey. Its float RGB is taken."""
    import numpy as np

    from utils import run_pipeline

    red = (63, 102, 240)  # BT.709 limited range: pure red
    clip = _flat_clip(tmp_path / "red.mkv", 64, 48, red, colorspace=1, color_range=1)
    (tmp_path / "exr").mkdir()
    result = run_pipeline(clip, "-o", tmp_path / "exr" / "%02d.exr", "-vf", "")
    assert result.returncode == 0, result.stderr
    _, frame = _first_frame(tmp_path / "exr" / "01.exr")
    assert frame.format.name == "gbrpf32le"
    assert np.abs(frame.to_ndarray() - [1, 0, 0]).max() < 0.01


def test_full_range_into_an_encoder_that_codes_limited_range_only_is_converted(tmp_path):
    """ProRes has no full-range flag: full-range codes went in as they were, and decoders read them as
    limited (black and white crushed). Now they are converted, as ffmpeg converts them for such encoders."""
    import numpy as np

    from utils import run_pipeline

    clip = _flat_clip(tmp_path / "full.mkv", 64, 48, (235, 128, 128), colorspace=1, color_range=2)
    out = tmp_path / "prores.mov"
    result = run_pipeline(clip, "-o", out, "-vf", "", "-c", "prores_ks", quiet=False)
    assert result.returncode == 0, result.stderr
    assert "prores_ks codes limited range only: the full-range frames are converted" in result.stderr
    cc, frame = _first_frame(out)
    assert cc.color_range == 1 and frame.format.name == "yuv422p10le"
    y = np.frombuffer(frame.planes[0], np.uint16).reshape(frame.height, -1)[:, :frame.width]
    assert len(np.unique(y)) == 1 and abs(int(y[0, 0]) - 64 - 235 * 876 / 255) <= 1  # not 940, 235 unconverted


@pytest.mark.parametrize("pix_fmt", ["gray", "gray10le"])
def test_limited_range_grey_input_keeps_its_codes(tmp_path, pix_fmt):
    """swscale reads grey as full range whatever its tag: a limited-range 4:0:0 stream came out with black at
    30 and white at 218 (8 bits), its contrast lost."""
    import av
    import numpy as np

    from utils import run_pipeline

    deep = pix_fmt.endswith("10le")
    codes = np.linspace(16, 235, 64).round().astype(np.uint16 if deep else np.uint8) * (4 if deep else 1)
    clip = tmp_path / "grey.mkv"
    with av.open(str(clip), "w") as out:
        stream = out.add_stream("ffv1", rate=25)
        stream.width, stream.height, stream.pix_fmt = 64, 48, pix_fmt
        stream.codec_context.color_range = 1
        for i in range(2):
            frame = av.VideoFrame.from_ndarray(np.tile(codes, (48, 1)), format=pix_fmt)
            frame.pts, frame.color_range = i, 1
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    result = run_pipeline(clip, "-o", tmp_path / "out.mkv", "-vf", "", "-c", "ffv1")
    assert result.returncode == 0, result.stderr
    cc, frame = _first_frame(tmp_path / "out.mkv")
    assert cc.color_range == 1 and frame.format.name == ("yuv420p10le" if deep else "yuv420p")
    y = np.frombuffer(frame.planes[0], codes.dtype).reshape(48, -1)[:, :64]
    assert np.abs(y[0].astype(int) - codes.astype(int)).max() <= 1, (y[0], codes)


def test_a_matrix_the_conversions_do_not_have_is_said_with_the_one_used(tmp_path):
    """SMPTE 240M, FCC, YCgCo... were processed as BT.601 without a word."""
    from pipeline.video import approximated_matrix
    from utils import run_pipeline

    assert [approximated_matrix(c) for c in (0, 1, 2, 3, 5, 6, 9, 10)] == [None] * 8
    assert approximated_matrix(12, primaries=1) is None and approximated_matrix(12, primaries=9) is None
    assert "chroma-derived" in approximated_matrix(12, primaries=6)  # its weights are not BT.601's
    assert approximated_matrix(7) == "the SMPTE 240M matrix is processed as the nearest the conversions have"
    assert approximated_matrix(8) == "YCgCo cannot be converted here: processed as BT.601, its colours are off"
    assert approximated_matrix(99) == "matrix tag 99 cannot be converted here: processed as BT.601, its colours are off"
    assert Colour.from_tags(12, 1, primaries=9).matrix == "bt2020" and Colour.from_tags(3, 1, height=1080).matrix == "bt709"
    clip = _flat_clip(tmp_path / "fcc.mkv", 64, 48, (120, 110, 150), colorspace=4, color_range=1)
    result = run_pipeline(clip, "-o", tmp_path / "out.mkv", "-vf", "", "-c", "ffv1", quiet=False)
    assert result.returncode == 0, result.stderr
    assert "the FCC matrix is processed as the nearest the conversions have (BT.601)" in result.stderr
    cc, _ = _first_frame(tmp_path / "out.mkv")
    assert cc.colorspace == 4


def test_which_encoders_get_limited_range_frames():
    """FFmpeg's own declaration where its libraries can be asked (the list before was seven names long and
    missed MPEG-2, MPEG-4, DNxHD...), lossless encoders into Matroska excepted."""
    from pipeline.avlib import limited_range_only
    from pipeline.encoders import makes_limited_range

    told = limited_range_only("mpeg2video")
    if told is not None:  # FFmpeg 7.1 and later
        assert told and limited_range_only("prores_ks") and not limited_range_only("libx264")
    assert makes_limited_range("mpeg4", "mov") and makes_limited_range("dnxhd", "mxf")
    assert makes_limited_range("ffv1", "avi") and not makes_limited_range("ffv1", "matroska")
    assert not makes_limited_range("libx264", "mp4") and not makes_limited_range("mjpeg", "avi")


def test_a_lossless_encoder_into_matroska_keeps_full_range_codes(tmp_path):
    import numpy as np

    from utils import run_pipeline

    clip = _flat_clip(tmp_path / "full.mkv", 64, 48, (250, 128, 128), colorspace=1, color_range=2)
    result = run_pipeline(clip, "-o", tmp_path / "out.mkv", "-vf", "", "-c", "ffv1")
    assert result.returncode == 0, result.stderr
    cc, frame = _first_frame(tmp_path / "out.mkv")
    assert cc.color_range == 2 and np.unique(frame.to_ndarray()[:48]).tolist() == [250]


def _spliced_h264(path, *segments):
    """Raw H.264 segments back to back, each with its own colour tags in its own SPS (a broadcast splice), of
    one known picture, coded losslessly: what a decoder gives back is the picture's YUV in those tags."""
    import io

    import av
    import numpy as np

    h, w = 96, 128
    y, x = np.mgrid[0:h, 0:w]
    rgb = np.stack([30 + 190 * x // w, 30 + 190 * y // h, 220 - 170 * x // w], -1).astype(np.uint8)
    data = b""
    for tags in segments:
        buffer = io.BytesIO()
        with av.open(buffer, "w", format="h264") as out:
            stream = out.add_stream("libx264", rate=25, options={"qp": "0"})
            stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
            for name, value in tags.items():
                setattr(stream.codec_context, name, value)
            for i in range(3):
                frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(
                    format="yuv420p", dst_colorspace=tags["colorspace"], dst_color_range=tags["color_range"])
                frame.pts = i
                for name, value in tags.items():
                    setattr(frame, name, value)
                out.mux(stream.encode(frame))
            out.mux(stream.encode(None))
        data += buffer.getvalue()
    path.write_bytes(data)
    return path, rgb


BT601 = dict(colorspace=6, color_range=1, color_primaries=6, color_trc=6)
BT709 = dict(colorspace=1, color_range=1, color_primaries=1, color_trc=1)
BT709_FULL = dict(BT709, color_range=2)


@pytest.mark.parametrize("device", all_devices())
@pytest.mark.parametrize("first, then", [(BT601, BT709), (BT709, BT709_FULL), (BT709_FULL, BT601)],
                         ids=["601-then-709", "limited-then-full", "full-601-after"])
def test_frames_whose_colour_changes_mid_stream_are_converted_to_the_runs(tmp_path, first, then, device):
    """Each frame read with its own tags: every output frame, read with the output's, is the picture (they were
    read with the first frame's: 17 to 32 codes off after the splice, and nothing said)."""
    import numpy as np
    from utils import run_pipeline, video_frames

    src, rgb = _spliced_h264(tmp_path / "splice.h264", first, then)
    out = tmp_path / "out.mkv"
    result = run_pipeline(src, "-o", out, "-vf", "", "-c", "ffv1", "--decode", "cpu", device=device, cwd=tmp_path,
                          quiet=False)
    assert result.returncode == 0, result.stderr
    assert "converted to the first frames' colour" in result.stderr
    frames = video_frames(out)
    assert len(frames) == 6 and {(f.colorspace, f.color_range) for f in frames} == {(first["colorspace"],
                                                                                     first["color_range"])}
    errors = [int(np.abs(f.to_ndarray(format="rgb24").astype(int) - rgb).max()) for f in frames]
    assert max(errors) <= 10, errors  # 4:2:0 chroma, and a spliced frame rounded twice (YUV to YUV)


@pytest.mark.gpu
def test_nvdec_says_frames_whose_colour_changes_mid_stream_are_read_as_the_first(tmp_path):
    from utils import run_pipeline

    src, _ = _spliced_h264(tmp_path / "splice.h264", BT709, BT709_FULL)
    result = run_pipeline(src, "-o", tmp_path / "out.mkv", "--decode", "nvdec", device="cuda", cwd=tmp_path,
                          quiet=False)
    assert result.returncode == 0, result.stderr
    assert "frame 3 is in BT.709 full range after frames in BT.709 limited range" in result.stderr
    assert result.stderr.count("--decode cpu converts them") == 1
