"""pipeline/sample.py (`pipeline sample`): synthetic frames and the clips built from them."""

from __future__ import annotations

import os
import signal
import subprocess
from fractions import Fraction

import av
import numpy as np
import pytest
from av.video.reformatter import ColorPrimaries, ColorRange
from utils import cli_command, environment, partials, run_command, run_pipeline, run_python, wait_until

from pipeline import sample, sample_cli
from pipeline.cli import SAMPLES, main
from pipeline.errors import Interrupted


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
    frame = sample.synth_frame(0, W, H)
    assert frame.shape == (H, W, 3)
    assert frame.dtype == np.uint8


def test_synth_frame_is_deterministic():
    a = sample.synth_frame(5, W, H, seed=1)
    sample._scene.cache_clear()  # rebuilt from scratch, not just the cached copy
    b = sample.synth_frame(5, W, H, seed=1)
    np.testing.assert_array_equal(a, b)


def test_synth_frame_changes_with_index_and_seed():
    base = sample.synth_frame(3, W, H, seed=0)
    assert not np.array_equal(base, sample.synth_frame(4, W, H, seed=0))
    assert not np.array_equal(base, sample.synth_frame(3, W, H, seed=1))


def test_synth_frame_has_detail():
    frame = sample.synth_frame(0, W, H)
    assert frame.std() > 20
    # Detail in every channel, not a single colour ramp.
    assert all(frame[..., c].std() > 10 for c in range(3))


def test_synth_frame_does_not_mutate_cached_scene():
    first = sample.synth_frame(0, W, H)
    sample.synth_frame(7, W, H)
    np.testing.assert_array_equal(first, sample.synth_frame(0, W, H))


@pytest.mark.parametrize("size", [(33, 17), (1, 1), (2, 400)])
def test_synth_frame_odd_and_tiny_sizes(size):
    w, h = size
    assert sample.synth_frame(2, w, h).shape == (h, w, 3)


# --- make_clip -------------------------------------------------------------


def test_make_clip_h264_with_audio(tmp_path):
    path = sample.make_clip(tmp_path / "clip.mp4", width=W, height=H, frames=N, fps=30)
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
    path = sample.make_clip(tmp_path / "clip.mp4", width=W, height=H, frames=4, audio=False)
    info, frames = _decode(path)
    assert info["audio"] == []
    assert len(frames) == 4


