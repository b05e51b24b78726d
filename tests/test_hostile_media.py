"""Hostile media and libraries: options nobody uses, libraries printing on stderr, damage that raises
nothing, frame sizes PyAV mishandles, every video encoder PyAV has, streams the output cannot keep, audio
the container cannot hold.
"""

from __future__ import annotations

import io
from pathlib import Path

import av
import numpy as np
import pytest
from utils import flip_payload_bytes, one_error, partials, read_json, run_pipeline, video_frames
from pipeline.sample import make_clip


# -- 10. options the encoder or the muxer would not use ---------------------------------------------------


@pytest.mark.parametrize("args, words", [
    (("--encoder-opt", "cfr=18"), ("libx264 encoder does not use cfr=18",)),
    (("-c", "mpeg4", "--encoder-opt", "crf=18"), ("mpeg4 encoder does not use crf=18",)),
    (("--output-opt", "movflag=+faststart"), ("mp4 muxer does not use movflag=+faststart",)),
    (("--input-opt", "probsize=32"), ("--input-opt probsize=32", "mov demuxer does not use it")),
    (("--input-opt", "threads=4"), ("--input-opt threads=4", "decoder options are not input options")),
    (("--encoder-opt", "x264-params=keyint=30:bfrmes=2"), ("libx264 encoder cannot parse", "'bfrmes = 2'")),
    (("--encoder-opt", "x264-params=keyint=abc"), ("libx264 encoder cannot parse", "'keyint = abc'")),
    (("-c", "libx265", "--encoder-opt", "x265-params=keyint=30:bfrmes=2"), ("Unknown option: bfrmes",)),
    (("--output-opt", "movflags=+nonsense"), ("--output-opt movflags=+nonsense: the mp4 muxer cannot take",)),
], ids=["x264-typo", "mpeg4-has-no-crf", "muxer-typo", "demuxer-typo", "decoder-option", "x264-params-key",
        "x264-params-value", "x265-params-key", "muxer-value"])
def test_options_nobody_uses_exit_2_naming_them(tmp_path, clip, args, words):
    out = tmp_path / "out.mp4"
    one_error(run_pipeline(clip, "-o", out, *args, cwd=tmp_path), 2, *words)
    assert not out.exists() and partials(tmp_path) == []


@pytest.mark.parametrize("suffix, option, words", [
    (".mp4", "moov_size=10", "reserved_moov_size is too small"),
    (".mkv", "reserve_index_space=1", "the space it reserves for the index is too small"),
])
def test_a_muxer_option_refused_only_at_the_end_is_a_usage_error(tmp_path, clip, suffix, option, words):
    """The muxer takes the value at the header and refuses it when it writes the index: exit 2, not a write
    failure (exit 4), and no output."""
    out = tmp_path / f"out{suffix}"
    line = one_error(run_pipeline(clip, "-o", out, "--output-opt", option, cwd=tmp_path), 2, f"--output-opt {option}")
    assert words in line and "output removed" in line
    assert not out.exists() and partials(tmp_path) == []


def test_a_params_key_the_encoder_cannot_parse_is_refused_again_in_the_same_process(tmp_path, tiny, capsys,
                                                                                   restore_signals):
    """FFmpeg's log skips a line that repeats the one before: the second run's warning must still count."""
    for name in ("a.mp4", "b.mp4"):
        code, lines = _run_in_process([tiny, "-o", tmp_path / name, "--encoder-opt", "x264-params=bfrmes=2"], capsys)
        assert code == 2 and len(lines) == 1 and "'bfrmes = 2'" in lines[0], lines
    assert list(tmp_path.iterdir()) == []


