"""-ss / -t / -to: frame-accurate spans of the input, timestamps as ffmpeg's -ss before -i writes them,
and the audio cut to the same span (to the packet)."""

from __future__ import annotations

import os
import subprocess
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from utils import count_audio_packets, pipeline_command, read_json, run_command, run_pipeline, video_times

from pipeline.span import KEEP, SKIP, STOP, Span, zero_shift
from pipeline.sample import make_clip

FPS, FRAMES, GOP = 30, 60, 10
AAC_PACKET = Fraction(1024, 48000)


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    # A keyframe every 10 frames: most starts fall between keyframes, so decoding must begin earlier.
    return make_clip(tmp_path_factory.mktemp("span") / "in.mp4", width=128, height=72, frames=FRAMES, fps=FPS,
                     options={"g": str(GOP)})


@pytest.fixture(scope="module")
def source_frames(clip) -> list[np.ndarray]:
    with av.open(str(clip)) as c:
        return [f.to_ndarray().astype(np.float32) for f in c.decode(video=0)]


def which_frames(path: Path, source: list[np.ndarray]) -> list[int]:
    """The input frame each output frame is (the nearest: frames differ by motion and their counter)."""
    with av.open(str(path)) as c:
        out = [f.to_ndarray().astype(np.float32) for f in c.decode(video=0)]
    return [int(np.argmin([np.mean((o - s) ** 2) for s in source])) for o in out]


def times(path: Path, kind: str = "video") -> list[Fraction]:
    """The timestamps, in seconds, of the video frames or of the audio packets."""
    if kind == "video":
        return video_times(path)
    with av.open(str(path)) as c:
        return [Fraction(p.pts) * p.time_base for p in c.demux(c.streams.audio[0]) if p.dts is not None]


# -- the span itself (plain Python) ------------------------------------------------------------------


def test_span_from_ffmpeg_options():
    assert Span.from_seconds() is None
    assert Span.from_seconds(start=1.5) == Span(1_500_000, None)
    assert Span.from_seconds(start=1.5, duration=2) == Span(1_500_000, 3_500_000)
    assert Span.from_seconds(end=2) == Span(None, 2_000_000)
    assert Span.from_seconds(start=0.1, end=0.3) == Span(100_000, 300_000)  # no float residue


def test_trim_decides_at_the_exact_boundaries():
    tb = Fraction(1, 30)
    trim = Span.from_seconds(start=0.5, duration=1).bind(Fraction(0))
    assert [trim.frame(pts, tb) for pts in (14, 15, 44, 45)] == [SKIP, KEEP, KEEP, STOP]
    assert zero_shift(trim.begin, tb) == 15 and zero_shift(trim.begin, Fraction(1, 48000)) == 24000
    assert trim.frame(None, tb) == KEEP
    assert trim.packet(23999, Fraction(1, 48000)) is False and trim.packet(24000, Fraction(1, 48000)) is True


def test_trim_counts_from_the_inputs_start():
    trim = Span.from_seconds(start=1, end=2).bind(Fraction(14, 10))  # MPEG-TS starts at 1.4 s
    assert trim.begin == Fraction(24, 10) and trim.stop == Fraction(34, 10)
    assert zero_shift(trim.begin, Fraction(1, 90000)) == 216000


def test_without_a_start_the_output_starts_where_the_input_does():
    trim = Span.from_seconds(duration=1).bind(Fraction(0))
    assert trim.begin is None and zero_shift(Fraction(0), Fraction(1, 30)) == 0
    assert trim.packet(-1024, Fraction(1, 48000))  # the AAC priming packet before 0 stays
    assert zero_shift(Fraction(36000), Fraction(1, 90000)) == 36000 * 90000  # a recording 10 h into its clock
    assert zero_shift(Fraction(-3, 2), Fraction(1, 90000)) == -135000  # a clock that wraps: moved forward
    assert zero_shift(Fraction(1, 3), Fraction(1, 1000)) == 333  # never past the first frame


def test_seek_only_where_it_saves_decoding():
    assert Span.from_seconds(start=0.1).bind(Fraction(0)).seek_target(Fraction(0)) is None
    assert Span.from_seconds(start=2).bind(Fraction(0)).seek_target(Fraction(0)) == 2 - Fraction(3, 23)


# -- frame accuracy, end to end ----------------------------------------------------------------------


