"""The reliability contract (issue 5): exit codes, one-line errors, no output on failure, nothing lost.

Bad inputs and paths run the CLI as a subprocess, so a crash shows as a failing return code; failures
that cannot be provoked from outside (device out of memory, disk full, a bug in a stage) run the CLI
in-process with one function monkeypatched. Signals are in test_signals.py, fuzzing in test_fuzz.py.
"""

from __future__ import annotations

import errno
import os
import random
import re
import shutil
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from utils import (
    ROOT,
    all_devices,
    assert_failed,
    count_audio_packets,
    flip_payload_bytes,
    frame_times,
    partials,
    pipeline_threads,
    read_json,
    remux,
    run_cli,
    run_pipeline,
    run_python,
    video_frames,
    video_times,
)

from pipeline import build, cli
from pipeline.errors import GPUError, InputError
from pipeline.sample import make_clip
from pipeline.video import MAX_SIDE, check_frame_size

W, H, N = 320, 180, 30


# -- helpers --------------------------------------------------------------------------------------


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("pipeline: error")]


def decodable_frames(path: Path) -> int:
    """What PyAV alone gets out of a damaged file, skipping the packets it rejects."""
    count = 0
    with av.open(str(path)) as c:
        for packet in c.demux(video=0):
            try:
                count += len(packet.decode())
            except av.error.FFmpegError:
                pass
    return count


def write_frames(path: Path, frames, *, codec="libx264", rate=25, time_base=None, container_format=None,
                 pix_fmt="yuv420p", rotation=None):
    """Write (pts, rgb) pairs as one video stream; ``time_base`` for explicit (VFR) timestamps."""
    with av.open(str(path), "w", format=container_format) as c:
        first = frames[0][1]
        s = c.add_stream(codec, rate=rate)
        s.width, s.height, s.pix_fmt = first.shape[1], first.shape[0], pix_fmt
        tb = time_base or Fraction(1, rate)
        s.codec_context.time_base = tb
        if time_base:
            s.time_base = time_base
        if rotation is not None:
            s.set_display_rotation(*rotation)
        for pts, rgb in frames:
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts, frame.time_base = pts, tb
            c.mux(s.encode(frame))
        c.mux(s.encode(None))
    return path


def flat(value: int, w: int = 160, h: int = 96) -> np.ndarray:
    rgb = np.full((h, w, 3), value, np.uint8)
    rgb[: h // 2, : w // 2] = 255 - value  # some structure, so a mix-up of planes would show
    return rgb


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("clips")
    return {
        "av": make_clip(d / "av.mp4", width=W, height=H, frames=N, audio=True),
        "video": make_clip(d / "video.mp4", width=W, height=H, frames=60, audio=False),
    }


# -- 1. inputs that are not video: exit 3, nothing written ------------------------------------------


def _zero(d: Path) -> Path:
    (p := d / "zero.mp4").write_bytes(b"")
    return p


def _text(d: Path) -> Path:
    (p := d / "text.mp4").write_text("this is not a video\n" * 20)
    return p


def _png(d: Path) -> Path:
    png = d / "image.png"
    cv2.imwrite(str(png), flat(90))
    return png.rename(d / "image.mp4")


def _audio_only(d: Path) -> Path:
    p = d / "audio.mp4"
    with av.open(str(p), "w") as c:
        s = c.add_stream("aac", rate=48000)
        s.layout = "stereo"
        for i in range(10):
            frame = av.AudioFrame.from_ndarray(np.zeros((2, 1024), np.float32), format="fltp", layout="stereo")
            frame.sample_rate, frame.pts = 48000, i * 1024
            c.mux(s.encode(frame))
        c.mux(s.encode(None))
    return p


def _unknown_codec(d: Path) -> Path:
    raw = make_clip(d / "raw.mkv", width=64, height=48, frames=3, codec="rawvideo", audio=False)
    data = raw.read_bytes()
    assert b"V_UNCOMPRESSED" in data
    (p := d / "unknown.mkv").write_bytes(data.replace(b"V_UNCOMPRESSED", b"V_ZZZZZZZZZZZZ"))
    return p


def _garbage_payload(d: Path) -> Path:
    """A well-formed mp4 whose H.264 packets are random bytes."""
    data = bytearray(make_clip(d / "clean.mp4", width=160, height=96, frames=10, audio=False).read_bytes())
    start, end = data.find(b"mdat") + 4, data.find(b"moov") - 4
    data[start:end] = random.Random(0).randbytes(end - start)
    (p := d / "garbage.mp4").write_bytes(bytes(data))
    return p


def _missing(d: Path) -> Path:
    return d / "missing.mp4"


def _directory(d: Path) -> Path:
    (p := d / "folder.mp4").mkdir()
    return p


@pytest.mark.parametrize("build", [_zero, _text, _png, _audio_only, _unknown_codec, _garbage_payload, _missing,
                                   _directory], ids=lambda f: f.__name__.strip("_"))
def test_not_a_video_exits_3_without_output(tmp_path, build):
    src = build(tmp_path)
    out = tmp_path / "out" / "result.mp4"
    out.parent.mkdir()
    result = run_pipeline(src, "-o", out, cwd=tmp_path)
    assert_failed(result, 3, out, name=src.name)


@pytest.mark.parametrize("target, message", [("loop", "Too many levels of symbolic links"),
                                             ("nothing", "no such file (a symbolic link to nothing)")])
def test_a_link_loop_or_a_dangling_link_as_input_says_which(tmp_path, target, message):
    src = tmp_path / "in.mp4"
    src.symlink_to(tmp_path / target)
    if target == "loop":
        (tmp_path / "loop").symlink_to(src)
    out = tmp_path / "out.mp4"
    result = run_pipeline(src, "-o", out, cwd=tmp_path)
    assert_failed(result, 3, out, name=src.name)
    assert message in result.stderr


def test_an_input_whose_every_packet_is_refused_says_what_the_decoder_said(tmp_path, clips):
    """Every packet a slice of random bytes behind a valid header: the line counts them and gives the
    decoder's own reason (the one that tells a system out of threads or memory from a damaged input)."""
    import struct

    src = tmp_path / "refused.mp4"
    rng = random.Random(1)
    with av.open(str(clips["video"])) as inp, av.open(str(src), "w") as out:
        video = inp.streams.video[0]
        stream = out.add_stream_from_template(video)
        for packet in list(inp.demux(video))[:12]:
            if not packet.size:
                continue
            body = b"\x65" + rng.randbytes(400)  # an IDR slice's NAL header, then noise
            refused = av.Packet(struct.pack(">I", len(body)) + body)
            refused.stream, refused.pts, refused.dts = stream, packet.pts, packet.dts
            refused.time_base, refused.is_keyframe = packet.time_base, packet.is_keyframe
            out.mux(refused)
    out_path = tmp_path / "out.mp4"
    result = run_pipeline(src, "-o", out_path, cwd=tmp_path)
    assert_failed(result, 3, out_path, name=src.name)
    # How many refusals depends on the decoder's threads (one per core): a batch of packets is refused at once.
    assert re.search(r"no decodable video frames \(decoding failed (once|\d+ times); the last: Invalid data found",
                     result.stderr)


def test_a_decoder_without_threads_is_the_systems_limit_not_a_bad_input(tmp_path, clips, monkeypatch, capsys,
                                                                          restore_signals):
    """FFmpeg's frame threads that cannot start make it refuse every packet with EAGAIN (seen as uid 65534
    under ``prlimit --nproc=4``): exit 1 naming the limit, not exit 3 blaming the file."""
    import errno

    from pipeline.decode import DecodeLoop

    def refused(self, packet):
        self._rejected(packet.pts, av.error.BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN)))
        return []

    monkeypatch.setattr(DecodeLoop, "_decode_packet", refused)
    out = tmp_path / "out.mp4"
    code = cli.main(["run", str(clips["video"]), "-o", str(out), "--device", "cpu", "-q"])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "could not start its threads" in err and "ulimit -u" in err and "video.mp4" in err
    assert not out.exists() and partials(tmp_path) == []