def test_options_that_are_used_pass(tmp_path, clip):
    out = tmp_path / "out.mp4"
    result = run_pipeline(clip, "-o", out, "--encoder-opt", "crf=30", "--encoder-opt", "g=12",
                          "--encoder-opt", "x264-params=bframes=2:keyint=24",
                          "--output-opt", "movflags=+faststart", "--output-opt", "fflags=+bitexact",
                          # the demuxer's generic and private options, the file protocol's, every protocol's
                          "--input-opt", "probesize=5000000", "--input-opt", "ignore_editlist=1",
                          "--input-opt", "blocksize=65536", "--input-opt", "rw_timeout=5000000", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = out.read_bytes()
    assert data.find(b"moov") < data.find(b"mdat")  # faststart was applied


def test_muxer_option_lookup():
    from pipeline.avlib import unused_muxer_options

    assert unused_muxer_options("matroska", ["cluster_size_limit", "fflags", "movflags"]) == ["movflags"]
    assert unused_muxer_options("mpegts", ["mpegts_flags", "pkt_size"]) == ["pkt_size"]


def test_demuxer_option_lookup():
    from pipeline.avlib import unused_demuxer_options

    assert unused_demuxer_options("mov,mp4,m4a,3gp,3g2,mj2", "file",
                                  ["probesize", "ignore_editlist", "follow", "rw_timeout", "zzz", "threads"]) == [
        "zzz", "threads"]
    assert unused_demuxer_options("rawvideo", "pipe", ["video_size", "pixel_format", "fd", "seekable"]) == ["seekable"]
    assert unused_demuxer_options("v4l2", None, ["input_format", "blocksize"]) == ["blocksize"]  # a device: no protocol
    assert unused_demuxer_options("no-such-demuxer", "file", ["x"]) is None  # cannot tell: nothing refused


def test_an_input_option_nobody_uses_on_a_pipe_exits_2(tmp_path, clip):
    mkv = tmp_path / "in.mkv"
    make_clip(mkv, width=64, height=48, frames=6, codec="ffv1", audio=False)
    result = run_pipeline("-", "-o", "null", "--input-opt", "probsize=32", input=mkv.read_bytes(), text=False,
                          cwd=tmp_path)
    err = result.stderr.decode().strip()
    assert result.returncode == 2 and len(err.splitlines()) == 1, err
    assert "--input-opt probsize=32" in err and "matroska demuxer does not use it" in err


# -- 19. libraries' own log lines -------------------------------------------------------------------------


def test_a_bad_preset_is_one_line_with_x264s_own_words(tmp_path, clip):
    result = run_pipeline(clip, "-o", tmp_path / "out.mkv", "--encoder-opt", "preset=bogus", cwd=tmp_path)
    one_error(result, 2, "invalid preset 'bogus'")


@pytest.mark.parametrize("codec", ["libx265", "libsvtav1"])
def test_encoder_banners_stay_off_stderr(tmp_path, clip, codec):
    import av

    if codec not in av.codecs_available:
        pytest.skip(f"{codec} is not in this PyAV build")
    out = tmp_path / "out.mkv"
    result = run_pipeline(clip, "-o", out, "-c", codec, "--frames", "3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    debug = run_pipeline(clip, "-o", out, "-y", "-c", codec, "--frames", "3", "--loglevel", "debug", cwd=tmp_path)
    assert debug.returncode == 0, debug.stderr
    lines = debug.stderr.splitlines()
    assert any(line.startswith("pipeline: ffmpeg: [") for line in lines)  # FFmpeg's own lines, when asked


def test_ffmpeg_lines_are_debug_lines_of_the_pipeline_logger():
    import logging

    import av

    from pipeline.avlib import route_ffmpeg_log
    from pipeline.log import log

    class Keep(logging.Handler):
        def __init__(self):
            super().__init__(logging.DEBUG)
            self.records = []

        def emit(self, record):
            self.records.append(record)

    keep, level = Keep(), log.level
    log.addHandler(keep)
    log.setLevel(logging.DEBUG)
    try:
        route_ffmpeg_log()
        av.logging.log(av.logging.WARNING, "demo", "a warning from FFmpeg")
    finally:
        log.removeHandler(keep)
        log.setLevel(level)
    # Only this line's record: FFmpeg may flush a line held back from an earlier test ("repeated N times").
    assert [(r.levelno, r.getMessage()) for r in keep.records if "[demo]" in r.getMessage()] == [
        (logging.DEBUG, "ffmpeg: [demo] a warning from FFmpeg")]


def test_captured_stderr_passes_other_writers_through(capfd):
    import os

    from pipeline.avlib import captured_stderr

    with captured_stderr() as lines:
        os.write(2, b"x265 [info]: HEVC encoder version 4.2\nsomebody else's line\n")
    assert lines == ["x265 [info]: HEVC encoder version 4.2", "somebody else's line"]
    assert capfd.readouterr().err == "somebody else's line\n"


# -- 17. damage that raises nothing: truncated MKV and MPEG-TS, concealed decoder errors ----------------------


@pytest.fixture(scope="module")
def containers(tmp_path_factory):
    from utils import remux

    d = tmp_path_factory.mktemp("containers")
    src = make_clip(d / "src.mp4", width=160, height=96, frames=30, audio=True)
    return {suffix: remux(src, d / f"clip{suffix}") for suffix in (".mkv", ".ts")}


@pytest.mark.parametrize("suffix, cut, words", [
    (".mkv", 0.6, "File ended prematurely"),
    (".ts", 0.6, "not a whole number of transport packets"),
])
def test_truncated_files_warn_in_every_container_and_fail_with_strict(tmp_path, containers, suffix, cut, words):
    data = containers[suffix].read_bytes()
    size = int(len(data) * cut)
    size -= 1 if suffix == ".ts" and size % 188 == 0 else 0  # cut inside a packet
    src = tmp_path / f"cut{suffix}"
    src.write_bytes(data[:size])
    out = tmp_path / "out.mkv"
    result = run_pipeline(src, "-o", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "warning" in result.stderr and "cut short" in result.stderr and words in result.stderr
    assert out.is_file()
    out.unlink()
    one_error(run_pipeline(src, "-o", out, "--strict", cwd=tmp_path), 3, "--strict")  # its cut frame, or the cut


def test_complete_files_get_no_warning(tmp_path, containers):
    for suffix, src in containers.items():
        result = run_pipeline(src, "-o", tmp_path / f"out{suffix}.mkv", cwd=tmp_path)
        assert result.returncode == 0 and result.stderr == "", (suffix, result.stderr)


def test_a_stream_that_appears_mid_file_is_left_out(tmp_path, containers):
    """A video PES start moved to a PID no table lists: the MPEG-TS demuxer adds a stream for it mid-file,
    which PyAV never lists (its flush at the end raised IndexError: an internal error)."""
    data = bytearray(containers[".ts"].read_bytes())
    video_pid = 0x100  # FFmpeg's first elementary stream
    starts = [i for i in range(0, len(data), 188)
              if data[i + 1] & 0x40 and ((data[i + 1] & 0x1F) << 8 | data[i + 2]) == video_pid]
    at = starts[-3]  # near the end: there the demuxer adds the stream (not while probing the start)
    data[at + 2] = 0xD8  # PID 0x1d8
    src = tmp_path / "new-pid.ts"
    src.write_bytes(bytes(data))
    out, stats = tmp_path / "out.mkv", tmp_path / "s.json"
    result = run_pipeline(src, "-o", out, "--stats-json", stats, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert 26 <= read_json(stats)["frames_out"] < 30 and len(video_frames(out)) == read_json(stats)["frames_out"]


def _one_byte_aac(ts: bytes) -> bytes:
    """``ts`` with one ADTS header's frame length damaged so that the demuxer's parser cuts a 1-byte AAC packet
    (which damaged header does depends on where the frames fall in the transport packets: tried in turn)."""
    audio_pid = 0x101
    starts = [i for i in range(0, len(ts), 188)
              if ts[i + 1] & 0x40 and ((ts[i + 1] & 0x1F) << 8 | ts[i + 2]) == audio_pid]
    for at in starts[1:]:
        data = bytearray(ts)
        adts = data.index(b"\xff\xf1", at, at + 188)
        data[adts + 5] = 0x4D  # the frame length's low bits, the buffer fullness's high bits
        with av.open(io.BytesIO(bytes(data))) as c:
            if any(p.size == 1 for p in c.demux(c.streams.audio[0])):
                return bytes(data)
    raise AssertionError("no damage found that cuts a 1-byte AAC packet")


@pytest.mark.parametrize("suffix", [".ts", ".mkv"])
def test_a_one_byte_aac_packet_is_dropped_not_a_failed_write(tmp_path, containers, suffix):
    """FFmpeg's MPEG-TS muxer refuses an AAC packet shorter than 2 bytes at a later write: exit 4, as if the
    disk had failed, before such a packet was dropped as damaged."""
    src = tmp_path / "short-aac.ts"
    src.write_bytes(_one_byte_aac(containers[".ts"].read_bytes()))
    out = tmp_path / f"out{suffix}"
    result = run_pipeline(src, "-o", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "1 damaged audio packets dropped" in result.stderr and len(video_frames(out)) == 30


@pytest.fixture(scope="module")
def concealed(tmp_path_factory):
    """A few flipped bytes in the H.264 payload: the decoder conceals them and logs, no packet fails."""
    d = tmp_path_factory.mktemp("concealed")
    clean = make_clip(d / "clean.mp4", width=320, height=180, frames=60, audio=False)
    return flip_payload_bytes(clean, d / "concealed.mp4", flips=5, seed=4)


def test_concealed_decoder_errors_are_reported_and_fatal_with_strict(tmp_path, concealed):
    out, stats = tmp_path / "out.mp4", tmp_path / "s.json"
    result = run_pipeline(concealed, "-o", out, "--stats-json", stats, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "warning" in result.stderr
    assert read_json(stats)["corrupt_frames"] > 0
    line = one_error(run_pipeline(concealed, "-o", tmp_path / "strict.mp4", "--strict", cwd=tmp_path), 3, "--strict")
    assert "decoder error" in line or "corrupt frame" in line


def test_a_muxer_of_the_demuxers_name_is_not_the_inputs_damage():
    import threading

    from pipeline.damage import DamageLog

    damage = DamageLog("in.ts", "mpegts", "h264")
    try:
        damage.packet(object())  # this thread reads the input
        damage._watch.add("mpegts", 40, "dts < pcr, TS is invalid", threading.get_ident() + 1)  # the TS output
        assert damage.ended_early() is None
        damage._watch.add("mpegts", 40, "Packet corrupt", threading.get_ident())
        assert damage.ended_early() == "the mpegts demuxer reported: Packet corrupt"
    finally:
        damage.close()


def test_strict_decodes_with_slice_threads(clip):
    from pipeline.source import Source

    for strict, expected in ((True, "SLICE"), (False, "AUTO")):
        source = Source(str(clip), strict=strict)
        try:
            assert source.video.thread_type.name == expected
        finally:
            source.close()


# -- 16. frames whose height is not a multiple of 4 ------------------------------------------------------------


@pytest.mark.parametrize("make, args, size", [
    (lambda d: make_clip(d / "2x2.mkv", width=2, height=2, frames=4, codec="ffv1", audio=False), (), (2, 2)),
    (lambda d: make_clip(d / "in.mp4", width=64, height=48, frames=4, audio=False), ("--filters", "crop=w=16:h=2"),
     (16, 2)),
], ids=["2x2-input", "crop-to-2-rows"])
def test_frames_two_rows_high_are_encoded(tmp_path, make, args, size):
    out = tmp_path / "out.mkv"
    result = run_pipeline(make(tmp_path), "-o", out, *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    frames = video_frames(out)
    assert len(frames) == 4 and {(f.width, f.height) for f in frames} == {size}


def test_a_height_of_4n_plus_2_is_not_rescaled(tmp_path):
    import numpy as np

    src = make_clip(tmp_path / "in.mkv", width=64, height=54, frames=2, codec="ffv1", audio=False)
    out = tmp_path / "out.mkv"
    result = run_pipeline(src, "-o", out, "--filters", "", "-c", "ffv1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for a, b in zip(video_frames(src), video_frames(out)):
        ya, yb = (f.to_ndarray()[:54].astype(np.int16) for f in (a, b))  # the Y plane
        diff = np.abs(ya - yb)
        assert diff.mean() < 0.5 and diff.max() <= 4  # colour round trip only; 52 rows stretched to 54: 10, 128


# -- 15. every video encoder PyAV has either works or says why ------------------------------------------------


def _video_encoders() -> list[str]:
    import av

    names = []
    for name in sorted(av.codecs_available):
        try:
            if av.Codec(name, "w").type == "video":
                names.append(name)
        except Exception:  # a decoder only
            continue
    return names


def _encoder_params():
    from pipeline.encoders import is_hardware

    return [pytest.param(n, marks=pytest.mark.skip(reason="hardware encoder: needs its device and driver; "
                                                          "see test_hardware_encoders_exit_2_when_unavailable"))
            if is_hardware(n) else n for n in _video_encoders()]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return make_clip(tmp_path_factory.mktemp("tiny") / "tiny.mp4", width=64, height=48, frames=5, audio=False)


def _run_in_process(args, capsys) -> tuple[int, list[str]]:
    from pipeline import cli

    code = cli.main(["run", *map(str, args), "--device", "cpu", "-q"])
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("encoder", _encoder_params())
def test_every_video_encoder_works_or_exits_2_saying_why(tmp_path, tiny, encoder, capsys, restore_signals):
    """In-process (the whole list in a few seconds; every one was also run as its own process once)."""
    import av

    from pipeline.muxers import containers_for

    fits = containers_for(av.Codec(encoder, "w").name, (".mkv", ".nut", ".mov", ".avi"))
    out = tmp_path / f"out{fits[0] if fits else '.mkv'}"
    code, lines = _run_in_process([tiny, "-o", out, "-c", encoder], capsys)
    assert code in (0, 2), lines
    if code == 2:
        assert len(lines) == 1 and lines[0].startswith("pipeline: error: "), lines
        assert encoder in lines[0] or av.Codec(encoder, "w").name in lines[0], lines
        assert not out.exists()
    else:
        assert lines == []
        assert len(video_frames(out)) == 5
    assert partials(tmp_path) == []


@pytest.mark.parametrize("encoder", [n for n in _video_encoders() if n.endswith(("_nvenc", "_vaapi", "_qsv",
                                     "_v4l2m2m", "_amf", "_videotoolbox", "_mediacodec", "_vulkan"))])
def test_hardware_encoders_exit_2_when_unavailable(tmp_path, tiny, encoder, capsys, restore_signals):
    from pipeline.muxers import containers_for

    suffix = (containers_for(encoder, (".mkv", ".nut", ".mov", ".avi")) or [".mkv"])[0]
    code, lines = _run_in_process([tiny, "-o", tmp_path / f"out{suffix}", "-c", encoder], capsys)
    assert code in (0, 2), lines
    if code == 2:
        assert len(lines) == 1 and encoder in lines[0] and "not available here" in lines[0], lines


def test_mpeg2_gets_a_frame_rate_it_takes_and_keeps_the_timing(tmp_path, tiny):
    out = tmp_path / "out.mkv"
    result = run_pipeline(tiny, "-o", out, "-c", "mpeg2video", cwd=tmp_path)  # the input's time base is 1/15360
    assert result.returncode == 0, result.stderr
    frames = video_frames(out)
    assert len(frames) == 5
    times = [float(f.pts * f.time_base) for f in frames]
    assert times == pytest.approx([i / 30 for i in range(5)], abs=2e-3)


@pytest.mark.parametrize("encoder, pix_fmt", [("mjpeg", "yuvj420p"), ("prores_ks", "yuv422p10le"),
                                              ("png", "rgb24"), ("huffyuv", "yuv422p"), ("gif", None)])
def test_encoders_without_yuv420p_get_a_format_they_take(tmp_path, tiny, encoder, pix_fmt):
    import av

    from pipeline.muxers import containers_for

    out = tmp_path / f"out{containers_for(av.Codec(encoder, 'w').name, ('.mkv', '.nut', '.mov'))[0]}"
    result = run_pipeline(tiny, "-o", out, "-c", encoder, "--filters", "", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    with av.open(str(out)) as c:
        if pix_fmt:
            assert c.streams.video[0].codec_context.pix_fmt == pix_fmt
    a, b = (f.to_ndarray(format="rgb24").astype(int) for f in (video_frames(tiny)[0], video_frames(out)[0]))
    assert abs(a.mean() - b.mean()) < 4  # the picture, converted, not a green or dark one


def test_an_audio_codec_as_the_video_codec_exits_2(tmp_path, tiny):
    one_error(run_pipeline(tiny, "-o", tmp_path / "out.mp4", "-c", "aac", cwd=tmp_path), 2, "aac is an audio encoder")


# -- 18. what the output does not keep is said; AVI states the right rate --------------------------------------


@pytest.fixture(scope="module")
def two_streams_interlaced(tmp_path_factory) -> Path:
    """Two video streams, the first interlaced (x264 with interlaced=1: frames flagged top field first)."""
    import av
    import numpy as np

    path = tmp_path_factory.mktemp("fields") / "two.mkv"
    with av.open(str(path), "w") as c:
        first = c.add_stream("libx264", rate=25, options={"x264-params": "interlaced=1:tff=1"})
        second = c.add_stream("mpeg4", rate=25)
        for s, (w, h) in ((first, (64, 48)), (second, (32, 32))):
            s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        for i in range(5):
            for s in (first, second):
                frame = av.VideoFrame.from_ndarray(np.full((s.height, s.width, 3), 40 * i, np.uint8), format="rgb24")
                frame.pts = i
                c.mux(s.encode(frame))
        for s in (first, second):
            c.mux(s.encode(None))
    return path


def test_extra_video_streams_and_interlacing_are_said(tmp_path, two_streams_interlaced):
    result = run_pipeline(two_streams_interlaced, "-o", tmp_path / "out.mkv", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "2 video streams; processing #0 (h264 64x48); not in the output: #1 mpeg4 32x32" in result.stderr
    assert "interlaced video (top field first); processed and written as progressive" in result.stderr
    assert len(video_frames(tmp_path / "out.mkv")) == 5


def test_avi_states_the_input_frame_rate(tmp_path, clip):
    import av

    out = tmp_path / "out.avi"
    result = run_pipeline(clip, "-o", out, cwd=tmp_path)  # clip: 30 fps in a 1/15360 time base
    assert result.returncode == 0, result.stderr
    with av.open(str(out)) as c:
        assert c.streams.video[0].average_rate == 30
    assert len(video_frames(out)) == 6


# -- 14. audio the container cannot hold; --audio copy|encode|none ----------------------------------------------


def _audio(path: Path) -> tuple[list[str], float]:
    """The output's audio codecs and the first audio stream's duration in seconds (by its packets)."""
    import av

    with av.open(str(path)) as c:
        codecs = [s.codec_context.name for s in c.streams.audio]
        if not codecs:
            return codecs, 0.0
        packets = [p for p in c.demux(audio=0) if p.pts is not None]
        end = max(float((p.pts + p.duration) * p.time_base) for p in packets)
        return codecs, end - min(float(p.pts * p.time_base) for p in packets)


def test_aac_into_webm_is_encoded_as_opus_with_a_notice(tmp_path, clip):
    out = tmp_path / "out.webm"
    result = run_pipeline(clip, "-o", out, "-c", "libvpx", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"pipeline: {out}: audio stream #1 (aac) cannot go into webm; encoded as libopus"]
    codecs, seconds = _audio(out)
    assert codecs == ["opus"] and seconds == pytest.approx(_audio(clip)[1], abs=0.05)


@pytest.mark.parametrize("codec", ["flac", "libopus"])
def test_audio_mov_refuses_only_at_its_header_is_encoded_as_aac(tmp_path, clip, codec):
    """MOV's muxer takes FLAC and Opus when the stream is added, then refuses them "only in MP4": exit 2."""
    src, out = tmp_path / "in.mkv", tmp_path / "out.mov"
    with av.open(str(clip)) as i, av.open(str(src), "w") as o:
        video = o.add_stream_from_template(i.streams.video[0])
        audio = o.add_stream(codec, rate=48000)
        audio.layout, audio.format = "stereo", "s16"
        for packet in i.demux(i.streams.video[0]):
            if packet.dts is not None:
                packet.stream = video
                o.mux(packet)
        for n in range(20):
            frame = av.AudioFrame.from_ndarray(np.zeros((1, 2 * 960), np.int16), format="s16", layout="stereo")
            frame.sample_rate, frame.pts = 48000, n * 960
            o.mux(audio.encode(frame))
        o.mux(audio.encode(None))
    result = run_pipeline(src, "-o", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    name = codec.removeprefix("lib")
    assert f"audio stream #1 ({name}) cannot go into mov; encoded as aac" in result.stderr
    assert _audio(out)[0] == ["aac"]


def test_a_muxer_without_audio_takes_the_video_alone_as_ffmpeg_does(tmp_path, clip):
    out = tmp_path / "out.gif"
    result = run_pipeline(clip, "-o", out, "-c", "gif", "--frames", "3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines() == [f"pipeline: {out}: gif carries no audio; the input's audio is left out"]
    assert _audio(out)[0] == []
    one_error(run_pipeline(clip, "-o", tmp_path / "x.gif", "-c", "gif", "--audio", "encode", cwd=tmp_path), 2,
              "gif carries no audio; --audio none (-an) leaves it out")


@pytest.mark.parametrize("args, suffix, expected", [
    (("--audio", "none"), ".mp4", []),
    (("-an",), ".webm", []),
    (("--audio", "encode"), ".mp4", ["aac"]),
    (("--audio", "encode"), ".mkv", ["aac"]),  # Matroska keeps the input's codec
    (("--audio", "copy"), ".ts", ["aac"]),
], ids=["none", "an", "encode-mp4", "encode-mkv", "copy-ts"])
def test_audio_modes(tmp_path, clip, args, suffix, expected):
    out = tmp_path / f"out{suffix}"
    video = ("-c", "libvpx") if suffix == ".webm" else ()
    result = run_pipeline(clip, "-o", out, *video, *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    codecs, seconds = _audio(out)
    assert codecs == expected
    if expected:
        assert seconds == pytest.approx(_audio(clip)[1], abs=0.05)


def test_audio_mode_from_toml_and_a_bad_one(tmp_path, clip):
    (config := tmp_path / "c.toml").write_text('audio = "none"\n')
    out = tmp_path / "out.mp4"
    assert run_pipeline(clip, "-o", out, "--config", config, cwd=tmp_path).returncode == 0
    assert _audio(out)[0] == []
    one_error(run_pipeline(clip, "-o", tmp_path / "x.mp4", "--audio", "mute", cwd=tmp_path), 2, "--audio")