@pytest.mark.parametrize("args, first, count, start", [
    (("-ss", "0.5", "-t", "1"), 15, 30, Fraction(1, 2)),  # between keyframes 10 and 20
    (("-ss", "00:00.7", "-to", "1.5"), 21, 24, Fraction(7, 10)),
    (("-ss", "1.25"), 38, 22, Fraction(5, 4)),  # between frames: the next one, 1/60 s after the start
    (("-ss", "1"), 30, 30, Fraction(1)),
    (("-t", "0.5"), 0, 15, 0),
    (("-to", "1.9"), 0, 57, 0),
])
def test_span_is_frame_accurate(clip, source_frames, tmp_path, args, first, count, start):
    r = run_pipeline(clip, "out.mp4", *args, "--filters", "", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert which_frames(tmp_path / "out.mp4", source_frames) == list(range(first, first + count))
    # -ss: the output starts at 0 at the start (ffmpeg's -ss before -i); else the input's own times.
    assert times(tmp_path / "out.mp4") == [Fraction(first + i, FPS) - start for i in range(count)]


@pytest.fixture(scope="module")
def unindexed(tmp_path_factory, clip) -> dict[str, Path]:
    """The clip (a keyframe every 10 frames) in containers without an index, and one whose only keyframe is
    the first: a seek there lands on whichever packet comes before the target, not on a keyframe."""
    d = tmp_path_factory.mktemp("unindexed")
    clips = {suffix: make_clip(d / f"in{suffix}", width=128, height=72, frames=FRAMES, fps=FPS, codec=codec,
                               options={"g": str(GOP)}) for suffix, codec in ((".ts", "libx264"),
                                                                              (".mpg", "mpeg2video"))}
    clips["one-key.ts"] = make_clip(d / "one-key.ts", width=128, height=72, frames=FRAMES, fps=FPS,
                                    options={"g": str(FRAMES)})
    return clips


def frames_within(path: Path, start: Fraction, end: Fraction) -> list[int]:
    """The frames shown from ``start`` to ``end`` (seconds from the input's start time, as ffmpeg counts
    -ss: in MPEG-TS the audio's first timestamp may come before the video's) by PyAV's decode alone."""
    with av.open(str(path)) as c:
        origin = Fraction(c.start_time, 1_000_000)
        shown = [f.pts * f.time_base - origin for f in c.decode(video=0)]
    return [i for i, t in enumerate(shown) if start <= t < end]


@pytest.mark.parametrize("name", [".ts", ".mpg", "one-key.ts"])
@pytest.mark.parametrize("start, duration", [
    ("1.25", "0.5"),  # between keyframes 30 and 40: the seek's target (1.12 s) is between them too
    ("0.5", "5"),  # the target (0.37 s) falls past the first GOP's keyframe: only a seek to the beginning works
])
def test_span_is_frame_accurate_without_an_index(unindexed, source_frames, tmp_path, name, start, duration):
    r = run_pipeline(unindexed[name], "out.mkv", "-ss", start, "-t", duration, "--filters", "", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "damaged" not in r.stderr, r.stderr  # no packet before the keyframe reached the decoder
    expected = frames_within(unindexed[name], Fraction(start), Fraction(start) + Fraction(duration))
    assert len(expected) >= 14
    assert which_frames(tmp_path / "out.mkv", source_frames) == expected


def test_span_of_a_raw_stream_counts_its_frames_at_its_own_rate(tmp_path):
    """A raw H.264 stream has no timestamps (and cannot seek): its frames are timed at the rate its headers
    give, 30 fps, not the raw demuxer's default of 25 (PyAV's average rate), as ffmpeg times them."""
    raw = make_clip(tmp_path / "in.h264", width=128, height=72, frames=60, fps=FPS, audio=False,
                    options={"g": "10"})
    with av.open(str(raw)) as c:
        frames = [f.to_ndarray().astype(np.float32) for f in c.decode(video=0)]
        assert c.streams.video[0].average_rate == 25  # what the frames were timed by
    r = run_pipeline(raw, "out.mkv", "-ss", "0.5", "-t", "0.5", "--filters", "", cwd=tmp_path)
    assert r.returncode == 0 and "timestamp" not in r.stderr, r.stderr  # none to keep: none said moved
    assert which_frames(tmp_path / "out.mkv", frames) == list(range(15, 30))
    r = run_pipeline(raw, "whole.mkv", "--filters", "", cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert abs(times(tmp_path / "whole.mkv")[-1] - Fraction(59, FPS)) <= Fraction(1, 1000)  # Matroska: ms
    r = run_pipeline(raw, "told.mkv", "--input-opt", "framerate=50", "--filters", "", cwd=tmp_path)
    assert r.returncode == 0, r.stderr  # the raw demuxer told a rate: that one
    assert abs(times(tmp_path / "told.mkv")[-1] - Fraction(59, 50)) <= Fraction(1, 1000)


@pytest.fixture(scope="module")
def avi(tmp_path_factory, clip) -> Path:
    """The clip (B-frames) in AVI, which stores no presentation times: its frames decode with their packets'
    timestamps in decoding order (1, 3, 2, 5, 4...)."""
    d = tmp_path_factory.mktemp("avi")
    r = run_pipeline(clip, "in.avi", "--filters", "", cwd=d)  # libx264 as in the clip: B-frames
    assert r.returncode == 0, r.stderr
    with av.open(str(d / "in.avi")) as c:
        shown = [f.pts for f in c.decode(video=0)][:6]
    assert shown != sorted(shown), shown
    return d / "in.avi"


def test_avi_b_frames_keep_their_spacing(avi, tmp_path):
    """Timed by FFmpeg's best-effort timestamp (the decoding timestamps once the frames' own have gone back
    more often): before, each step back shifted every later frame, and 60 frames lasted about 4 s."""
    r = run_pipeline(avi, "whole.mkv", "--filters", "", "-an", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    shown = times(tmp_path / "whole.mkv")
    steps = np.diff([float(t) for t in shown])
    assert len(shown) == FRAMES and np.all(np.abs(steps[2:-2] - 1 / FPS) < 1e-3), steps
    assert shown[-1] - shown[0] < Fraction(FRAMES + 2, FPS)
    r = run_pipeline(avi, "cut.mkv", "-ss", "1", "-t", "0.5", "--filters", "", "-an", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    cut = times(tmp_path / "cut.mkv")  # judged by the timestamps written, though the clock moved some
    assert len(cut) == 15 and cut[0] == 0 and cut[-1] < Fraction(1, 2), cut


def _audio_within(path: Path, start: Fraction, end: Fraction) -> int:
    """The audio packets that start in the span, by PyAV's demux alone."""
    with av.open(str(path)) as c:
        origin = Fraction(c.start_time, 1_000_000)
        return sum(1 for p in c.demux(c.streams.audio[0])
                   if p.pts is not None and start <= p.pts * p.time_base - origin < end)


@pytest.mark.parametrize("name", [".mpg", ".ts"])
def test_the_spans_audio_is_kept_where_the_muxer_put_it_after_the_video(unindexed, tmp_path, name):
    """MPEG-PS puts audio about 0.7 s after the video of the same time: the run ended at the span's last
    frame and lost that audio (3 of 21 packets for 0.5 s)."""
    r = run_pipeline(unindexed[name], "out.mkv", "-ss", "0.5", "-t", "0.5", "--filters", "",
                     "--stats-json", "s.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    expected = _audio_within(unindexed[name], Fraction(1, 2), Fraction(1))
    assert expected >= 20 and read_json(tmp_path / "s.json")["audio_packets"] == expected
    assert count_audio_packets(tmp_path / "out.mkv") == expected


def test_a_live_inputs_span_ends_at_its_last_frame(unindexed, tmp_path):
    """Reading on for audio is waiting on a live input (a FIFO): where the audio had ended before the span,
    the stall that followed failed a span already complete (exit 3 after --timeout)."""
    src = tmp_path / "audio-ends-early.ts"
    with av.open(str(unindexed[".ts"])) as i, av.open(str(src), "w") as o:
        out = {s.index: o.add_stream_from_template(s) for s in i.streams}
        for p in i.demux():
            if p.dts is not None and (p.stream.type == "video" or p.pts * p.time_base < Fraction(1, 2)):
                p.stream = out[p.stream.index]
                o.mux(p)
    fifo = tmp_path / "live"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", 'exec > "$1"; cat "$2"; exec sleep 30', "sh", str(fifo), str(src)])
    try:
        r = run_command(pipeline_command(fifo, "-o", tmp_path / "out.mkv", "-t", "1", "--timeout", "3",
                                         "--drop-policy", "block", "--filters", ""), timeout=60)
    finally:
        writer.kill()
        writer.wait()
    assert r.returncode == 0 and "no data" not in r.stderr, r.stderr
    assert len(times(tmp_path / "out.mkv")) in (29, 30)  # a live input's start: its first packet


def test_h264_in_mpeg_ps_without_a_timestamp_on_every_packet_is_not_said_retimed(clip, tmp_path):
    """Its PES packets carry a timestamp only now and then; the frames between get the next frame step."""
    src = run_pipeline(clip, "in.mpg", "--filters", "", cwd=tmp_path)
    assert src.returncode == 0, src.stderr
    r = run_pipeline(tmp_path / "in.mpg", "out.mkv", "-ss", "0.5", "-t", "0.5", "--filters", "",
                     "--stats-json", "s.json", cwd=tmp_path)
    assert r.returncode == 0 and "timestamp" not in r.stderr, r.stderr
    assert read_json(tmp_path / "s.json")["retimed_frames"] == 0 and len(times(tmp_path / "out.mkv")) == 15


def test_audio_is_cut_to_the_same_span(clip, tmp_path):
    r = run_pipeline(clip, "out.mp4", "-ss", "0.5", "-t", "1", "--filters", "", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    audio = times(tmp_path / "out.mp4", "audio")
    assert 0 <= audio[0] < AAC_PACKET  # the first packet that starts within the span
    assert 1 - AAC_PACKET <= audio[-1] < 1
    assert len(audio) in (46, 47)  # 1 s of 1024-sample packets at 48 kHz


@pytest.mark.parametrize("span, why", [(("-ss", "5"), "the input's last frame starts at 1.967 s, before it"),
                                       (("-ss", "1.98"), "the input's last frame starts at 1.967 s, before it"),
                                       (("-ss", "0.51", "-to", "0.52"), "no frame starts within it (a frame lasts")])
def test_a_span_without_frames_is_a_usage_error_that_says_why(clip, tmp_path, span, why):
    r = run_pipeline(clip, "out.mp4", *span, "--filters", "", cwd=tmp_path)
    assert r.returncode == 2 and "no video frames in the span" in r.stderr and why in r.stderr, r.stderr
    assert not (tmp_path / "out.mp4").exists()


def test_duration_past_the_end_takes_what_there_is(clip, tmp_path):
    r = run_pipeline(clip, "out.mp4", "-ss", "1.5", "-t", "10", "--filters", "", cwd=tmp_path)
    assert r.returncode == 0 and "ends early" not in r.stderr, r.stderr
    assert len(times(tmp_path / "out.mp4")) == FRAMES - 45


def test_span_through_the_api(clip, tmp_path):
    import pipeline

    stats = pipeline.run(str(clip), str(tmp_path / "api.mp4"), filters="", device="cpu", start=0.5, duration=0.5)
    assert stats["frames_out"] == 15
    assert times(tmp_path / "api.mp4")[0] == 0


def _ts_from(path, t0: float, seconds: int = 3):
    """MPEG-TS whose clock reads ``t0`` s at its first frame: MPEG-2 at 25 fps, MP2 audio from the same time."""
    with av.open(str(path), "w", format="mpegts") as c:
        v = c.add_stream("mpeg2video", rate=25)
        v.width, v.height, v.pix_fmt = 160, 96, "yuv420p"
        a = c.add_stream("mp2", rate=48000)
        a.layout = "stereo"
        first = round(t0 * 25)
        for i in range(seconds * 25):
            frame = av.VideoFrame.from_ndarray(np.full((96, 160, 3), 40 + i, np.uint8), format="rgb24")
            frame.pts, frame.time_base = first + i, Fraction(1, 25)
            c.mux(v.encode(frame.reformat(format="yuv420p")))
        c.mux(v.encode(None))
        for i in range(seconds * 48000 // 1152):
            frame = av.AudioFrame.from_ndarray(np.zeros((2, 1152), np.int16), format="s16p", layout="stereo")
            frame.sample_rate, frame.time_base = 48000, Fraction(1, 48000)
            frame.pts = first * 1920 + i * 1152
            c.mux(a.encode(frame))
        c.mux(a.encode(None))
    return path


@pytest.mark.parametrize("t0", [36000.0, 2**33 / 90000 - 1.5], ids=["10h-into-its-clock", "clock-wraps"])
@pytest.mark.parametrize("suffix", [".mp4", ".mkv"])
def test_a_recording_starts_at_0_whatever_its_clock_read(tmp_path, t0, suffix):
    """As ffmpeg writes it: an MP4 of a recording that began 10 h into its clock opened with 10 h of nothing,
    and one whose clock wrapped lost everything before the wrap to its edit list (37 of 75 frames)."""
    src, out = _ts_from(tmp_path / "rec.ts", t0), tmp_path / f"out{suffix}"
    result = run_pipeline(src, "-o", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    times = video_times(out)
    assert len(times) == 75 and times[0] < Fraction(1, 10)  # the audio may start a few ms before the video
    with av.open(str(out)) as c:
        assert abs(c.duration / 1e6 - 3) < 0.1
        audio_start = next(c.demux(audio=0)).pts * c.streams.audio[0].time_base
    assert abs(audio_start - times[0]) < Fraction(1, 20)  # in sync, as in the input


# -- the checked seek (pipeline.seek) on a container that says where it lands ---------------------------


class _Packets:
    """A container of video packets (decoding time, shown time, keyframe) at 1/10 s, sought as FFmpeg
    seeks one without an index: to the last packet decoded at or before the target, keyframe or not."""

    class Format:
        flags = 0

    def __init__(self, packets, fail_reading=False, fail_seek: int | None = None):
        from types import SimpleNamespace

        self.video = SimpleNamespace(time_base=Fraction(1, 10))
        self.format, self.at, self.seeks, self.fail = self.Format(), 0, [], fail_reading
        self.fail_seek = fail_seek  # the seek (counted from 1) that fails
        self.packets = [SimpleNamespace(stream=self.video, dts=d, pts=p, is_keyframe=k, size=1)
                        for d, p, k in packets]

    def seek(self, ticks, stream=None, backward=True, unsupported_byte_offset=False):
        if unsupported_byte_offset:  # to a byte: the first
            self.seeks.append(f"byte {ticks}")
            self.at = ticks
            return
        self.seeks.append(ticks)
        if len(self.seeks) == self.fail_seek:
            self.at = len(self.packets)  # where a failed search may leave it: the end
            raise av.error.PermissionError(1, "Operation not permitted")
        self.at = max([i for i, p in enumerate(self.packets) if p.dts <= ticks], default=0)

    def demux(self, *streams):
        if self.fail:
            raise av.error.InvalidDataError(1094995529, "damaged")
        yield from self.packets[self.at:]


def _gops(count: int, gop: int) -> list[tuple[int, int, bool]]:
    return [(i, i, i % gop == 0) for i in range(count)]


def test_a_seek_that_lands_on_the_keyframe_gives_it_back():
    from pipeline.seek import seek_before

    c = _Packets(_gops(100, 10))
    c.seek = lambda ticks, stream, backward: (c.seeks.append(ticks), setattr(c, "at", ticks - ticks % 10))
    read = seek_before(c, c.video, [], Fraction(52, 10), Fraction(55, 10), Fraction(0))
    assert [p.dts for p in read] == [50] and c.seeks == [52]


def test_a_seek_that_lands_mid_gop_goes_further_back_until_a_keyframe_comes_first():
    from pipeline.seek import seek_before

    c = _Packets(_gops(100, 10))
    read = seek_before(c, c.video, [], Fraction(52, 10), Fraction(55, 10), Fraction(0))
    assert [p.dts for p in read] == [50] and c.seeks == [52, 42]  # 4.2 s lands at 42: keyframe 50 comes first
    c = _Packets(_gops(100, 100))  # one keyframe: only the beginning works
    assert seek_before(c, c.video, [], Fraction(52, 10), Fraction(55, 10), Fraction(0)) == []
    assert c.seeks == [52, 42, 22, -10] and c.at == 0  # 1, 2 s back, then 1 s before the input's start


def test_a_read_error_while_checking_the_seek_decodes_from_the_beginning():
    from pipeline.seek import seek_before

    c = _Packets(_gops(100, 10), fail_reading=True)
    assert seek_before(c, c.video, [], Fraction(52, 10), Fraction(55, 10), Fraction(0)) == []
    assert c.seeks == [52, -10] and c.at == 0


@pytest.mark.parametrize("failing", [1, 2])
def test_a_seek_that_fails_goes_back_to_the_first_byte(failing):
    """FFmpeg may read to the end looking for a timestamp before it fails: decoding would start there."""
    from pipeline.seek import seek_before

    c = _Packets(_gops(100, 10), fail_seek=failing)
    with pytest.raises(av.error.PermissionError):
        seek_before(c, c.video, [], Fraction(52, 10), Fraction(55, 10), Fraction(0))
    assert c.seeks[-1] == "byte 0" and c.at == 0 and len(c.seeks) == failing + 1
