"""Real time (issue 6): live sources over loopback, stalls and reconnects, pacing, drops, latency.

Live tests run the CLI as a subprocess against tests/live_sender.py, which streams MPEG-TS to
127.0.0.1 at the clip's own pace (UDP, or TCP to a pipeline listening); ports are picked free by the
OS. Every wait is bounded, and every process started is ended by the test.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from utils import all_devices, environment, pipeline_command, python_command, read_json, run_pipeline, video_times

from pipeline.errors import ConfigError
from pipeline.sample import make_clip

FPS, N = 30, 45  # a 1.5 s clip
SENDER = Path(__file__).with_name("live_sender.py")
REALTIME = "realtime"  # the preset, by name
# 85 to 120 ms a frame each at 320x180 on one core (the CPU machine, its load): 4 to 6 fps for the pair.
SLOW_CHAIN = "bilateral=sigma_s=6:sigma_r=0.2,bilateral=sigma_s=6:sigma_r=0.2"


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    root = tmp_path_factory.mktemp("realtime")
    # A keyframe every 10 frames, so that a receiver joining mid-stream starts decoding quickly.
    opts = {"preset": "ultrafast", "g": "10", "bf": "0"}
    return {
        "ts": make_clip(root / "clip.ts", width=320, height=180, frames=N, fps=FPS, options=opts, seed=3),
        "mp4": make_clip(root / "clip.mp4", width=320, height=180, frames=N, fps=FPS, options=opts, seed=4),
    }


# -- helpers ----------------------------------------------------------------------------------------


def free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def sender(clip: Path, url: str, *extra, cwd: Path) -> subprocess.Popen:
    return start(python_command(SENDER, clip, url, *extra), cwd)


def finish(proc: subprocess.Popen, timeout: float = 60) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"process did not end in {timeout} s: {err}")
    return proc.returncode, err


def end(*procs: subprocess.Popen) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def wait_udp_bound(port: int, proc: subprocess.Popen, timeout: float = 20) -> None:
    """Until a socket is bound to the UDP port (Linux's /proc/net/udp): the receiver is listening."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        for table in ("/proc/net/udp", "/proc/net/udp6"):
            try:
                rows = Path(table).read_text().splitlines()[1:]
            except OSError:
                continue
            if any(int(row.split()[1].rsplit(":", 1)[1], 16) == port for row in rows):
                return
        time.sleep(0.05)
    pytest.fail(f"nothing bound UDP port {port} within {timeout} s")


def assert_accounted(stats: dict, output: Path) -> None:
    """Every frame that came in went out or was dropped and counted; the latency report is complete."""
    assert stats["frames_out"] + stats["drops"]["total"] == stats["frames_in"], stats["drops"]
    assert stats["drops"]["total"] == sum(v for k, v in stats["drops"].items() if k != "total")
    assert len(video_times(output)) == stats["frames_out"] > 0
    for queue in stats["queues"].values():
        assert queue["peak"] <= queue["size"]  # bounded: nothing piled up
    hops = stats["latency_hops_ms"]
    assert hops["decoded_to_encoder"]["count"] == hops["end_to_end"]["count"] == stats["frames_out"]
    assert all(len(v) == stats["frames_out"] for v in stats["per_frame"].values())
    assert 0 < hops["decoded_to_encoder"]["p50"] <= hops["decoded_to_encoder"]["max"]


# -- live sources -------------------------------------------------------------------------------------


def test_udp_stream_is_processed_live(tmp_path, clips):
    port = free_port(socket.SOCK_DGRAM)
    out, stats_path = tmp_path / "out.mp4", tmp_path / "stats.json"
    run = start(pipeline_command(f"udp://127.0.0.1:{port}", "-o", out, "--config", REALTIME, "--timeout", 5,
                                 "--frames", 30, "--stats-json", stats_path), tmp_path)
    send = None
    try:
        wait_udp_bound(port, run)
        send = sender(clips["ts"], f"udp://127.0.0.1:{port}", "--loop", 3, cwd=tmp_path)
        code, err = finish(run)
    finally:
        end(*(p for p in (run, send) if p is not None))
    assert code == 0, err
    stats = read_json(stats_path)
    assert stats["mode"] == "live" and stats["drop_policy"] == "drop-oldest"
    assert stats["frames_in"] == 30
    assert_accounted(stats, out)


def test_tcp_stream_to_a_listening_pipeline_ends_with_the_stream(tmp_path, clips):
    port = free_port(socket.SOCK_STREAM)
    out, stats_path = tmp_path / "out.mkv", tmp_path / "stats.json"
    run = start(pipeline_command(f"tcp://127.0.0.1:{port}?listen=1", "-o", out, "--config", REALTIME,
                                 "--timeout", 10, "--stats-json", stats_path), tmp_path)
    send = sender(clips["ts"], f"tcp://127.0.0.1:{port}", "--connect-s", 20, cwd=tmp_path)
    try:
        code, err = finish(run)
        assert finish(send)[0] == 0
    finally:
        end(run, send)
    assert code == 0, err  # the sender closing the connection is the end of the stream, not a stall
    stats = read_json(stats_path)
    assert stats["frames_in"] == N  # TCP loses nothing, and the pipeline listened from the start
    assert_accounted(stats, out)
    assert stats["audio_packets"] > 0


def test_a_live_stream_with_the_default_settings_drops_nothing(tmp_path):
    """No config: live input gets low-latency encoding by default, and the pipeline is ready (kernels,
    memory, encoder) before the first frame is read, so a 320x240 30 fps stream loses no frame."""
    clip = make_clip(tmp_path / "cam.ts", width=320, height=240, frames=60, fps=FPS,
                     options={"preset": "ultrafast", "g": "10", "bf": "0"}, seed=5)
    port = free_port(socket.SOCK_STREAM)
    out, stats_path = tmp_path / "out.mkv", tmp_path / "stats.json"
    run = start(pipeline_command(f"tcp://127.0.0.1:{port}?listen=1", "-o", out, "--timeout", 10,
                                 "--stats-json", stats_path), tmp_path)
    send = sender(clip, f"tcp://127.0.0.1:{port}", "--connect-s", 20, cwd=tmp_path)
    try:
        code, err = finish(run)
        assert finish(send)[0] == 0
    finally:
        end(run, send)
    assert code == 0, err
    stats = read_json(stats_path)
    assert stats["frames_in"] == stats["frames_out"] == 60 and stats["drops"]["total"] == 0
    assert_accounted(stats, out)


def test_stalled_source_exits_3_and_keeps_a_playable_output(tmp_path, clips):
    port = free_port(socket.SOCK_DGRAM)
    out, stats_path = tmp_path / "out.mp4", tmp_path / "stats.json"
    run = start(pipeline_command(f"udp://127.0.0.1:{port}", "-o", out, "--config", REALTIME, "--timeout", 1,
                                 "--reconnect", 1, "--stats-json", stats_path), tmp_path)
    send = None
    try:
        wait_udp_bound(port, run)
        send = sender(clips["ts"], f"udp://127.0.0.1:{port}", "--stall-after", 30, "--stall-s", 30, cwd=tmp_path)
        t0 = time.monotonic()
        code, err = finish(run)
        took = time.monotonic() - t0
    finally:
        end(*(p for p in (run, send) if p is not None))
    assert code == 3, err
    lines = err.strip().splitlines()
    assert "Traceback" not in err
    assert any("reconnecting" in line and "attempt 1 of 1" in line for line in lines[:-1]), err
    last = lines[-1]
    assert last.startswith("pipeline: error: ") and "stalled" in err and "gave up after 1 reconnect" in last
    done = int(last.split("holds the ")[1].split()[0])
    assert 0 < done <= 30
    assert len(video_times(out)) == done  # finalised and playable
    assert read_json(stats_path)["frames_out"] == done
    assert took < 20  # 1 s of video, a 1 s stall timeout, 0.5 s back-off, a 1 s open timeout
    assert not list(tmp_path.glob(".*partial*"))


def test_ctrl_c_during_a_stall_stops_at_once_and_keeps_the_output(tmp_path, clips):
    port = free_port(socket.SOCK_DGRAM)
    out = tmp_path / "out.mp4"
    run = start(pipeline_command(f"udp://127.0.0.1:{port}", "-o", out, "--config", REALTIME, "--timeout", 30),
                tmp_path)
    send = None
    try:
        wait_udp_bound(port, run)
        send = sender(clips["ts"], f"udp://127.0.0.1:{port}", "--stall-after", 30, "--stall-s", 30, cwd=tmp_path)
        time.sleep(2.5)  # 1 s of video, then silence: the read now blocks for up to 30 s
        assert run.poll() is None
        run.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        code, err = finish(run)
        took = time.monotonic() - t0
    finally:
        end(*(p for p in (run, send) if p is not None))
    assert code == 130, err
    assert took < 5, took
    line = err.strip().splitlines()[-1]
    assert "interrupted by SIGINT" in line and "Traceback" not in err
    done = int(line.split("holds the ")[1].split()[0])
    assert len(video_times(out)) == done > 0


def test_a_source_back_after_a_stall_is_reconnected(tmp_path, clips):
    port = free_port(socket.SOCK_DGRAM)
    out, stats_path = tmp_path / "out.mkv", tmp_path / "stats.json"
    run = start(pipeline_command(f"udp://127.0.0.1:{port}", "-o", out, "--config", REALTIME, "--timeout", 1,
                                 "--reconnect", 4, "--frames", 45, "--stats-json", stats_path), tmp_path)
    send = None
    try:
        wait_udp_bound(port, run)
        send = sender(clips["ts"], f"udp://127.0.0.1:{port}", "--loop", 4, "--stall-after", 20, "--stall-s", 2.5,
                      cwd=tmp_path)
        code, err = finish(run)
    finally:
        end(*(p for p in (run, send) if p is not None))
    assert code == 0, err
    assert "reconnected" in err
    stats = read_json(stats_path)
    assert stats["reconnects"] == 1 and stats["frames_in"] == 45
    assert_accounted(stats, out)
    times = video_times(out)
    assert all(a < b for a, b in zip(times, times[1:]))  # one stream across the two connections


def test_url_output_streams_to_a_live_receiver(tmp_path, clips):
    """One pipeline paces a file out to udp://, another receives it: both ends of a live hop."""
    port = free_port(socket.SOCK_DGRAM)
    out, stats_path = tmp_path / "received.mkv", tmp_path / "stats.json"
    receiver = start(pipeline_command(f"udp://127.0.0.1:{port}", "-o", out, "--config", REALTIME, "--timeout", 5,
                                      "--frames", 20, "--stats-json", stats_path, "--filters", ""), tmp_path)
    send_dir = tmp_path / "send"
    send_dir.mkdir()
    streamer = None
    try:
        wait_udp_bound(port, receiver)
        streamer = start(pipeline_command(clips["mp4"], "-o", f"udp://127.0.0.1:{port}", "--format", "mpegts",
                                          "--realtime", "--config", REALTIME, "--encoder-opt", "g=10"), send_dir)
        code, err = finish(receiver)
        streamed, streamed_err = finish(streamer)
    finally:
        end(*(p for p in (receiver, streamer) if p is not None))
    assert code == 0, err
    assert streamed == 0, streamed_err
    assert list(send_dir.iterdir()) == []  # a stream URL: no temporary file, nothing renamed
    assert_accounted(read_json(stats_path), out)


# -- pacing and drops ----------------------------------------------------------------------------------


def run_paced(tmp_path: Path, clip: Path, *extra) -> tuple[dict, Path]:
    out, stats_path = tmp_path / "out.mp4", tmp_path / "stats.json"
    result = run_pipeline(clip, "-o", out, "--realtime", "--stats-json", stats_path, *extra, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return read_json(stats_path), out


def test_realtime_paces_a_file_at_its_frame_rate(tmp_path, clips):
    stats, out = run_paced(tmp_path, clips["mp4"], "--config", REALTIME)
    # The reader's queue holds a quarter of a second (8 frames at 30 fps): a stall of the GPU that long
    # drops nothing; the one after it, frames in host slots (the preset's ring of 6); the one behind the
    # GPU, the frames in flight (2).
    assert {k: q["size"] for k, q in stats["queues"].items()} == {"decode": 8, "submit": 6, "encode": 2}
    duration = N / FPS
    assert 0.8 * duration <= stats["wall_s"] <= 2 * duration, stats["wall_s"]
    assert stats["mode"] == "paced" and stats["frames_in"] == N
    assert_accounted(stats, out)
    # Released on schedule: decoded times follow the timestamps (CI may be late, never early).
    per_frame = stats["per_frame"]
    order = np.argsort(per_frame["index"])
    decoded = np.asarray(per_frame["decoded"])[order] / 1e3
    pts = np.asarray(per_frame["pts_s"])[order]
    assert np.all(decoded - decoded[0] >= pts - pts[0] - 0.002)


def test_a_file_runs_queues_hold_the_frames_in_flight(tmp_path, clips):
    stats_path = tmp_path / "stats.json"
    result = run_pipeline(clips["mp4"], "-o", tmp_path / "out.mp4", "--ring-size", 2, "--in-flight", 4,
                          "--stats-json", stats_path, "--frames", 5, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert {k: q["size"] for k, q in read_json(stats_path)["queues"].items()} == {"submit": 4, "encode": 4}


def test_a_paced_naive_run_allocates_per_frame_and_queues_as_the_pooled_one(tmp_path, clips):
    """The naive side has no ring of slots: nothing bounds its queue before the GPU but the quarter second."""
    stats, out = run_paced(tmp_path, clips["mp4"], "--alloc", "naive", "--frames", 10)
    assert stats["frames_out"] == 10 and stats["drops"]["total"] == 0
    assert {k: q["size"] for k, q in stats["queues"].items()} == {"decode": 8, "submit": 8, "encode": 4}
    assert_accounted(stats, out)


@pytest.mark.parametrize("policy", ["drop-oldest", "drop-newest"])
def test_a_slow_chain_drops_frames_and_memory_stays_bounded(tmp_path, clips, policy):
    stats, out = run_paced(tmp_path, clips["mp4"], "--filters", SLOW_CHAIN, "--drop-policy", policy,
                           "--frames", 30, "--in-flight", 2)
    assert stats["frames_in"] == 30
    # 30 fps in, 4 to 6 out: in its second about 5 frames done and 16 held (queues, ring, in flight), the
    # rest dropped (8 on the CPU machine; a machine twice as fast would still drop some)
    assert stats["drops"]["total"] > 0
    assert_accounted(stats, out)
    assert stats["memory"]["device_allocs"] == 1 and stats["memory"]["host_allocs"] == 0
    kept = video_times(out)
    source = video_times(clips["mp4"])[:30]
    assert set(kept) <= set(source) and kept == sorted(kept)
    # drop-oldest lets the freshest frames through, the last one included; drop-newest the queued
    # ones, the first included.
    assert (kept[-1] == source[-1]) if policy == "drop-oldest" else (kept[0] == source[0])


def test_block_policy_keeps_every_frame_of_a_paced_file(tmp_path, clips):
    stats, out = run_paced(tmp_path, clips["mp4"], "--filters", "bilateral=sigma_s=3:sigma_r=0.2",
                           "--drop-policy", "block", "--frames", 15)
    assert stats["drop_policy"] == "block" and stats["drops"]["total"] == 0
    assert stats["frames_in"] == stats["frames_out"] == 15
    assert_accounted(stats, out)


@pytest.mark.parametrize("device", all_devices())
def test_latency_hops_are_in_order(tmp_path, clips, device):
    """Per frame, every timestamp follows the previous hop's; on CUDA the GPU hops are event times
    moved onto the host clock, so allow the clock tie's few microseconds."""
    out, stats_path = tmp_path / "out.mp4", tmp_path / "stats.json"
    result = run_pipeline(clips["mp4"], "-o", out, "--realtime", "--config", REALTIME, "--stats-json", stats_path,
                          "--frames", 20, "--latency-budget", 1000, device=device, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    stats = read_json(stats_path)
    series = stats["per_frame"]
    names = ["decoded", "slotted", "uploaded", "filtered", "downloaded", "encoder", "packet"]
    stamps = np.array([series[n] for n in names], dtype=float)
    assert np.all(np.isfinite(stamps))
    assert np.all(np.diff(stamps, axis=0) >= -0.1), stamps
    assert stats["over_budget"] == 0 and stats["latency_budget_ms"] == 1000


def test_latency_budget_warns_once_and_counts(tmp_path, clips):
    out, stats_path = tmp_path / "out.mp4", tmp_path / "stats.json"
    result = run_pipeline(clips["mp4"], "-o", out, "--realtime", "--filters", SLOW_CHAIN, "--frames", 10,
                          "--latency-budget", 1, "--stats-json", stats_path, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "budget" in line]
    assert len(warnings) == 1 and "largest hop" in warnings[0]
    stats = read_json(stats_path)
    assert stats["over_budget"] == stats["frames_out"] > 0


# -- options that need what the machine may lack -------------------------------------------------------


def test_preview_without_a_display_is_one_line_exit_2(tmp_path, clips):
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    out = tmp_path / "out.mp4"
    result = run_pipeline(clips["mp4"], "-o", out, "--preview", cwd=tmp_path, env=env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--preview" in lines[0] and "Traceback" not in result.stderr
    assert not out.exists()


def test_nvtx_without_cupy_or_nvtx_runs_with_a_notice(tmp_path, clips):
    out = tmp_path / "out.mp4"
    result = run_pipeline(clips["mp4"], "-o", out, "--nvtx", "--frames", 3, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    from pipeline.gpu.nvtx import _cupy_nvtx, _nvtx_package

    has_nvtx = (_cupy_nvtx() or _nvtx_package()) is not None  # as the run decides
    assert ("no NVTX ranges" in result.stderr) is not has_nvtx
    assert len(video_times(out)) == 3


def test_preview_draws_the_latest_frame_and_q_stops():
    """Everything but the window itself, which is replaced here."""
    from pipeline.preview import Preview, _x_display_reachable, fit

    shown, stopped, closed = [], [], []

    class FakeWindow:
        def show(self, rgb):
            shown.append(rgb)

        def quit_requested(self):
            return bool(shown)  # 'q' pressed once a frame is up

        def close(self):
            closed.append(True)

    preview = Preview(on_quit=lambda: stopped.append(True), window=FakeWindow())
    i420 = np.full((180 * 3 // 2, 320), 128, np.uint8)
    preview.pump()  # nothing offered yet: nothing shown
    assert shown == [] and stopped == []
    assert preview.wants_frame()
    preview.offer(i420, "30.0 fps  4.0 ms")
    assert not preview.wants_frame()
    preview.pump()
    assert len(shown) == 1 and shown[0].shape == (180, 320, 3) and stopped == [True]
    assert shown[0][100, 300].tolist() == [130, 130, 130]  # mid-grey, limited range (BT.601 as cv2 converts)
    assert shown[0][25:35, 10:200].max() == 255  # the caption
    assert preview.wants_frame()
    preview.close()
    assert closed == [True]
    assert not _x_display_reachable("") and not _x_display_reachable(":nonsense")
    assert fit((3840, 2160), (1920, 1080)) == (1728, 972) and fit((320, 180), (1920, 1080)) == (320, 180)
    assert fit((320, 180), (0, 0)) == (320, 180)


def test_a_failing_preview_window_closes_and_the_run_goes_on(caplog):
    """A window that failed (pygame.error from set_mode or flip) ended the run as an internal error, its
    threads still running while the output was finished under them."""
    from pipeline.preview import Preview

    closed, stopped = [], []

    class BrokenWindow:
        def show(self, rgb):
            raise RuntimeError("video system not initialized")

        def quit_requested(self):
            return False

        def close(self):
            closed.append(True)

    preview = Preview(on_quit=lambda: stopped.append(True), window=BrokenWindow())
    preview.offer(np.full((180 * 3 // 2, 320), 128, np.uint8), "30.0 fps")
    with caplog.at_level("WARNING", logger="pipeline"):
        preview.pump()
        preview.pump()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "video system not initialized" in said[0] and "goes on without it" in said[0]
    assert closed == [True] and stopped == []
    assert not preview.wants_frame()  # no more frames copied for a window that is gone


def test_preview_window_shows_frames_and_q_stops(monkeypatch):
    """The real window, on SDL's offscreen driver (no display needed)."""
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    monkeypatch.setenv("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    pygame = pytest.importorskip("pygame", reason="the [preview] extra (pygame-ce) is not installed")
    from pipeline.preview import Preview, check_display

    check_display()  # the dummy driver is a display as far as SDL is concerned
    stopped = []
    preview = Preview(on_quit=lambda: stopped.append(True))
    try:
        preview.offer(np.full((180 * 3 // 2, 320), 128, np.uint8), "30.0 fps  4.0 ms")
        preview.pump()
        assert pygame.display.get_surface().get_size() == (320, 180)
        assert pygame.display.get_surface().get_at((300, 100))[:3] == (130, 130, 130)
        assert stopped == []
        pygame.event.post(pygame.event.Event(pygame.KEYDOWN, key=pygame.K_q))
        preview.pump()
        assert stopped == [True]
    finally:
        preview.close()
    assert not pygame.display.get_init()


QUIT_FROM_THE_WINDOW = """
import itertools, sys
import pipeline.preview as preview
from pipeline.cli import main

class Window:  # a window whose user presses q on its fourth look
    polls = itertools.count()
    def show(self, rgb): pass
    def quit_requested(self): return next(self.polls) == 3
    def close(self): pass

preview.check_display = lambda: None
opened = preview.Preview.__init__
preview.Preview.__init__ = lambda self, on_quit, window=None: opened(self, on_quit, window=Window())
sys.exit(main(["run", sys.argv[1], "-o", sys.argv[2], "--device", "cpu", "--preview", "-q"]))
"""


def test_q_in_the_preview_stops_as_ctrl_c_and_says_so(tmp_path, clips):
    """The command line's user pressed q: the run ends as after Ctrl-C (exit 130), its frames kept, and says
    so in those words (not as an application's Pipeline.stop())."""
    out = tmp_path / "out.mp4"
    result = subprocess.run([sys.executable, "-c", QUIT_FROM_THE_WINDOW, str(clips["mp4"]), str(out)],
                            capture_output=True, text=True, timeout=120, env=environment())
    assert result.returncode == 130, result.stderr
    assert result.stderr.startswith(f"pipeline: interrupted by SIGINT; {out} holds the "), result.stderr
    assert "Pipeline.stop" not in result.stderr and out.exists()


def test_preview_run_on_the_offscreen_driver(tmp_path, clips, monkeypatch):
    monkeypatch.setenv("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    pytest.importorskip("pygame", reason="the [preview] extra (pygame-ce) is not installed")
    out = tmp_path / "out.mp4"
    result = run_pipeline(clips["mp4"], "-o", out, "--preview", "--frames", 10, cwd=tmp_path,
                          env=environment(SDL_VIDEODRIVER="dummy"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and len(video_times(out)) == 10


def test_preview_without_pygame_is_one_line_naming_the_extra(monkeypatch):
    from pipeline.preview import check_display

    monkeypatch.setitem(sys.modules, "pygame", None)  # import fails as if not installed
    with pytest.raises(ConfigError, match=r"--preview.*\[preview\] extra, or pip install pygame-ce"):
        check_display()