def test_an_encoder_without_threads_is_the_systems_limit_not_a_refusal(tmp_path, clips, monkeypatch, capsys,
                                                                       restore_signals):
    """x264 that cannot start its threads fails with "Generic error in an external library" and says no more
    (seen as uid 65534 under ``prlimit --nproc=10``): exit 1 naming the limit, not exit 2 blaming the settings."""
    from pipeline.sink import Sink

    def no_threads(self):
        raise av.error.ExternalError(542398533, "Generic error in an external library", 'avcodec_open2("libx264", {})')

    monkeypatch.setattr(Sink, "_open_encoders", no_threads)
    out = tmp_path / "out.mp4"
    code = cli.main(["run", str(clips["video"]), "-o", str(out), "--device", "cpu", "-q"])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "libx264 encoder could not start its threads (Generic error in an external library)" in err
    assert "ulimit -u" in err and not out.exists() and partials(tmp_path) == []


def _surround_clip(path: Path) -> Path:
    """H.264 video with 5.1 AAC audio (libmp3lame, the .avi muxer's audio encoder, takes mono and stereo)."""
    with av.open(str(path), "w") as out:
        video = out.add_stream("libx264", rate=30)
        video.width, video.height, video.pix_fmt = 64, 48, "yuv420p"
        audio = out.add_stream("aac", rate=48000)
        audio.layout = "5.1"
        rng = np.random.default_rng(5)
        for i in range(10):
            frame = av.VideoFrame.from_ndarray(rng.integers(0, 256, (48, 64, 3), np.uint8), format="rgb24")
            frame.pts = i
            out.mux(video.encode(frame))
        for start in range(0, 16000, 1024):
            samples = (rng.random((6, 1024), np.float32) - 0.5) * 0.2
            frame = av.AudioFrame.from_ndarray(samples, format="fltp", layout="5.1")
            frame.sample_rate, frame.pts = 48000, start
            out.mux(audio.encode(frame))
        out.mux(video.encode(None))
        out.mux(audio.encode(None))
    return path