def test_make_clip_audio_matches_video_duration(tmp_path):
    path = sample.make_clip(tmp_path / "clip.mkv", width=W, height=H, frames=N, fps=25)
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
    path = sample.make_clip(
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
        expected = sample.rgb_to_frame(sample.synth_frame(i, W, H, seed=2), pix_fmt)
        np.testing.assert_array_equal(frame.to_ndarray(), expected.to_ndarray())


@pytest.mark.parametrize("codec, ext", [("rawvideo", "nut"), ("ffv1", "mkv")])
def test_odd_size_lossless_yuv444p(tmp_path, codec, ext):
    w, h = 33, 17
    path = sample.make_clip(
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
        expected = sample.rgb_to_frame(sample.synth_frame(i, w, h), "yuv444p")
        np.testing.assert_array_equal(frame.to_ndarray(), expected.to_ndarray())


@pytest.mark.parametrize("size", [(161, 96), (160, 97)])
def test_libx264_refuses_odd_size(tmp_path, size):
    path = tmp_path / "odd.mp4"
    with pytest.raises(ValueError, match="even"):
        sample.make_clip(path, width=size[0], height=size[1], frames=2)
    assert not path.exists()


def test_an_encoder_refusing_the_size_says_so_before_a_frame_is_drawn(tmp_path, monkeypatch, capsys):
    """x264 refuses 16384x16384 when it opens: that took 30 s and 10 GB of drawing the first frame."""
    def no_drawing(*args):
        raise AssertionError("a frame was drawn")

    monkeypatch.setattr(sample, "synth_frame", no_drawing)
    out = tmp_path / "big.mp4"
    assert main(["sample", "--size", "16384x16384", "--frames", "1", "-o", str(out), "--no-audio"]) == 2
    assert "libx264 cannot encode 16384x16384 yuv420p with these settings" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_subsampled_raw_refuses_odd_size(tmp_path):
    with pytest.raises(ValueError, match="even"):
        sample.make_clip(tmp_path / "odd.nut", width=33, height=17, codec="rawvideo")


@pytest.mark.parametrize(
    "width, height, colorspace, primaries",
    [
        (W, H, sample.AVCOL_SPC_SMPTE170M, ColorPrimaries.SMPTE170M),
        (1280, 720, sample.AVCOL_SPC_BT709, ColorPrimaries.BT709),
    ],
)
def test_colour_tags_follow_height(tmp_path, width, height, colorspace, primaries):
    path = sample.make_clip(
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
    path = sample.make_clip(
        tmp_path / "intra.mp4", width=W, height=H, frames=4, audio=False, crf=30, options={"g": 1}
    )
    with av.open(str(path)) as container:
        keys = [p.is_keyframe for p in container.demux(video=0) if p.size]
    assert keys == [True] * 4


def test_ntsc_rate():
    assert sample._as_rate(29.97) == Fraction(30000, 1001)
    assert sample._as_rate(59.94) == Fraction(60000, 1001)
    assert sample._as_rate(30.0) == 30
    assert sample._as_rate(12.5) == Fraction(25, 2)


# --- command line ------------------------------------------------------------


def test_cli_writes_and_reports(tmp_path, capsys):
    out = tmp_path / "cli.mkv"
    argv = [
        "sample",
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
    assert main(argv) == 0
    line = capsys.readouterr().out.strip()
    assert "cli.mkv" in line and "6 frames" in line and "0.25 s" in line
    info, frames = _decode(out)
    assert info["codec"] == "ffv1" and info["audio"] == [] and info["fps"] == 24
    assert len(frames) == 6 and (frames[0].width, frames[0].height) == (96, 64)


def test_gop_sets_the_keyframe_interval(tmp_path):
    result = _sample("-o", "g.mp4", "--frames", "40", "-g", "8", "--no-audio", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    with av.open(str(tmp_path / "g.mp4")) as c:
        packets = [p for p in c.demux(c.streams.video[0]) if p.size]
    assert [i for i, p in enumerate(packets) if p.is_keyframe] == [0, 8, 16, 24, 32]


def test_presets_match_the_documented_clips():
    p = sample_cli.PRESETS
    default = p["sample"]
    assert (default.width, default.height, default.fps, default.frames) == (640, 360, 30, 90)
    assert (p["1080p"].fps, p["1080p"].frames, p["1080p"].crf) == (60, 600, 23)
    assert (p["4k"].width, p["4k"].height, p["4k"].frames) == (3840, 2160, 300)
    assert p["raw1080p"].codec == p["raw4k"].codec == "rawvideo"
    assert not p["raw1080p"].audio and not p["raw4k"].audio


def test_the_help_lists_every_clip_with_its_path():
    for name, preset in sample_cli.PRESETS.items():
        line = next(row for row in SAMPLES.splitlines() if row.split()[:1] == [name])
        assert f"{preset.width}x{preset.height}" in line and f"{preset.fps:g} fps" in line
        assert f"{preset.frames / preset.fps:g} s" in line and f"-> {preset.path}" in line


def test_cli_defaults_to_samples_in_the_current_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["sample", "--frames", "2", "--size", "64x32"]) == 0
    assert capsys.readouterr().out.startswith("samples/sample.mp4 ")
    _, frames = _decode(tmp_path / "samples" / "sample.mp4")
    assert len(frames) == 2


@pytest.mark.parametrize(
    "argv, code, message",
    [
        (["sample", "8k"], 2, "unknown sample '8k'"),
        (["sample", "--size", "33x17", "-o", "odd.mp4"], 2, "even dimensions"),
        (["sample", "--codec", "nosuch", "-o", "x.mkv"], 2, "unknown codec 'nosuch'"),
        (["sample", "--frames", "0"], 2, "frames must be positive"),
        (["sample", "--crf", "999"], 2, "Invalid --crf (999)"),
        (["sample", "--crf", "-1"], 2, "Invalid --crf (-1)"),
        (["sample", "--crf", "20", "--codec", "ffv1", "-o", "x.mkv"], 2, "--codec ffv1 does not take it"),
        (["sample", "--size", "big"], 2, "expected WxH"),
    ],
)
def test_cli_refuses_bad_arguments_with_one_line(argv, code, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == code
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.rglob("*.m*"))


def test_the_cli_imports_the_clip_generator_only_for_sample():
    import subprocess
    import sys

    code = ("import sys; from pipeline.cli import build_parser; build_parser().parse_args(['filters']); "
            "print(sorted(m for m in ('cv2', 'pipeline.sample', 'pipeline.sample_cli') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --- the output, as `pipeline run` treats its own -----------------------------------------------------------

SMALL = ("--frames", "2", "--size", "64x32")


def _sample(*args, cwd, timeout=60):
    return run_command(cli_command("sample", *args), cwd=cwd, timeout=timeout)


def _one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr and "internal error" not in result.stderr, \
        result.stderr
    return lines[0]


def test_an_existing_output_is_kept_without_y_and_replaced_with_it(tmp_path):
    out = tmp_path / "mine.mp4"
    out.write_bytes(b"the user's own file")
    refused = _sample("-o", out, *SMALL, cwd=tmp_path)
    assert refused.returncode == 2 and "already exists" in _one_error_line(refused)
    assert out.read_bytes() == b"the user's own file"
    replaced = _sample("-o", out, *SMALL, "-y", cwd=tmp_path)
    assert replaced.returncode == 0, replaced.stderr
    assert len(_decode(out)[1]) == 2 and partials(tmp_path) == []


def test_a_failing_sample_keeps_the_file_it_would_have_replaced(tmp_path):
    out = tmp_path / "mine.3gp"
    out.write_bytes(b"the user's own file")
    # Refused by H.263 (which takes a few sizes only) when it opens, after the container is created: the
    # failure comes mid-write.
    result = _sample("-o", out, "--size", "64x32", "--frames", "2", "--codec", "h263", "-y", cwd=tmp_path)
    assert result.returncode == 2 and "h263 cannot encode 64x32" in _one_error_line(result)
    assert out.read_bytes() == b"the user's own file" and partials(tmp_path) == []


def test_make_clip_keeps_the_file_it_would_have_replaced_when_it_fails(tmp_path):
    out = tmp_path / "mine.3gp"
    out.write_bytes(b"the user's own file")
    with pytest.raises(ValueError, match="h263 cannot encode"):
        sample.make_clip(out, width=64, height=32, frames=2, codec="h263", audio=False)
    assert out.read_bytes() == b"the user's own file" and partials(tmp_path) == []


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)],
                         ids=["INT", "TERM", "HUP"])
def test_a_signal_leaves_no_partial_clip_and_the_old_file_as_it_was(tmp_path, signum, code):
    out = tmp_path / "mine.mp4"
    out.write_bytes(b"the user's own file")
    proc = subprocess.Popen(cli_command("sample", "-o", out, "--frames", "100000", "--size", "640x360", "-y"),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: any(p.stat().st_size for p in partials(tmp_path)), proc, "temporary clip", timeout=60)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert len(err.strip().splitlines()) == 1 and "interrupted by" in err and "Traceback" not in err
    assert out.read_bytes() == b"the user's own file" and partials(tmp_path) == []


def test_make_clip_asks_its_checkpoint_before_each_frame_and_before_placing_the_clip(tmp_path):
    calls = []
    out = sample.make_clip(tmp_path / "c.mp4", width=64, height=32, frames=3, audio=False,
                           checkpoint=lambda: calls.append(len(calls)))
    assert len(calls) == 3 + 1 and len(_decode(out)[1]) == 3


@pytest.mark.parametrize("stop_at", [0, 2, 3], ids=["first frame", "mid-clip", "before placing"])
def test_what_the_checkpoint_raises_ends_make_clip_with_no_clip_written(tmp_path, stop_at):
    out = tmp_path / "mine.mp4"
    out.write_bytes(b"the user's own file")
    calls = []

    def checkpoint():
        if len(calls) == stop_at:
            raise Interrupted(signal.SIGTERM, "no clip written")
        calls.append(None)

    with pytest.raises(Interrupted):
        sample.make_clip(out, width=64, height=32, frames=3, checkpoint=checkpoint)
    assert out.read_bytes() == b"the user's own file" and partials(tmp_path) == []


def test_the_sample_signal_handler_only_records_the_signal_and_the_checkpoint_raises(tmp_path):
    # Raised where the main thread is, the exception could be lost inside PyAV's error handling; the
    # handler records the signal and the clip stops at the next checkpoint instead.
    before = signal.getsignal(signal.SIGTERM)
    with sample_cli._stopped_by_signals(tmp_path / ".x.partial") as checkpoint:
        checkpoint()  # no signal yet
        os.kill(os.getpid(), signal.SIGTERM)  # handled here, in the main thread: nothing raised
        with pytest.raises(Interrupted) as raised:
            checkpoint()
    assert raised.value.signum == signal.SIGTERM and raised.value.exit_code == 143
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_second_signal_removes_the_partial_clip_and_exits_at_once(tmp_path):
    """Even from a directory moved during the run: the clip is named in the directory held open."""
    (tmp_path / "d").mkdir()
    code = f"""
import os, signal
from pathlib import Path
from pipeline import sample_cli
tmp = Path({str(tmp_path / "d" / ".c.partial-1.mp4")!r})
tmp.write_bytes(b"half a clip")
with sample_cli._stopped_by_signals(tmp):
    os.kill(os.getpid(), signal.SIGTERM)  # recorded: the clip would stop at its next frame
    os.rename({str(tmp_path / "d")!r}, {str(tmp_path / "moved")!r})
    os.kill(os.getpid(), signal.SIGTERM)  # the second: out at once
raise SystemExit("not reached")
"""
    result = run_python("-c", code, cwd=tmp_path)
    assert result.returncode == 143 and result.stderr == "pipeline: SIGTERM again: exiting now, no clip written\n"
    assert list((tmp_path / "moved").iterdir()) == []


def test_the_partial_clip_a_second_signal_removes_is_the_one_beside_the_links_target(tmp_path, monkeypatch,
                                                                                      restore_signals):
    target = tmp_path / "real" / "clip.mp4"
    target.parent.mkdir()
    (link := tmp_path / "link.mp4").symlink_to(target)
    given = []
    real = sample_cli._stopped_by_signals
    monkeypatch.setattr(sample_cli, "_stopped_by_signals", lambda tmp: given.append(tmp) or real(tmp))
    assert main(["sample", "-o", str(link), *SMALL]) == 0
    assert given == [sample_cli.temp_path_for(target)] and target.is_file() and link.is_symlink()


@pytest.mark.parametrize("args, message", [
    (("--fps", "inf"), "finite"),
    (("--fps", "nan"), "finite"),
    (("--fps", "0"), "positive"),
    (("--fps", "1e300"), "too high"),
    (("--fps", "10000"), "too high (at most 1000)"),  # it wrote an MP4 whose frames did not decode, exit 0
    (("--fps", "1e-300"), "too low"),  # not "must be positive": it is
    (("--fps", "25/0"), "a rate over 0"),
    (("--fps", "4294967297/4294967296"), "terms are too large"),  # an internal OverflowError, exit 1
    (("--fps", "1/3000"), "too low"),  # as 0.0003 is
    (("--fps", "fast"), "expected a number, N/D or ffmpeg's name for a rate"),
    (("--size", "99999999x99999999"), "too large"),
    (("--size", "0x0"), "positive"),
    (("--codec", "aac"), "encodes audio, not video"),
    (("--codec", "nosuch"), "unknown codec"),
    (("--crf", "-5"), "--crf (-5)"),
    (("--crf", "999"), "--crf (999)"),
    (("--seed", "-1"), "seed"),
    (("--gop", "0"), "--gop"),
    (("-g", "1000000000"), "--gop"),
])
def test_hostile_values_are_one_line_and_exit_2(tmp_path, args, message):
    result = _sample("-o", "x.mp4", "--frames", "2", *args, cwd=tmp_path)
    assert result.returncode == 2 and message in _one_error_line(result)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("given, name", [(n, n) for n in ("meeting12:30.mp4", "with space.mp4", "a" * 246 + ".mp4")]
                         + [("./file:x.mp4", "file:x.mp4"), ("file:x.mp4", "x.mp4")])  # FFmpeg's file protocol
def test_odd_names_are_written_as_named(tmp_path, given, name):
    result = _sample("-o", given, *SMALL, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(_decode(tmp_path / name)[1]) == 2 and [p.name for p in tmp_path.iterdir()] == [name]


@pytest.mark.parametrize("target, code, message", [
    ("fifo.mp4", 4, "FIFO"),
    ("/dev/null", 4, "character device"),
    ("missing/x.mp4", 4, "does not exist"),
    ("fifo.mp4/x.mp4", 4, "fifo.mp4 is a FIFO, not a directory"),  # was "directory fifo.mp4 does not exist"
    (".", 4, "is a directory"),
    ("a" * 300 + ".mp4", 4, "too long"),
    ("x.nosuchext", 2, "container"),
    ("udp://127.0.0.1:9/x.ts", 2, "URL"),
])
def test_unusable_targets_are_one_line_with_their_exit_code(tmp_path, target, code, message):
    os.mkfifo(tmp_path / "fifo.mp4")
    result = _sample("-o", target, *SMALL, cwd=tmp_path, timeout=30)  # a FIFO must not wait for a reader
    assert result.returncode == code and message in _one_error_line(result)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.mp4"]


def test_a_link_target_is_written_through_and_stays_a_link(tmp_path):
    real = tmp_path / "real.mp4"
    real.write_bytes(b"old")
    link = tmp_path / "link.mp4"
    link.symlink_to("real.mp4")
    result = _sample("-o", "link.mp4", "-y", *SMALL, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and len(_decode(real)[1]) == 2


@pytest.mark.parametrize("stdout", ["full", "closed"])
def test_sample_whose_stdout_cannot_take_its_line_exits_4_with_the_clip_complete(tmp_path, stdout):
    out = tmp_path / "clip.mp4"
    cmd = cli_command("sample", "-o", str(out), "--size", "64x48", "--frames", "2", "--no-audio")
    if stdout == "full":
        with open("/dev/full", "w") as full:
            proc = subprocess.run(cmd, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    else:
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=60,
                              preexec_fn=lambda: os.close(1))
    assert proc.returncode == 4 and proc.stderr.count("\n") == 1 and "is complete" in proc.stderr, proc.stderr
    with av.open(str(out)) as c:
        assert sum(1 for _ in c.decode(video=0)) == 2


@pytest.mark.parametrize("pix_fmt, words", [("rgb24", "libx265 does not take pixel format rgb24; it takes yuv420p"),
                                             ("nosuch", "unknown pixel format 'nosuch'")])
def test_a_pixel_format_the_encoder_does_not_list_is_named_before_any_write(tmp_path, pix_fmt, words):
    """It reached the encoder's open, which said "Invalid argument" alone (libvpx-vp9 and 10-bit)."""
    result = _sample("-o", tmp_path / "c.mkv", *SMALL, "--codec", "libx265", "--pix-fmt", pix_fmt, cwd=tmp_path)
    assert result.returncode == 2 and words in _one_error_line(result)
    assert os.listdir(tmp_path) == []


def test_a_pixel_format_ffmpeg_cannot_make_is_a_usage_error_and_keeps_the_file(tmp_path):
    out = tmp_path / "clip.mp4"
    out.write_bytes(b"theirs")
    proc = run_command(cli_command("sample", "-o", str(out), "-y", "--size", "64x48", "--frames", "2", "--no-audio",
                                   "--pix-fmt", "pal8"), timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "pal8" in proc.stderr, proc.stderr
    assert out.read_bytes() == b"theirs" and partials(tmp_path) == []


def test_a_name_stdouts_encoding_cannot_hold_is_escaped_and_the_commands_succeed(tmp_path):
    """Under PYTHONIOENCODING=ascii (or a C locale) the summary's é raised UnicodeEncodeError after the file
    was written: exit 1, "internal error"."""
    ascii_out = environment(PYTHONIOENCODING="ascii")
    made = run_command(cli_command("sample", "-o", "été.mp4", "--frames", "2", "--size", "64x48"), cwd=tmp_path,
                       env=ascii_out)
    assert made.returncode == 0 and made.stdout.startswith("\\xe9t\\xe9.mp4"), (made.stdout, made.stderr)
    ran = run_command(cli_command("run", "été.mp4", "-o", "ö.mp4", "--device", "cpu"), cwd=tmp_path, env=ascii_out)
    assert ran.returncode == 0 and "wrote \\xf6.mp4" in ran.stdout, ran.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["ö.mp4", "été.mp4"])


def test_host_memory_running_out_is_exit_5_in_one_line(tmp_path, monkeypatch, capsys):
    """A clip too large for the machine (12000x12000 under a 3 GB address-space limit) was an internal
    error, exit 1, as if a bug."""
    def out_of_memory(out, **kw):
        raise MemoryError("Unable to allocate 772. MiB for an array with shape (13500, 15000)")

    monkeypatch.setattr(sample_cli, "make_clip", out_of_memory)
    assert main(["sample", "-o", str(tmp_path / "c.nut"), "--frames", "2", "--size", "64x48"]) == 5
    err = capsys.readouterr().err
    assert err.startswith("pipeline: error: out of host memory: Unable to allocate 772. MiB") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_directory_moved_during_the_run_gets_the_clip_and_the_run_ends_well(tmp_path, monkeypatch, capsys):
    """The clip is placed in the directory held open; the summary's size was read by the old path: an
    internal error (FileNotFoundError, exit 1) after the clip was written."""
    from pipeline import sample_cli
    from pipeline.cli import main

    (tmp_path / "a").mkdir()
    real = sample_cli.make_clip

    def moving(out, *, checkpoint, **kw):
        calls = iter(range(1, 6))

        def checkpoint_then_move():  # called before each of the 4 frames, then before the clip is placed
            checkpoint()
            if next(calls) == 5:
                (tmp_path / "a").rename(tmp_path / "b")

        return real(out, checkpoint=checkpoint_then_move, **kw)

    monkeypatch.setattr(sample_cli, "make_clip", moving)
    assert main(["sample", "-o", str(tmp_path / "a" / "c.mkv"), "--frames", "4", "--size", "64x48"]) == 0
    out, err = capsys.readouterr()
    assert "its directory was moved during the run" in err and "c.mkv  4 frames" in out, (out, err)
    assert [p.name for p in (tmp_path / "b").iterdir()] == ["c.mkv"]


@pytest.mark.parametrize("name", ["f%03d.png", "g%d.jpg"])
def test_a_frame_number_pattern_is_refused_before_anything_is_written(tmp_path, name):
    """The image2 muxer expanded the pattern in the temporary name: exit 4 "cannot write", and the frames
    left hidden beside it."""
    result = _sample("-o", tmp_path / name, *SMALL, cwd=tmp_path)
    assert result.returncode == 2 and "frame-number pattern" in _one_error_line(result)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name, encoder, magic", [("one.png", "png", b"\x89PNG"), ("one.bmp", "bmp", b"BM"),
                                                  ("one.jpg", "mjpeg", b"\xff\xd8")])
def test_one_picture_is_in_the_format_its_name_says(tmp_path, name, encoder, magic):
    """The image2 muxer's own default is mjpeg: a .png was written as JPEG. ``pipeline run`` writes PNG."""
    result = _sample("-o", tmp_path / name, *SMALL, "--frames", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"encoding {encoder}, the {name[3:]} picture's" in result.stderr
    assert (tmp_path / name).read_bytes().startswith(magic)


def test_one_picture_of_several_frames_is_refused_before_anything_is_written(tmp_path):
    """The image2 muxer failed at the second frame with FFmpeg's own words about -update."""
    result = _sample("-o", tmp_path / "two.png", *SMALL, cwd=tmp_path)  # 2 frames
    assert result.returncode == 2 and "one picture holds one frame; add --frames 1" in _one_error_line(result)
    assert os.listdir(tmp_path) == []


def test_a_name_with_control_characters_is_escaped_in_the_summary_as_in_errors(tmp_path):
    """An ESC in the name drove the terminal and a line break split the summary: the errors escaped them."""
    name = "\x1b[31mred\nx.mp4"
    result = _sample("-o", name, "--frames", "2", "--size", "64x48", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and result.stdout.count("\n") == 1 and "\\x1b[31mred\\nx.mp4" in result.stdout
    assert (tmp_path / name).is_file()
    ran = run_pipeline(tmp_path / name, "-o", tmp_path / "o\x1b  two.mp4", quiet=False)
    assert ran.returncode == 0 and "\x1b" not in ran.stdout, ran.stderr
    assert f"wrote {tmp_path}/o\\x1b  two.mp4" in ran.stdout  # the name as it is, but for the ESC


@pytest.mark.parametrize("given, rate", [("30000/1001", "30000/1001"), ("ntsc", "30000/1001"), ("pal", "25"),
                                         ("film", "24"), ("29.97", "30000/1001")])
def test_fps_takes_ffmpegs_spellings(tmp_path, given, rate):
    import av

    result = _sample("-o", "x.mkv", "--frames", "2", "--size", "64x48", "--no-audio", "--fps", given, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    with av.open(str(tmp_path / "x.mkv")) as container:
        assert str(container.streams.video[0].guessed_rate) == rate


def test_a_slow_frame_rate_makes_its_audio_a_second_at_a_time_and_in_time_order(tmp_path, monkeypatch):
    """At --fps 1/1001 each frame's 1001 s of sound was made as one frame (2.3 GB for one 64x64 frame), and
    a stop waited for it; into FLV, audio written past a frame seconds long failed the clip at its end."""
    sizes, stops = [], []
    tone = sample._tone

    def counted(start, stop, seed):
        sizes.append(stop - start)
        return tone(start, stop, seed)

    monkeypatch.setattr(sample, "_tone", counted)
    path = sample.make_clip(tmp_path / "slow.flv", width=64, height=64, frames=3, fps=Fraction(1, 10),
                            checkpoint=lambda: stops.append(1))
    # once a frame, as at any rate, and once more for each further second of its sound
    assert max(sizes) == sample.AUDIO_RATE and sum(sizes) == 30 * sample.AUDIO_RATE and len(stops) >= 3 + 3 * 9
    with av.open(str(path)) as back:
        assert len(list(back.decode(video=0))) == 3
    result = run_pipeline(path, "-o", tmp_path / "out.flv", cwd=tmp_path)  # the run's muxer waits as long
    assert result.returncode == 0, result.stderr
    with av.open(str(tmp_path / "out.flv")) as back:
        assert len(list(back.decode(video=0))) == 3 and back.streams.audio


@pytest.mark.parametrize("name", ["-", "pipe:1"])
def test_a_sample_into_a_pipe_says_it_writes_files(tmp_path, name):
    """"cannot choose a container from the name": the name was taken for a file's."""
    proc = run_command(cli_command("sample", "-o", name, "--frames", "2"), cwd=tmp_path)
    assert proc.returncode == 2 and f"{name}: sample writes a file, not a pipe" in proc.stderr, proc.stderr
    assert proc.stdout == "" and list(tmp_path.iterdir()) == []
