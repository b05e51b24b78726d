"""Pipes (`-` and `pipe:` for stdin and stdout) and URLs whose protocol the installed FFmpeg lacks."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import time
from fractions import Fraction
from pathlib import Path

import pytest
from utils import (count_audio_packets, one_error, partials, pipeline_command, python_command, read_json,
                   run_pipeline, video_times)

from pipeline import protocols
from pipeline.config import pipe_fd
from pipeline.sample import make_clip

FPS, FRAMES = 30, 45

# Writes the clip named by argv[1] to stdout as MPEG-TS, stream copy: a producer as ffmpeg would be.
PRODUCER = """
import sys, av
with av.open(sys.argv[1]) as i, av.open("pipe:1", "w", format="mpegts") as o:
    streams = {s.index: o.add_stream_from_template(s) for s in i.streams}
    for p in i.demux():
        if p.dts is not None:
            p.stream = streams[p.stream.index]
            o.mux(p)
"""
# Decodes stdin and prints how many video frames it held: a consumer.
CONSUMER = """
import av
with av.open("pipe:0", "r") as c:
    print(sum(1 for _ in c.decode(video=0)))
"""


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    return make_clip(tmp_path_factory.mktemp("pipes") / "in.mp4", width=128, height=72, frames=FRAMES, fps=FPS)


def run(*args, stdin: bytes | None = None, cwd: Path) -> subprocess.CompletedProcess:
    """``pipeline run ARGS`` on the CPU with ``stdin`` fed in; stdout and stderr come back as bytes."""
    return run_pipeline(*args, quiet=False, input=stdin, text=False, cwd=cwd)


def ts_bytes(clip: Path) -> bytes:
    return subprocess.run(python_command("-c", PRODUCER, clip), capture_output=True, check=True).stdout


def decoded(data: bytes) -> tuple[int, int, list[Fraction]]:
    """Video frames, audio packets and the video's timestamps of a stream held in memory."""
    times = video_times(io.BytesIO(data))
    return len(times), count_audio_packets(io.BytesIO(data)), times


def test_pipe_names():
    assert [pipe_fd(n) for n in ("-", "pipe:", "pipe:0", "pipe:3", "pipe:x", "in.mp4", None)] == [0, 0, 0, 3, None,
                                                                                                  None, None]
    assert pipe_fd("-", 1) == pipe_fd("pipe:", 1) == pipe_fd("pipe:1") == 1


