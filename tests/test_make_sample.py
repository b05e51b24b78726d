"""scripts/make_sample.py: synthetic frames and the clips built from them."""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np
import pytest
from av.video.reformatter import ColorPrimaries, ColorRange

import make_sample

W, H, N = 160, 96, 10


def _decode(path):
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        info = {
            "fps": stream.average_rate,
            "codec": stream.codec_context.name,
            "audio": [(a.codec_context.name, a.rate, a.channels) for a in container.streams.audio],
        }
        frames = list(container.decode(stream))
    return info, frames


# --- synth_frame -----------------------------------------------------------


def test_synth_frame_shape_and_dtype():
    frame = make_sample.synth_frame(0, W, H)
    assert frame.shape == (H, W, 3)
    assert frame.dtype == np.uint8


def test_synth_frame_is_deterministic():
    a = make_sample.synth_frame(5, W, H, seed=1)
    make_sample._scene.cache_clear()  # rebuilt from scratch, not just the cached copy
    b = make_sample.synth_frame(5, W, H, seed=1)
    np.testing.assert_array_equal(a, b)


def test_synth_frame_changes_with_index_and_seed():
    base = make_sample.synth_frame(3, W, H, seed=0)
    assert not np.array_equal(base, make_sample.synth_frame(4, W, H, seed=0))
    assert not np.array_equal(base, make_sample.synth_frame(3, W, H, seed=1))


def test_synth_frame_has_detail():
    frame = make_sample.synth_frame(0, W, H)
    assert frame.std() > 20
    # Detail in every channel, not a single colour ramp.
    assert all(frame[..., c].std() > 10 for c in range(3))


def test_synth_frame_does_not_mutate_cached_scene():
    first = make_sample.synth_frame(0, W, H)
    make_sample.synth_frame(7, W, H)
    np.testing.assert_array_equal(first, make_sample.synth_frame(0, W, H))


@pytest.mark.parametrize("size", [(33, 17), (1, 1), (2, 400)])
def test_synth_frame_odd_and_tiny_sizes(size):
    w, h = size
    assert make_sample.synth_frame(2, w, h).shape == (h, w, 3)


# --- make_clip -------------------------------------------------------------


def test_make_clip_h264_with_audio(tmp_path):
    path = make_sample.make_clip(tmp_path / "clip.mp4", width=W, height=H, frames=N, fps=30)
    assert path.exists()
    info, frames = _decode(path)
    assert info["codec"] == "h264"
    assert info["fps"] == 30
    assert info["audio"] == [("aac", 48000, 2)]
    assert len(frames) == N
    assert {(f.width, f.height) for f in frames} == {(W, H)}
    # The container picks its own time base; in units of 1/fps pts are 0..N-1.
    assert [f.pts * f.time_base * 30 for f in frames] == list(range(N))


def test_make_clip_without_audio(tmp_path):
    path = make_sample.make_clip(tmp_path / "clip.mp4", width=W, height=H, frames=4, audio=False)
    info, frames = _decode(path)
    assert info["audio"] == []
    assert len(frames) == 4


def test_make_clip_audio_matches_video_duration(tmp_path):
    path = make_sample.make_clip(tmp_path / "clip.mkv", width=W, height=H, frames=N, fps=25)
    with av.open(str(path)) as container:
        samples = sum(f.samples for f in container.decode(audio=0))
    # AAC pads to whole 1024-sample packets and adds its encoder delay.
    expected = N * 48000 // 25
    assert expected <= samples <= expected + 2 * 1024


@pytest.mark.parametrize(
    "name, pix_fmt",
    [
        ("raw.nut", "yuv420p"),
        ("raw.mkv", "yuv420p"),
        ("raw10.nut", "yuv420p10le"),
        ("nv12.nut", "nv12"),
        ("gray.nut", "gray"),
    ],
)
def test_rawvideo_round_trip_is_exact(tmp_path, name, pix_fmt):
    path = make_sample.make_clip(
        tmp_path / name,
        width=W,
        height=H,
        frames=N,
        codec="rawvideo",
        pix_fmt=pix_fmt,
        audio=False,
        seed=2,
    )
    info, frames = _decode(path)
    assert len(frames) == N
    for i, frame in enumerate(frames):
        assert frame.format.name == pix_fmt
        # Matroska stores milliseconds, so 1/30 s steps come back rounded.
        assert round(frame.pts * frame.time_base * 30) == i
        expected = make_sample.rgb_to_frame(make_sample.synth_frame(i, W, H, seed=2), pix_fmt)
        np.testing.assert_array_equal(frame.to_ndarray(), expected.to_ndarray())


