"""The input's metadata on the output, as ffmpeg keeps it: the file's title, each stream's language, so that
two audio tracks can still be told apart; what is left out (subtitles, attachments, data) is said."""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np
import pytest
from utils import mux_noise, partials, run_pipeline, video_frames


def _tagged(path, *, title="My Film", subtitles=False):
    with av.open(str(path), "w") as c:
        c.metadata["title"] = title
        v = c.add_stream("ffv1", rate=25)
        v.width, v.height, v.pix_fmt = 64, 48, "yuv420p"
        v.metadata.update({"language": "ger", "title": "Main", "encoder": "an old encoder",
                           "NUMBER_OF_FRAMES-eng": "5000", "BPS": "123456", "_STATISTICS_TAGS": "BPS"})
        tracks = []
        for lang in ("eng", "fra"):
            a = c.add_stream("aac", rate=48000)
            a.layout = "mono"
            a.metadata["language"] = lang
            tracks.append(a)
        if subtitles:
            c.add_stream("ass")
            c.add_attachment("font.ttf", "application/x-truetype-font", b"\0" * 100)
        for a in tracks:
            for i in range(10):
                f = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
                f.sample_rate, f.pts = 48000, i * 1024
                c.mux(a.encode(f))
            c.mux(a.encode(None))
        mux_noise(c, v, 5)
    return path


def _tags(path):
    with av.open(str(path)) as c:
        return dict(c.metadata), [(s.type, dict(s.metadata)) for s in c.streams]


@pytest.mark.parametrize("suffix", [".mkv", ".mp4"])
def test_the_files_and_streams_tags_are_kept(tmp_path, suffix):
    src, out = _tagged(tmp_path / "in.mkv"), tmp_path / f"out{suffix}"
    result = run_pipeline(src, "-o", out, "-vf", "invert", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    file_tags, streams = _tags(out)
    assert file_tags["title"] == "My Film"
    assert [(kind, tags.get("language")) for kind, tags in streams] == [("video", "ger"), ("audio", "eng"),
                                                                        ("audio", "fra")]
    if suffix == ".mkv":  # MP4 has no stream titles (nor has ffmpeg's output there)
        assert streams[0][1]["title"] == "Main"
    assert all("an old encoder" not in tags.values() for _, tags in streams)  # the encoder is this run's
    assert not {"NUMBER_OF_FRAMES-eng", "BPS", "_STATISTICS_TAGS"} & set(streams[0][1])  # the input's statistics


@pytest.mark.parametrize("name, size, kept", [("out.ts", 300, False), ("out.ts", 254, True),
                                              ("out.mov", 70_000, False), ("out.mkv", 70_000, False)])
def test_a_tag_the_muxer_cannot_hold_is_left_out_and_said(tmp_path, name, size, kept):
    """A title over 255 bytes failed every MPEG-TS output (exit 2); one over 64 KiB wrapped MOV's length."""
    src, out = _tagged(tmp_path / "in.mkv", title="t" * size), tmp_path / name
    result = run_pipeline(src, "-o", out, cwd=tmp_path, quiet=False)
    assert result.returncode == 0, result.stderr
    assert ("'title' tag is left out" in result.stderr) is not kept
    if name != "out.ts":  # MPEG-TS reads its title back as its program's service name
        assert "title" not in _tags(out)[0]
        assert [tags.get("language") for _, tags in _tags(out)[1]] == ["ger", "eng", "fra"]  # the others kept


def test_subtitles_and_attachments_left_out_are_said(tmp_path):
    src, out = _tagged(tmp_path / "in.mkv", subtitles=True), tmp_path / "out.mkv"
    result = run_pipeline(src, "-o", out, cwd=tmp_path, quiet=False)
    assert result.returncode == 0, result.stderr
    assert "not in the output: 1 subtitle stream, 1 attachment" in result.stderr
    assert [kind for kind, _ in _tags(out)[1]] == ["video", "audio", "audio"]


def test_a_title_not_in_utf8_is_kept_with_its_bytes_replaced(tmp_path):
    """PyAV failed the open on such a tag (exit 3, "cannot open: 'utf-8' codec can't decode"); ffmpeg takes it."""
    good = _tagged(tmp_path / "good.mkv", title="QQQQQQQQ")
    src = tmp_path / "latin1.mkv"
    src.write_bytes(good.read_bytes().replace(b"QQQQQQQQ", b"Caf\xe9 QQQ"))
    out = tmp_path / "out.mkv"
    result = run_pipeline(src, "-o", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert _tags(out)[0]["title"] in ("Caf\udce9 QQQ", "Caf\ufffd QQQ")  # its bytes (PyAV 19), or U+FFFD (18)
    assert partials(tmp_path) == []


def test_a_data_stream_left_out_is_said_with_what_it_carries(tmp_path):
    """A drone's KLV (or a camera's timecode) track was dropped without a word."""
    src = tmp_path / "in.ts"
    with av.open(str(src), "w") as container:
        video = container.add_stream("libx264", rate=25)
        video.width, video.height, video.pix_fmt = 64, 48, "yuv420p"
        data = container.add_data_stream(codec_name="klv")
        data.time_base = Fraction(1, 90000)
        for i in range(5):
            packet = av.Packet(b"\x06\x0e\x2b\x34" * 4)
            packet.stream, packet.pts, packet.dts, packet.time_base = data, i * 3600, i * 3600, data.time_base
            container.mux(packet)
        mux_noise(container, video, 5)
    result = run_pipeline(src, "-o", tmp_path / "out.mp4", cwd=tmp_path, quiet=False)
    assert result.returncode == 0, result.stderr
    assert "not in the output: 1 data stream (klv); the output holds video and audio only" in result.stderr
    assert len(video_frames(tmp_path / "out.mp4")) == 5


def test_a_timecode_track_the_video_carries_as_a_tag_is_kept_and_not_said_lost(tmp_path):
    """MOV's timecode track: its timecode is also the video's tag, which is kept, and MOV writes the track
    again from it; the notice said it was not in the output."""
    src, out = tmp_path / "in.mov", tmp_path / "out.mov"
    with av.open(str(src), "w") as container:
        video = container.add_stream("libx264", rate=25)
        video.width, video.height, video.pix_fmt = 64, 48, "yuv420p"
        video.metadata["timecode"] = "01:00:00:00"
        mux_noise(container, video, 5)
    with av.open(str(src)) as container:
        assert [s.type for s in container.streams] == ["video", "data"]  # the muxer wrote the track
    result = run_pipeline(src, "-o", out, cwd=tmp_path, quiet=False)
    assert result.returncode == 0, result.stderr
    assert "not in the output" not in result.stderr
    with av.open(str(out)) as container:
        assert [(s.type, s.metadata.get("timecode")) for s in container.streams] == [
            ("video", "01:00:00:00"), ("data", "01:00:00:00")]