def test_producer_pipeline_consumer(clip, tmp_path):
    """producer | pipeline run - --input-format mpegts -o - -f mpegts | consumer"""
    producer = subprocess.Popen(python_command("-c", PRODUCER, clip), stdout=subprocess.PIPE)
    middle = subprocess.Popen(pipeline_command("-", "--input-format", "mpegts", "-o", "-", "-f", "mpegts", quiet=False),
                              stdin=producer.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    consumer = subprocess.Popen(python_command("-c", CONSUMER), stdin=middle.stdout, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    producer.stdout.close()  # the next process holds the only copy: it sees the end when the writer does
    middle.stdout.close()
    out, err = consumer.communicate(timeout=90)
    middle_err = middle.stderr.read().decode()
    assert middle.wait(timeout=30) == 0 and producer.wait(timeout=30) == 0, middle_err
    assert consumer.returncode == 0, err.decode()
    assert int(out) == FRAMES
    assert f"{FRAMES} frames in" in middle_err  # the summary went to stderr


def test_stdout_holds_only_the_stream(clip, tmp_path):
    r = run("-", "-o", "-", "-f", "mpegts", "--stats-json", "stats.json", stdin=ts_bytes(clip), cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    data = r.stdout
    assert len(data) % 188 == 0 and all(data[i] == 0x47 for i in range(0, len(data), 188))  # TS packets only
    frames, audio, _ = decoded(data)
    assert frames == FRAMES and audio > 0
    err = r.stderr.decode()
    assert f"{FRAMES} frames in" in err and "wrote pipe:1" in err
    stats = read_json(tmp_path / "stats.json")
    # stdin is a stream read as fast as it comes, not a live source: every frame, no drops
    assert (stats["mode"], stats["drop_policy"], stats["drops"]["total"]) == ("file", "block", 0)


def test_quiet_writes_nothing_but_the_stream(clip, tmp_path):
    r = run(clip, "-o", "pipe:1", "-f", "matroska", "-q", cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == b"", r.stderr.decode()
    assert decoded(r.stdout)[0] == FRAMES


def test_mp4_on_stdout_is_fragmented(clip, tmp_path):
    r = run(clip, "-o", "-", "-f", "mp4", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    assert b"moof" in r.stdout and r.stdout[4:8] == b"ftyp"
    frames, audio, times = decoded(r.stdout)
    assert frames == FRAMES and audio > 0 and times[0] == 0


@pytest.mark.parametrize("muxer", ["mp4", "mpegts", "matroska"])
@pytest.mark.parametrize("into", ["closed-pipe", "full-device"])
def test_a_write_error_on_stdout_ends_the_run_with_exit_4(clip, tmp_path, muxer, into):
    """The fragmented MP4 muxer dropped the pipe's write errors: into a reader that left, exit 0."""
    if into == "closed-pipe":
        reader, stdout = os.pipe()
        os.close(reader)
    else:
        stdout = os.open("/dev/full", os.O_WRONLY)
    try:
        r = subprocess.run(pipeline_command(clip, "-o", "-", "-f", muxer), stdout=stdout, stderr=subprocess.PIPE,
                           text=True, timeout=60, cwd=tmp_path)
    finally:
        os.close(stdout)
    one_error(r, 4, "pipe:1: write failed")


def test_a_non_blocking_stdout_gets_the_whole_stream(clip, tmp_path):
    """A reader slower than the run, behind a descriptor set non-blocking: a full pipe is waited for."""
    reader, writer = os.pipe()
    os.set_blocking(writer, False)
    proc = subprocess.Popen(pipeline_command(clip, "-o", "-", "-f", "mpegts"), stdout=writer,
                            stderr=subprocess.PIPE, cwd=tmp_path)
    os.close(writer)
    chunks = []
    while chunk := os.read(reader, 4096):
        chunks.append(chunk)
        time.sleep(0.001)
    os.close(reader)
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    assert decoded(b"".join(chunks))[0] == FRAMES


def test_aac_from_mpegts_cannot_go_to_mp4_on_a_pipe(clip, tmp_path):
    r = run("-", "-o", "-", "-f", "mp4", stdin=ts_bytes(clip), cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == b""
    assert "ADTS" in r.stderr.decode() and "-f mpegts" in r.stderr.decode()


def test_stdin_to_a_file_with_a_span(clip, tmp_path):
    # stdin cannot seek: the frames before -ss are decoded and dropped; -ss counts from the stream's start.
    r = run("pipe:", "out.mkv", "-ss", "0.5", "-t", "0.5", "-q", stdin=ts_bytes(clip), cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    frames, _, times = decoded((tmp_path / "out.mkv").read_bytes())
    # The stream starts with its audio, an AAC priming packet (21 ms) before the video, as ffmpeg counts.
    assert frames == 15 and 0 <= times[0] < Fraction(1, FPS)


@pytest.mark.parametrize("args, words", [
    (("-", "-q"), "reading from stdin needs -o"),
    (("in.mp4", "-o", "-"), "needs an output format"),
    (("in.mp4", "-o", "pipe:1"), "needs an output format"),
])
def test_pipe_usage_errors(tmp_path, args, words):
    r = run(*args, stdin=b"", cwd=tmp_path)
    assert r.returncode == 2 and words in r.stderr.decode() and r.stdout == b""


def test_empty_stdin_is_a_bad_input(tmp_path):
    r = run("-", "-o", "out.mp4", stdin=b"", cwd=tmp_path)
    assert r.returncode == 3 and not (tmp_path / "out.mp4").exists()


# -- protocols ---------------------------------------------------------------------------------------


def test_the_wheels_protocols_are_listed():
    inputs, outputs = protocols.ffmpeg_protocols(False), protocols.ffmpeg_protocols(True)
    assert {"file", "tcp", "udp", "pipe", "rtmp", "http"} <= set(inputs)
    assert {"file", "tcp", "udp", "pipe"} <= set(outputs)


@pytest.mark.parametrize("args", [("srt://127.0.0.1:9000", "-o", "out.ts"), ("{clip}", "-o", "srt://127.0.0.1:9000")])
def test_a_missing_protocol_is_refused_before_anything_opens(clip, tmp_path, args):
    if "srt" in (protocols.ffmpeg_protocols(False) or ()):
        pytest.skip("this FFmpeg has SRT")
    r = run(*(a.format(clip=clip) for a in args), cwd=tmp_path)
    err = r.stderr.decode().strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1, err
    assert "no srt protocol" in err and all(f" {p}," in err for p in ("file", "tcp", "udp"))
    assert ("output protocols" if args[0] != "srt://127.0.0.1:9000" else "input protocols") in err
    assert list(tmp_path.iterdir()) == []


def test_known_protocols_and_demuxer_urls_pass():
    for name in ("udp://0.0.0.0:5000", "rtsp://cam.local/stream", "in.mp4", "meeting12:30.mp4", "-"):
        protocols.check_protocol(name)
    protocols.check_protocol("tcp://host:9000?listen=1", output=True)


def test_without_the_list_nothing_is_refused(monkeypatch):
    monkeypatch.setattr(protocols, "_avformat_candidates", lambda: iter(()))
    protocols.ffmpeg_protocols.cache_clear()
    try:
        assert protocols.ffmpeg_protocols() is None
        protocols.check_protocol("srt://127.0.0.1:9000")
    finally:
        protocols.ffmpeg_protocols.cache_clear()


@pytest.mark.parametrize("fed", [False, True], ids=["nothing-yet", "frames-then-silence"])
def test_sigterm_stops_a_run_whose_stdin_writer_is_silent(tmp_path, fed):
    """FFmpeg retries a read a signal interrupts: waiting on stdin, the run let SIGINT and SIGTERM pass (its
    open in the main thread, later its decode stage), and only SIGKILL ended it, leaving its temporary file.
    Now a silent stdin stops as a FIFO does: before any frame with nothing written, after some with them."""
    out, ts = tmp_path / "out.mkv", tmp_path / "in.ts"
    sample = Path(__file__).resolve().parents[1] / "samples" / "sample.mp4"
    assert run_pipeline(sample, "-o", ts, "--filters", "", cwd=tmp_path).returncode == 0
    # The writer, another process as in `(cat in.ts; sleep 60) | pipeline run - ...`: the sample's 90 frames
    # as MPEG-TS, or nothing, then it holds the pipe open without a word.
    writer = subprocess.Popen(["sh", "-c", f"{'cat in.ts; ' if fed else ''}exec sleep 60"], stdout=subprocess.PIPE,
                              cwd=tmp_path)
    proc = subprocess.Popen(pipeline_command("-", "-o", out), stdin=writer.stdout, stderr=subprocess.PIPE,
                            cwd=tmp_path)
    writer.stdout.close()
    try:
        time.sleep(5 if fed else 2)  # its frames decoded (in about a second), the run waits in a read of stdin
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
        writer.kill()
        writer.wait()
    assert proc.returncode == 143 and err.decode().count("pipeline: interrupted by SIGTERM") == 1, err
    assert partials(tmp_path) == []
    if fed:
        # Frames still inside the decoder's frame threads (one per thread less one, at most 16 threads) and
        # its reordering queue are lost with the stop; every frame decoded before it is in the file.
        held = min((os.cpu_count() or 1) + 1, 16) + 4
        assert len(video_times(out)) >= 90 - held
    else:
        assert not out.exists()