@pytest.mark.parametrize("codec, ext", [("rawvideo", "nut"), ("ffv1", "mkv")])
def test_odd_size_lossless_yuv444p(tmp_path, codec, ext):
    w, h = 33, 17
    path = make_sample.make_clip(
        tmp_path / f"odd.{ext}",
        width=w,
        height=h,
        frames=3,
        codec=codec,
        pix_fmt="yuv444p",
        audio=False,
    )
    _, frames = _decode(path)
    assert len(frames) == 3
    for i, frame in enumerate(frames):
        expected = make_sample.rgb_to_frame(make_sample.synth_frame(i, w, h), "yuv444p")
        np.testing.assert_array_equal(frame.to_ndarray(), expected.to_ndarray())


@pytest.mark.parametrize("size", [(161, 96), (160, 97)])
def test_libx264_refuses_odd_size(tmp_path, size):
    path = tmp_path / "odd.mp4"
    with pytest.raises(ValueError, match="even"):
        make_sample.make_clip(path, width=size[0], height=size[1], frames=2)
    assert not path.exists()


def test_subsampled_raw_refuses_odd_size(tmp_path):
    with pytest.raises(ValueError, match="even"):
        make_sample.make_clip(tmp_path / "odd.nut", width=33, height=17, codec="rawvideo")


@pytest.mark.parametrize(
    "width, height, colorspace, primaries",
    [
        (W, H, make_sample.AVCOL_SPC_SMPTE170M, ColorPrimaries.SMPTE170M),
        (1280, 720, make_sample.AVCOL_SPC_BT709, ColorPrimaries.BT709),
    ],
)
def test_colour_tags_follow_height(tmp_path, width, height, colorspace, primaries):
    path = make_sample.make_clip(
        tmp_path / "tags.mkv",
        width=width,
        height=height,
        frames=1,
        codec="ffv1",
        pix_fmt="yuv444p",
        audio=False,
    )
    with av.open(str(path)) as container:
        ctx = container.streams.video[0].codec_context
        assert ctx.colorspace == colorspace
        assert ctx.color_primaries == primaries
        assert ctx.color_range == ColorRange.MPEG


def test_options_override_defaults(tmp_path):
    path = make_sample.make_clip(
        tmp_path / "intra.mp4", width=W, height=H, frames=4, audio=False, crf=30, options={"g": 1}
    )
    with av.open(str(path)) as container:
        keys = [p.is_keyframe for p in container.demux(video=0) if p.size]
    assert keys == [True] * 4


def test_ntsc_rate():
    assert make_sample._as_rate(29.97) == Fraction(30000, 1001)
    assert make_sample._as_rate(59.94) == Fraction(60000, 1001)
    assert make_sample._as_rate(30.0) == 30
    assert make_sample._as_rate(12.5) == Fraction(25, 2)


# --- command line ------------------------------------------------------------


def test_cli_writes_and_reports(tmp_path, capsys):
    out = tmp_path / "cli.mkv"
    argv = [
        "sample",
        "-o",
        str(out),
        "--frames",
        "6",
        "--fps",
        "24",
        "--size",
        "96x64",
        "--codec",
        "ffv1",
        "--pix-fmt",
        "yuv444p",
        "--no-audio",
        "--seed",
        "4",
    ]
    assert make_sample.main(argv) == 0
    line = capsys.readouterr().out.strip()
    assert "cli.mkv" in line and "6 frames" in line and "0.25 s" in line
    info, frames = _decode(out)
    assert info["codec"] == "ffv1" and info["audio"] == [] and info["fps"] == 24
    assert len(frames) == 6 and (frames[0].width, frames[0].height) == (96, 64)


def test_presets_match_the_documented_clips():
    p = make_sample.PRESETS
    sample = p["sample"]
    assert (sample.width, sample.height, sample.fps, sample.frames) == (640, 360, 30, 90)
    assert (p["1080p"].fps, p["1080p"].frames, p["1080p"].crf) == (60, 600, 23)
    assert (p["4k"].width, p["4k"].height, p["4k"].frames) == (3840, 2160, 300)
    assert p["raw1080p"].codec == p["raw4k"].codec == "rawvideo"
    assert not p["raw1080p"].audio and not p["raw4k"].audio