def test_an_audio_encoders_refusal_names_that_encoder_not_the_videos_threads(tmp_path, monkeypatch, capsys,
                                                                             restore_signals):
    from pipeline import sink

    def never(*args):
        raise AssertionError("another stream's encoder refused: the video encoder's threads are not in question")

    monkeypatch.setattr(sink, "opens_on_one_thread", never)
    out = tmp_path / "out.avi"
    code = cli.main(["run", str(_surround_clip(tmp_path / "surround.mp4")), "-o", str(out), "--device", "cpu",
                     "--audio", "encode", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "the libmp3lame encoder refused 5.1 audio at 48000 Hz" in err and "stereo" in err
    assert not out.exists() and partials(tmp_path) == []


def test_an_encoder_that_opens_on_one_thread_is_told_from_one_refusing_the_settings():
    from pipeline.encoders import opens_on_one_thread

    assert opens_on_one_thread("libx264", 640, 360, "yuv420p", Fraction(1, 30), {"preset": "ultrafast"})
    assert not opens_on_one_thread("libx264", 641, 361, "yuv420p", Fraction(1, 30), {})  # 4:2:0 needs even sizes
    assert not opens_on_one_thread("mpeg2video", 640, 360, "yuv420p", Fraction(1, 90000), {})  # no such rate


# -- 2. truncated files ---------------------------------------------------------------------------


def test_mp4_truncated_before_moov_exits_3(tmp_path, clips):
    data = clips["av"].read_bytes()
    assert data.find(b"moov") > len(data) // 2  # not faststart: the index is at the end
    (src := tmp_path / "cut.mp4").write_bytes(data[: len(data) // 2])
    out = tmp_path / "out.mp4"
    assert_failed(run_pipeline(src, "-o", out, cwd=tmp_path), 3, out, name="cut.mp4")


def test_faststart_mp4_truncated_in_media_keeps_every_decodable_frame(tmp_path, clips):
    fast = remux(clips["av"], tmp_path / "fast.mp4", {"movflags": "faststart"})
    data = fast.read_bytes()
    assert data.find(b"moov") < data.find(b"mdat")
    (src := tmp_path / "cut.mp4").write_bytes(data[: len(data) // 2])
    out = tmp_path / "out.mp4"
    result = run_pipeline(src, "-o", out, "--stats-json", tmp_path / "s.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "warning" in result.stderr and "ends early" in result.stderr
    expected = decodable_frames(src)
    assert 0 < expected < N
    assert len(video_frames(out)) == expected
    assert read_json(tmp_path / "s.json")["frames_out"] == expected


@pytest.mark.parametrize("which", [-1, -2, -3])
def test_a_file_cut_inside_one_of_its_last_video_packets_keeps_every_decodable_frame(tmp_path, clips, which):
    """Cut in the middle of a video packet near the end: the frame threads' decoder must not lose the frames
    its other threads hold when that packet's error comes out at the end (decoded without frame threads,
    the packet is refused and every other frame comes out)."""
    fast = remux(clips["video"], tmp_path / "fast.mp4", {"movflags": "faststart"})
    with av.open(str(fast)) as c:
        spans = sorted((p.pos, p.size) for p in c.demux(video=0) if p.size and p.pos is not None)
    pos, size = spans[which]
    (src := tmp_path / "cut.mp4").write_bytes(fast.read_bytes()[: pos + size // 2])
    out = tmp_path / "out.mp4"
    result = run_pipeline(src, "-o", out, "--stats-json", tmp_path / "s.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    expected = decodable_frames(src)
    assert 40 < expected < 60
    assert len(video_frames(out)) == read_json(tmp_path / "s.json")["frames_out"] == expected


# -- 3. corrupt packets -----------------------------------------------------------------------------


@pytest.fixture
def corrupt_clip(tmp_path, clips):
    return flip_payload_bytes(clips["video"], tmp_path / "corrupt.mp4", flips=200, seed=1)


def test_corrupt_packets_are_skipped_counted_and_reported(tmp_path, corrupt_clip):
    out = tmp_path / "out.mp4"
    result = run_pipeline(corrupt_clip, "-o", out, "--stats-json", tmp_path / "s.json", quiet=False, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    stats = read_json(tmp_path / "s.json")
    assert stats["decode_errors"] + stats["corrupt_frames"] > 0
    assert stats["frames_in"] == stats["frames_out"] == len(video_frames(out))
    assert stats["frames_in"] + stats["decode_errors"] <= 60
    assert "damaged input" in result.stdout  # the summary's row
    assert "warning" in result.stderr and not error_lines(result.stderr)


def test_strict_makes_the_first_decode_error_fatal(tmp_path, corrupt_clip):
    out = tmp_path / "out.mp4"
    result = run_pipeline(corrupt_clip, "-o", out, "--strict", cwd=tmp_path)
    assert_failed(result, 3, out, name="corrupt.mp4")
    assert "--strict" in result.stderr


class _ReadErrorAfter:
    """An input container whose demuxer fails after ``after`` packets, as on a bad sector."""

    def __init__(self, container, after: int):
        self._container, self._after = container, after

    def demux(self, *streams):
        for i, packet in enumerate(self._container.demux(*streams)):
            if i == self._after:
                raise av.error.InvalidDataError(1094995529, "Invalid data found when processing input")
            yield packet

    def __getattr__(self, name):
        return getattr(self._container, name)


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_read_error_mid_file_ends_the_input(tmp_path, clips, monkeypatch, capsys, restore_signals, strict):
    from pipeline import source

    real_open = source.open_file
    monkeypatch.setattr(source, "open_file", lambda path: _ReadErrorAfter(real_open(path), after=40))
    out = tmp_path / "out.mp4"
    code = cli.main(["run", str(clips["video"]), "-o", str(out), "--device", "cpu", "-q"]
                    + ["--strict"] * strict)
    err = capsys.readouterr().err
    assert "read error" in err and "Traceback" not in err
    if strict:
        assert code == 3 and not out.exists()
    else:
        assert code == 0 and "warning" in err
        assert len(video_frames(out)) == 40  # the decoder's queue drained: every frame read is kept
    assert partials(tmp_path) == []


# -- 4. resolution change ---------------------------------------------------------------------------


def test_resolution_change_mid_stream_is_scaled_to_the_first_size(tmp_path):
    # Two MPEG-TS segments of different sizes, concatenated as bytes (as a broadcast capture would be).
    a = write_frames(tmp_path / "a.ts", [(i, flat(40 + 10 * i, 320, 180)) for i in range(10)])
    b = write_frames(tmp_path / "b.ts", [(10 + i, flat(40 + 10 * i, 256, 144)) for i in range(10)])
    (src := tmp_path / "joined.ts").write_bytes(a.read_bytes() + b.read_bytes())
    assert {(f.width, f.height) for f in video_frames(src)} == {(320, 180), (256, 144)}
    out = tmp_path / "out.mp4"
    result = run_pipeline(src, "-o", out, "--filters", "", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    frames = video_frames(out)
    assert len(frames) == 20
    assert {(f.width, f.height) for f in frames} == {(320, 180)}
    times = frame_times(frames)
    assert all(t0 < t1 for t0, t1 in zip(times, times[1:]))


# -- 5. pixel formats and odd sizes -------------------------------------------------------------------


@pytest.mark.parametrize("w, h, codec, pix_fmt", [
    (639, 359, "ffv1", "yuv444p"),
    (320, 180, "ffv1", "yuv422p10le"),  # to 10-bit 4:2:0 (10-bit 4:2:0 itself is kept: test_hdr.py)
    (320, 180, "rawvideo", "nv12"),
    (321, 181, "ffv1", "gray"),
])
def test_other_formats_are_converted_with_a_notice(tmp_path, w, h, codec, pix_fmt):
    src = make_clip(tmp_path / "in.mkv", width=w, height=h, frames=4, codec=codec, pix_fmt=pix_fmt, audio=False)
    out = tmp_path / "out.mp4"
    result = run_pipeline(src, "-o", out, "--filters", "", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"converting {pix_fmt}" in result.stderr
    frames = video_frames(out)
    assert len(frames) == 4
    assert (frames[0].width, frames[0].height) == (w - w % 2, h - h % 2)
    for a, b in zip(video_frames(src), frames):  # the picture, not just its size, survived
        ya = a.reformat(format="gray").to_ndarray()[: b.height, : b.width].astype(np.float32)
        yb = b.reformat(format="gray").to_ndarray().astype(np.float32)
        assert abs(ya.mean() - yb.mean()) < 3
        assert np.abs(ya - yb).mean() < 6


# -- 6. variable frame rate ---------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".mkv", ".mp4"])
def test_variable_frame_rate_keeps_every_timestamp(tmp_path, suffix):
    pts = [0, 33, 50, 120, 121, 300, 333, 340, 500, 1000, 1016, 1100]
    src = write_frames(tmp_path / "vfr.mkv", [(p, flat(10 + 20 * i)) for i, p in enumerate(pts)],
                       rate=30, time_base=Fraction(1, 1000))
    out = tmp_path / f"out{suffix}"
    result = run_pipeline(src, "-o", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert video_times(out) == [Fraction(p, 1000) for p in pts]


@pytest.mark.parametrize("suffix", [".mkv", ".mp4"])
def test_the_last_frame_of_variable_rate_video_lasts_as_long_as_in_the_input(tmp_path, suffix):
    """A screen recording: three quick frames, then one 30 s later. Each frame's duration reaches its packet;
    without, the last frame lasted one period of the average rate (4 frames in 30 s: 7.5 s too long)."""
    src = write_frames(tmp_path / "still.mp4", [(p, flat(40 + 50 * i)) for i, p in enumerate((0, 33, 67, 30000))],
                       codec="mpeg4", rate=30, time_base=Fraction(1, 1000))  # MP4's rate: the average, 4 in 30 s
    out = tmp_path / f"out{suffix}"
    result = run_pipeline(src, "-o", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert abs(_video_end(out) - _video_end(src)) < Fraction(1, 20), (_video_end(src), _video_end(out))


def _video_end(path) -> Fraction:
    """Where the last frame ends: its packet's time plus duration (FFmpeg's reading of an MP4's duration sums
    the decoding-time steps, which x264's B-frames leave short of a 30 s gap; the file's own header is right)."""
    with av.open(str(path)) as c:
        v = c.streams.video[0]
        return max((p.pts + p.duration) * v.time_base for p in c.demux(v) if p.pts is not None)


# -- 7. rotation ----------------------------------------------------------------------------------


@pytest.mark.parametrize("rotation", [(90,), (-90, True)], ids=["90", "270-hflip"])
def test_rotation_is_kept_not_applied(tmp_path, rotation):
    src = write_frames(tmp_path / "rot.mp4", [(i, flat(50 + 10 * i, 160, 96)) for i in range(4)], rotation=rotation)
    out = tmp_path / "out.mp4"
    result = run_pipeline(src, "-o", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    matrix = av.sidedata.sidedata.Type.DISPLAYMATRIX
    a, b = video_frames(src)[0], video_frames(out)[0]
    assert (b.width, b.height) == (a.width, a.height) == (160, 96)  # pixels as stored
    assert b.rotation == a.rotation == rotation[0]
    assert bytes(b.side_data.get(matrix)) == bytes(a.side_data.get(matrix))  # flips included


# -- 8. huge frames -----------------------------------------------------------------------------------


def test_frame_size_limit():
    check_frame_size("x.mp4", 7680, 4320)
    with pytest.raises(InputError, match=f"up to {MAX_SIDE}x{MAX_SIDE}"):
        check_frame_size("x.mp4", MAX_SIDE + 2, 64)


def test_frames_too_big_for_memory_are_refused_with_the_bytes_needed(tmp_path, clips, monkeypatch, capsys,
                                                                      restore_signals):
    monkeypatch.setattr(build, "available_memory", lambda: 2**20)
    out = tmp_path / "out.mp4"
    code = cli.main(["run", str(clips["av"]), "-o", str(out), "--device", "cpu", "-q"])
    err = capsys.readouterr().err
    assert code == 5, err
    assert "out of memory" in err and "bytes" in err and "available" in err
    assert not out.exists() and partials(tmp_path) == []


@pytest.mark.skipif((build.available_memory() or 0) < 4 * 2**30, reason="needs 4 GiB of free memory")
def test_8k_frames_are_processed(tmp_path):
    """Two 8K frames through the CPU backend (about 6 s on 2 cores: no filters, one frame in flight)."""
    w, h = 7680, 4320
    luma = np.tile((np.arange(w) % 200 + 20).astype(np.uint8), (h, 1))
    i420 = np.concatenate([luma, np.full((h // 2, w), 128, np.uint8)])
    src = tmp_path / "8k.mkv"
    with av.open(str(src), "w") as c:
        s = c.add_stream("libx264", rate=25, options={"preset": "ultrafast"})
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        for i in range(2):
            frame = av.VideoFrame.from_numpy_buffer(i420, format="yuv420p")
            frame.pts = i
            c.mux(s.encode(frame))
        c.mux(s.encode(None))
    out = tmp_path / "out.mkv"
    result = run_pipeline(src, "-o", out, "--filters", "", "--in-flight", "1", "--ring-size", "2", cwd=tmp_path,
                          timeout=300)
    assert result.returncode == 0, result.stderr
    frames = video_frames(out)
    assert [(f.width, f.height) for f in frames] == [(w, h)] * 2


# -- 9. no GPU ----------------------------------------------------------------------------------------


def _gpu_available() -> bool:
    from pipeline.gpu.cuda import gpu_status

    return gpu_status()[0]


@pytest.mark.skipif(_gpu_available(), reason="there is a GPU here")
def test_device_cuda_without_gpu_exits_5_before_output(tmp_path, clips):
    out = tmp_path / "out.mp4"
    result = run_pipeline(clips["av"], "-o", out, device="cuda", cwd=tmp_path)
    assert_failed(result, 5, out)
    assert "--device cuda" in result.stderr


def test_device_auto_falls_back_to_the_cpu(tmp_path, clips):
    out = tmp_path / "out.mp4"
    result = run_pipeline(clips["av"], "-o", out, device="auto", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    if not _gpu_available():
        assert "running on the CPU" in result.stderr
    assert len(video_frames(out)) == N


# -- 10. device out of memory mid-run --------------------------------------------------------------------


def test_device_oom_mid_run_keeps_a_playable_partial_output(tmp_path, clips, monkeypatch, capsys,
                                                            restore_signals):
    from pipeline.memory.device_pool import DevicePool

    real_alloc = DevicePool.alloc_frame
    calls = {"n": 0}

    def alloc_frame(self, specs):
        calls["n"] += 1
        if calls["n"] > 12:
            raise GPUError(f"out of device memory: arena of {self.arena.capacity} bytes cannot fit "
                           f"{sum(s.nbytes for s in specs)} more")
        return real_alloc(self, specs)

    monkeypatch.setattr(DevicePool, "alloc_frame", alloc_frame)
    out = tmp_path / "out.mp4"
    code = cli.main(["run", str(clips["av"]), "-o", str(out), "--device", "cpu", "-q"])
    err = capsys.readouterr().err
    assert code == 5, err
    assert "out of device memory" in err and "bytes" in err and "holds the" in err
    done = int(err.split("holds the ")[1].split()[0])
    assert 0 < done <= 12
    assert len(video_frames(out)) == done  # playable, with the frames done
    assert partials(tmp_path) == []
    assert pipeline_threads() == []


# Frame 3's work never completes: its done event never says done and waits forever (seen with NVDEC).
STUCK_AT_FRAME_3 = """
import sys, threading
from pipeline import engine
from pipeline.processor import Processor

class Never:
    done = False
    def synchronize(self):
        threading.Event().wait()

engine.GPU_STALL_S = 0.5
real_submit = Processor.submit

def submit(self, item, **kwargs):
    real_submit(self, item, **kwargs)
    if item.meta.index == 3:
        if hasattr(item.ctx, "events"):  # CUDA: done is the frame's last event
            item.ctx.events["done"] = Never()
        else:
            item.ctx.done = Never()

Processor.submit = submit
"""


def test_a_frame_stuck_on_the_gpu_stops_the_run_with_exit_5_and_keeps_the_frames_done(tmp_path, clips):
    """A CUDA call that never returns (seen with NVDEC): the watchdog ends the run instead of hanging."""
    out = tmp_path / "out.mp4"
    code = STUCK_AT_FRAME_3 + f"""
from pipeline import cli
sys.exit(cli.main(["run", {str(clips["av"])!r}, "-o", {str(out)!r}, "--device", "cpu", "-q"]))
"""
    result = run_python("-c", code, cwd=tmp_path, timeout=60)
    assert result.returncode == 5, result.stderr
    assert result.stderr.count("\n") == 1 and "made no progress for 0.5 s (frame 3" in result.stderr
    assert "holds the 3 frames done" in result.stderr
    assert len(video_frames(out)) == 3  # playable, with the frames done
    assert partials(tmp_path) == []


@pytest.mark.parametrize("device", all_devices())
def test_a_frame_stuck_on_the_gpu_ends_frames_with_gpu_stalled_instead_of_hanging(tmp_path, clips, device):
    """frames(): the caller's own thread waits for each frame, with no other thread to watch it; the wait is
    polled, and a frame whose work never completes raises GPUStalled there, with the frames before it
    taken and nothing waited on after it."""
    code = STUCK_AT_FRAME_3 + f"""
from pipeline import frames
from pipeline.errors import GPUStalled
taken = []
try:
    for frame in frames({str(clips["av"])!r}, device={device!r}, filters="invert"):
        taken.append(int(frame.array.sum()))
except GPUStalled as e:
    print(len(taken), "|", e)
    sys.exit(0)
sys.exit(1)
"""
    result = run_python("-c", code, cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    taken, message = result.stdout.strip().split(" | ")
    assert taken == "3" and message.endswith("made no progress for 0.5 s (frame 3's work never completed); stopped"), result.stdout


def test_the_stall_watchdog_counts_only_time_it_saw(monkeypatch):
    """Polled every 0.1 s, a wait of more than GPU_STALL_S is a stall; a gap between polls (the process was
    stopped) starts the count over, and so does another frame."""
    import threading
    from types import SimpleNamespace

    from pipeline import engine
    from pipeline.errors import GPUStalled

    monkeypatch.setattr(GPUStalled, "happened", False)
    clock = {"now": 100.0}
    monkeypatch.setattr(engine.time, "monotonic", lambda: clock["now"])
    run = SimpleNamespace(processor=SimpleNamespace(waiting=None), _watch=(None, 0.0, 0.0), abort=threading.Event(),
                          _stalled=None)

    def poll(seconds: float, every: float = 0.1) -> None:
        for _ in range(round(seconds / every)):
            clock["now"] += every
            engine.Pipeline._watch_gpu(run)

    poll(100)  # nothing awaited
    run.processor.waiting = 7
    poll(engine.GPU_STALL_S - 1)
    clock["now"] += 30  # stopped (Ctrl-Z) for 30 s while frame 7 was awaited
    poll(engine.GPU_STALL_S - 1)
    run.processor.waiting = 8  # frame 7 completed, frame 8 awaited
    poll(engine.GPU_STALL_S - 1)
    assert not run.abort.is_set() and not GPUStalled.happened
    with pytest.raises(GPUStalled, match="frame 8"):
        poll(2)
    assert run.abort.is_set() and GPUStalled.happened and run._stalled is not None


# -- 13. output directory ----------------------------------------------------------------------------


def test_missing_output_directory_exits_4_before_decoding(tmp_path):
    src = _text(tmp_path)  # undecodable: exit 4 rather than 3 shows the output was checked first
    out = tmp_path / "nowhere" / "out.mp4"
    assert_failed(run_pipeline(src, "-o", out, cwd=tmp_path), 4, out, name="nowhere")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories anyway")
def test_unwritable_output_directory_exits_4(tmp_path, clips):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        out = locked / "out.mp4"
        assert_failed(run_pipeline(clips["av"], "-o", out, cwd=tmp_path), 4, out, name="not writable")
    finally:
        locked.chmod(0o700)


def test_unwritable_output_directory_exits_4_even_as_root(tmp_path, clips, monkeypatch, capsys, restore_signals):
    # Root ignores permission bits, so the directory is made to look read-only to the check itself.
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == locked else real_access(p, mode))
    out = locked / "out.mp4"
    code = cli.main(["run", str(clips["av"]), "-o", str(out), "--device", "cpu", "-q"])
    err = capsys.readouterr().err
    assert code == 4 and "not writable" in err and len(err.strip().splitlines()) == 1
    assert list(locked.iterdir()) == []


@pytest.mark.parametrize("case", ["-o", "--stats-json", "-progress", "sequence", "sample", "batch -o",
                                  "batch --json", "--plugin"])
def test_a_path_past_the_systems_limit_is_one_line_not_an_internal_error(tmp_path, clips, capsys, case,
                                                                         restore_signals):
    """pathlib's exists()/is_dir() raise for such a path (ENAMETOOLONG; EACCES for a directory on the way that
    cannot be entered, which root never meets): each path option says so and exits with its own code."""
    far = str(tmp_path / ("d/" * 2100 + "x"))  # more than PATH_MAX (4096) bytes, each name short
    clip = str(clips["av"])
    argv, code = {"-o": (["run", clip, "-o", far + ".mp4"], 4),
                  "--stats-json": (["run", clip, "-o", "null", "--stats-json", far + ".json"], 4),
                  "-progress": (["run", clip, "-o", "null", "-progress", far + ".txt"], 4),
                  "sequence": (["run", clip, "-o", far + "%03d.png"], 4),
                  "sample": (["sample", "-o", far + ".mp4"], 4),
                  "batch -o": (["batch", clip, "-o", far], 4),
                  "batch --json": (["batch", clip, "-o", str(tmp_path / "out"), "--json", far + ".json"], 4),
                  "--plugin": (["run", clip, "-o", "null", "--plugin", far + ".py"], 2)}[case]
    assert cli.main([*argv, "--device", "cpu"] if argv[0] != "sample" else argv) == code
    err = capsys.readouterr().err
    assert "File name too long" in err and "internal error" not in err, err
    assert len([line for line in err.splitlines() if "error" in line]) == 1, err


# -- 14. output is the input --------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["same", "symlink", "hardlink"])
def test_output_that_is_the_input_exits_2_and_leaves_it_intact(tmp_path, clips, how):
    src = shutil.copy(clips["av"], tmp_path / "in.mp4")
    before = Path(src).read_bytes()
    out = {"same": lambda: Path(src), "symlink": lambda: tmp_path / "link.mp4",
           "hardlink": lambda: tmp_path / "hard.mp4"}[how]()
    if how == "symlink":
        out.symlink_to(src)
    elif how == "hardlink":
        os.link(src, out)
    result = run_pipeline(src, "-o", out, "-y", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "output is the input" in result.stderr and "Traceback" not in result.stderr
    assert Path(src).read_bytes() == before
    assert partials(tmp_path) == []


# -- 15. write errors -------------------------------------------------------------------------------------


class _FullDisk:
    """A container whose writes fail with ENOSPC after ``after`` successful ones."""

    def __init__(self, container, after: int):
        self._container, self._left = container, after

    def mux(self, packets):
        self._left -= 1
        if self._left < 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self._container.mux(packets)

    def __getattr__(self, name):
        return getattr(self._container, name)


def test_disk_full_while_muxing_exits_4_and_removes_the_partial_file(tmp_path, clips, monkeypatch, capsys,
                                                                      restore_signals):
    from pipeline.sink import Sink

    real_init = Sink.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.container = _FullDisk(self.container, after=8)

    monkeypatch.setattr(Sink, "__init__", init)
    out = tmp_path / "out.mp4"
    code = cli.main(["run", str(clips["av"]), "-o", str(out), "--device", "cpu", "-q"])
    err = capsys.readouterr().err
    assert code == 4, err
    assert "No space left on device" in err and "out.mp4" in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and partials(tmp_path) == []
    assert pipeline_threads() == []


# -- 16. existing output --------------------------------------------------------------------------------


def test_existing_output_is_kept_without_overwrite_and_replaced_with_it(tmp_path, clips):
    out = tmp_path / "out.mp4"
    out.write_bytes(b"precious")
    result = run_pipeline(clips["av"], "-o", out, cwd=tmp_path)
    assert result.returncode == 2 and "already exists" in result.stderr
    assert out.read_bytes() == b"precious"
    result = run_pipeline(clips["av"], "-o", out, "-y", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(video_frames(out)) == N


def test_stale_partial_files_of_dead_runs_are_removed(tmp_path):
    from pipeline.outfile import remove_stale_partials

    dead = run_python("-c", "import os; print(os.getpid())")
    names = [f".out.partial-{dead.stdout.strip()}.mp4",  # killed run: removed
             f".out.partial-{os.getpid()}.mp4",  # ours (a reused pid): the sink truncates it
             ".out.partial-1.mp4",  # a live process, maybe writing right now
             ".other.partial-999999999.mp4",  # another target
             ".out.partial-99999999999999999999.mp4",  # no process's number (os.kill raised OverflowError)
             ".out.partial-2147483648.mp4", ".out.partial-\u0663.mp4", ".out.partial-\u00b2.mp4"]  # nor these
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    assert remove_stale_partials(tmp_path / "out.mp4") == 1  # the live process's
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[1:])


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux's /proc")
def test_a_partial_of_an_exited_process_not_yet_reaped_is_stale(tmp_path):
    """A batch hears that a worker died before the worker's parent reaps it: a zombie runs nothing."""
    from pipeline.outfile import process_alive, remove_stale_partials

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child did not exit"
            time.sleep(0.01)
        assert not process_alive(child.pid)
        (tmp_path / f".out.partial-{child.pid}.mp4").write_bytes(b"x")
        assert remove_stale_partials(tmp_path / "out.mp4") == 0
        assert list(tmp_path.iterdir()) == []
    finally:
        child.wait()
    assert process_alive(os.getpid())


def test_timestamps_stay_increasing_whatever_the_input_does():
    from pipeline.decode import _Clock

    clock = _Clock(step=10, max_gap=1000)
    # in order; a jump back (concatenation) keeps the spacing; a gap past max_gap (wrap, damage) is
    # closed the same way; a missing timestamp takes one step.
    got = [clock(p) for p in (0, 10, 25, 5, 15, 100_000, 100_010, None, 100_030)]
    assert got == [0, 10, 25, 35, 45, 55, 65, 75, 85]


# -- nothing lost, threads always end ------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".mp4", ".mkv", ".ts"])
def test_good_input_loses_nothing(tmp_path, clips, suffix):
    # Other containers have other time bases (1/1000, 1/90000) than the output's: nothing may be lost.
    src = clips["av"] if suffix == ".mp4" else remux(clips["av"], tmp_path / f"in{suffix}")
    out = tmp_path / "out.mp4"
    result = run_pipeline(src, "-o", out, "--stats-json", tmp_path / "s.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    stats = read_json(tmp_path / "s.json")
    assert stats["frames_in"] == stats["frames_out"] == N
    assert stats["decode_errors"] == stats["corrupt_frames"] == stats["retimed_frames"] == 0
    times, given = video_times(out), video_times(src)
    with av.open(str(src)) as c:  # the output starts at 0 where the input starts (MPEG-TS: 1.4 s), as ffmpeg's
        start = Fraction(c.start_time, 1_000_000)
    assert [t - g for t, g in zip(times, given)] == [times[0] - given[0]] * N  # every interval kept
    assert abs(times[0] - (given[0] - start)) <= Fraction(1, 90000)
    assert all(t0 < t1 for t0, t1 in zip(times, times[1:]))
    assert stats["audio_packets"] == count_audio_packets(src) == count_audio_packets(out) > 0


def _boom(*args, **kwargs):
    raise RuntimeError("boom")


@pytest.mark.parametrize("stage, target", [
    ("decode", "pipeline.source.Source.copy_into"),
    ("submit", "pipeline.processor.Processor.submit"),
    ("encode", "pipeline.sink.Sink.write_video"),
])
def test_a_failing_stage_stops_the_others_and_is_reported_once(tmp_path, clips, monkeypatch, capsys,
                                                               restore_signals, stage, target):
    monkeypatch.setattr(target, _boom)
    out = tmp_path / "out.mp4"
    code = cli.main(["run", str(clips["av"]), "-o", str(out), "--device", "cpu", "-q"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("boom") == 1 and len(err.strip().splitlines()) == 1
    assert "internal error while processing" in err and "av.mp4" in err and "Traceback" not in err
    assert not out.exists() and partials(tmp_path) == []
    assert pipeline_threads() == []


def _no_thread_for(name: str, monkeypatch, after=lambda: None) -> None:
    """Thread ``name`` cannot be started, as where the process limit (ulimit -u) or memory ran out; its
    start fails once ``after()`` returns."""
    import threading

    real_start = threading.Thread.start

    def start(self):
        if self.name == name:
            after()
            raise RuntimeError("can't start new thread")
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)


@pytest.mark.parametrize("thread, options", [
    ("decode", []), ("submit", []), ("encode", []),
    ("read", ["--realtime"]),  # a paced or live source's reader
])
def test_a_stage_without_a_thread_fails_the_run_in_one_line_and_the_others_end(tmp_path, clips, monkeypatch,
                                                                               capsys, restore_signals, thread,
                                                                               options):
    _no_thread_for(f"pipeline-{thread}", monkeypatch)
    out = tmp_path / "out.mp4"
    code = cli.main(["run", str(clips["av"]), "-o", str(out), "--device", "cpu", "-q", *options])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "cannot start a thread (can't start new thread)" in err and "ulimit -u" in err
    assert not out.exists() and partials(tmp_path) == []
    assert pipeline_threads() == []


def test_frames_without_a_thread_raise_the_same_error_and_leave_no_thread(clips, monkeypatch):
    import pipeline
    from pipeline.errors import PipelineError

    _no_thread_for("pipeline-submit", monkeypatch)
    with pytest.raises(PipelineError, match="cannot start a thread"):
        for _ in pipeline.frames(clips["video"], device="cpu"):
            pass
    assert pipeline_threads() == []


def test_a_thread_started_twice_is_still_a_bug_not_a_system_limit():
    from pipeline.channels import Worker, start_all

    worker = Worker(lambda: None, name="pipeline-twice")
    start_all([worker])
    worker.join()
    with pytest.raises(RuntimeError, match="once"):
        start_all([worker])


def _first_stream_held(control):
    """``after`` for :func:`_no_thread_for` and a stage for the streams: the first stream has done a frame
    before the start fails, and none gets past its third frame until the run is stopped."""

    def first_stream_has_frames_done():
        deadline = time.monotonic() + 30
        while not any(p.stats.frames_out for ref in list(control.pipelines) if (p := ref()) is not None):
            assert time.monotonic() < deadline, "the first stream did no frame"
            time.sleep(0.01)

    def stage(frame) -> None:
        if frame.index >= 2:
            control.stop_event.wait(30)

    return first_stream_has_frames_done, stage


def test_streams_side_by_side_without_a_thread_stop_those_started(clips, tmp_path, monkeypatch):
    from pipeline.config import RunConfig
    from pipeline.control import RunControl
    from pipeline.errors import PipelineError
    from pipeline.many import configs_for, run_many

    control = RunControl()
    after, stage = _first_stream_held(control)
    _no_thread_for("pipeline-stream-1", monkeypatch, after=after)
    configs = configs_for(RunConfig(device="cpu", quiet=True), [str(clips["video"])] * 3, str(tmp_path))
    with pytest.raises(PipelineError, match="cannot start a thread"):
        run_many(configs, control=control, stage=stage)
    assert pipeline_threads() == []
    assert list(tmp_path.iterdir()) == []  # the first stream, with frames done, kept no output


def test_streams_side_by_side_without_a_thread_on_the_command_line_are_one_line(clips, tmp_path, monkeypatch,
                                                                               capsys, restore_signals):
    _no_thread_for("pipeline-stream-1", monkeypatch)
    out = tmp_path / "out"
    out.mkdir()
    inputs = []
    for i in range(3):
        (link := tmp_path / f"in{i}.mp4").symlink_to(clips["video"])
        inputs.append(str(link))
    code = cli.main(["run", *inputs, "-o", f"{out}/", "--device", "cpu", "-q"])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "cannot start a thread" in err and "interrupted" not in err
    assert list(out.iterdir()) == [] and pipeline_threads() == []


@pytest.mark.slow
def test_short_soak_grows_nothing(tmp_path):
    """scripts/soak.py: a long run and many open/close cycles, no growth in memory, fds or threads."""
    soak = ROOT / "scripts" / "soak.py"
    result = run_python(soak, "--frames", "600", "--cycles", "60", "--device", "cpu", cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "nothing grew" in result.stdout


def test_the_soak_lets_pinned_bytes_grow_only_with_the_slots_a_ring_added(monkeypatch):
    """A GPU run's pinned rings fill as frames need them: more pinned bytes with more slots added is not a
    leak; more pinned bytes with none added is."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("soak", ROOT / "scripts" / "soak.py")
    soak = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "soak", soak)  # its dataclass looks its module up
    spec.loader.exec_module(soak)
    base = soak.Sample("a", rss=0, pinned=4 << 20, pool=0, fds=9, threads=3, gpu=0, slots_added=3)
    filled = soak.Sample("b", rss=0, pinned=5 << 20, pool=0, fds=9, threads=3, gpu=0, slots_added=4)
    leaked = soak.Sample("c", rss=0, pinned=5 << 20, pool=0, fds=9, threads=3, gpu=0, slots_added=3)
    assert soak.growth([base, filled], warmup=0) == []
    assert [p.split(" grew")[0] for p in soak.growth([base, leaked], warmup=0)] == ["pinned"]


def test_unwritable_stats_json_is_refused_before_the_run(tmp_path):
    """--stats-json is written after the run: a path that cannot be written is exit 4 before any output."""
    out = tmp_path / "out.mp4"
    proc = run_cli("run", str(ROOT / "samples" / "sample.mp4"), "-o", str(out), "--device", "cpu", "-q",
                   "--stats-json", str(tmp_path / "missing" / "s.json"))
    assert proc.returncode == 4
    assert "--stats-json" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


# -- decoders, null output, hardware encoders ----------------------------------------------------------


def test_null_output_processes_every_frame_and_writes_nothing(tmp_path, clips):
    stats = tmp_path / "s.json"
    result = run_pipeline(clips["av"], "-o", "null", "--stats-json", stats, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = read_json(stats)
    assert data["frames_out"] == N and data["output"] == "null"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]
    for name in ("null", "NULL"):  # FFmpeg's names in any case: NULL was exit 4 at the rename
        result = run_pipeline(clips["av"], "-o", tmp_path / "x.mp4", "--format", name, cwd=tmp_path)
        assert result.returncode == 0 and not (tmp_path / "x.mp4").exists(), result.stderr


def test_a_gpu_that_does_not_exist_exits_5_naming_the_ones_that_do(tmp_path, clips):
    out = tmp_path / "out.mp4"
    result = run_pipeline(clips["av"], "-o", out, device="cuda:99", cwd=tmp_path)
    assert_failed(result, 5, out, "cuda:99")
    if _gpu_available():
        assert "there is no GPU 99" in result.stderr and "cuda:0" in result.stderr


def test_nvdec_needs_the_gpu(tmp_path, clips):
    out = tmp_path / "out.mp4"
    result = run_pipeline(clips["av"], "-o", out, "--decode", "nvdec", cwd=tmp_path)  # run_pipeline adds --device cpu
    assert_failed(result, 2, out)
    assert "--decode nvdec" in result.stderr
    if not _gpu_available():
        result = run_pipeline(clips["av"], "-o", out, "--decode", "nvdec", device=None, cwd=tmp_path)
        assert_failed(result, 5, out)


def test_an_encoder_this_machine_lacks_is_refused_before_the_run(tmp_path, clips):
    out = tmp_path / "out.mp4"
    result = run_pipeline(clips["av"], "-o", out, "-c", "h264_nvenc", cwd=tmp_path)
    if result.returncode == 0:
        pytest.skip("this machine has NVENC")
    assert_failed(result, 2, out, "h264_nvenc")
    assert "libx264" in result.stderr


def test_the_command_run_in_a_process_that_goes_on_gives_the_logger_back(tmp_path, capsys):
    """Its console writes to the stderr of that moment: a message after it returned (another run's, in a
    library or a test) must not go to a stream that may be gone by then."""
    import logging

    from pipeline import cli
    from pipeline.log import LineHandler

    logger = logging.getLogger("pipeline")
    before = (logger.level, logger.propagate)
    logger.setLevel(logging.ERROR)  # the program's own choice, kept
    try:
        assert cli.main(["run", str(tmp_path / "missing.mp4"), "-o", "null", "--device", "cpu", "-q"]) == 3
        assert not any(isinstance(h, LineHandler) for h in logger.handlers)
        assert logger.propagate and logger.level == logging.ERROR
    finally:
        logger.setLevel(before[0])


def test_the_command_leaves_malloc_as_an_application_has_it(tmp_path, monkeypatch):
    """A fixed mmap threshold makes every frame-sized host buffer allocated after a free a fresh mapping: a cost
    only the naive strategy's per-frame buffers pay, so a command that compares strategies must not set it."""
    from pipeline import cli, startup

    class Libc:
        def mallopt(self, *args) -> int:
            raise AssertionError("the command set a malloc parameter")

        def malloc_trim(self, pad: int) -> int:  # giving free memory back after a run is fine
            return 0

    monkeypatch.setattr(startup, "libc", lambda: Libc())
    clip = tmp_path / "in.mp4"
    make_clip(clip, width=96, height=64, frames=3, audio=False)
    for alloc in ("pool", "naive"):
        assert cli.main(["run", str(clip), "-o", "null", "--device", "cpu", "--alloc", alloc, "-q"]) == 0
