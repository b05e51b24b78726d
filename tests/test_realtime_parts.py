"""Real time (issue 6), the parts in process: channels and drop policies, pacing, latency matching,
bounded series, live-input rules, the realtime config. The end-to-end runs are in test_realtime.py."""

from __future__ import annotations

import threading
from fractions import Fraction

import pytest

from pipeline.channels import END, Aborted, Channel
from pipeline.config import RunConfig, build_config
from pipeline.config_file import PRESETS_DIR, load_toml
from pipeline.errors import ConfigError
from pipeline.latency import LatencyLog, Ring
from pipeline.live import MAX_QUEUE, Pacer, queue_depth
from pipeline.protocols import url_muxer
from pipeline.source import is_live_input

REALTIME = PRESETS_DIR / "realtime.toml"


def test_channel_drop_oldest_keeps_the_freshest_and_never_drops_audio():
    dropped = []
    ch = Channel(2, threading.Event(), policy="drop-oldest", droppable=lambda i: isinstance(i, int),
                 on_drop=dropped.append)
    for item in (1, "audio", 2, 3, "audio", 4, END):
        ch.put(item)
    # Frames count against the size, audio and the end marker do not and are never dropped.
    assert [ch.get() for _ in range(5)] == ["audio", 3, "audio", 4, END]
    assert dropped == [1, 2] and ch.dropped == 2 and ch.peak == 2


def test_channel_drop_newest_refuses_the_arriving_frame():
    dropped = []
    ch = Channel(2, threading.Event(), policy="drop-newest", droppable=lambda i: isinstance(i, int),
                 on_drop=dropped.append)
    for item in (1, 2, 3, "audio", 4, END):
        ch.put(item)
    assert dropped == [3, 4]
    assert [ch.get() for _ in range(4)] == [1, 2, "audio", END]


def test_channel_block_gives_up_once_aborted():
    abort = threading.Event()
    ch = Channel(1, abort)
    ch.put(1)
    threading.Timer(0.1, abort.set).start()
    with pytest.raises(Aborted):
        ch.put(2)
    assert ch.poll(0.01) == 1  # what is queued can still be taken
    with pytest.raises(Aborted):
        ch.poll(0.01)


def test_pacer_releases_on_schedule_and_never_bursts():
    now = [0.0]
    waits = []

    def wait(seconds):
        waits.append(round(seconds, 6))
        now[0] += seconds
        return False

    pacer = Pacer(wait, clock=lambda: now[0])
    tb = Fraction(1, 30)
    assert pacer.release(0, tb) == 0.0
    assert pacer.release(1, tb) == pytest.approx(1 / 30)
    now[0] += 0.5  # the decoder was late by many frames
    late = pacer.release(2, tb)
    assert late == now[0] and pacer.release(3, tb) == pytest.approx(late + 1 / 30)  # one step, not a burst
    assert waits == [round(1 / 30, 6), round(1 / 30, 6)]


def test_latency_log_matches_packets_out_of_order_and_counts_the_budget(caplog):
    log = LatencyLog(0.0, budget_ms=50, capacity=4)
    for i in range(3):
        log.handed(i, i / 30, {"decoded": i / 30, "encoder": i / 30 + 0.001})
    log.packets([0.0], 0.010)  # frame 0: 10 ms
    log.packets([2 / 30, 1 / 30], 0.2)  # B-frame order; frame 1 takes 166 ms, over budget
    log.finish()
    assert list(log.column("index")) == [0, 2, 1]
    notices = [r.getMessage() for r in caplog.records if r.name == "pipeline"]
    assert log.over_budget == 2 and len(notices) == 1 and "frame 2" in notices[0]
    assert log.hops()["end_to_end"]["count"] == 3
    for i in range(10):  # bounded: the last 4 frames are kept
        log.handed(10 + i, None, {"decoded": 1.0})
    log.finish()
    assert list(log.column("index")) == [16, 17, 18, 19] and log.unmatched == 10


def test_ring_keeps_the_last_values_in_order():
    ring = Ring(4)
    for v in range(6):
        ring.append(v)
    assert list(ring) == [2, 3, 4, 5] and ring.count == 6 and len(ring) == 4


def test_live_inputs_and_url_muxers():
    assert is_live_input("udp://0.0.0.0:5000") and is_live_input("rtsp://cam/stream")
    assert is_live_input("/dev/video0", "v4l2") and not is_live_input("/dev/video0")
    assert not is_live_input("clip.mp4") and not is_live_input("file:clip.mp4")
    assert url_muxer("udp://127.0.0.1:5000", None) == "mpegts" and url_muxer("rtmp://h/app", None) == "flv"
    assert url_muxer("udp://127.0.0.1:5000", "rtp_mpegts") == "rtp_mpegts"
    with pytest.raises(ConfigError, match="--format"):
        url_muxer("foo://x", None)


def test_realtime_config_fields_and_preset(tmp_path):
    cfg = build_config(load_toml(REALTIME), {"input": "udp://0.0.0.0:5000", "output": "out.ts"})
    assert cfg.encoder_opts["tune"] == "zerolatency" and cfg.encoder_opts["bf"] == "0"
    assert cfg.drop_policy == "auto"  # drop-oldest for live and paced sources, block for a plain file
    path = tmp_path / "live.toml"
    path.write_text('timeout = 2\nreconnect = 3\nrealtime = true\n[input_opts]\nfflags = "nobuffer"\n')
    cfg = build_config(load_toml(path), {"input": "in.mp4", "input_opts": {"probesize": "32"}})
    assert (cfg.timeout, cfg.reconnect, cfg.realtime) == (2, 3, True)
    assert cfg.input_opts == {"fflags": "nobuffer", "probesize": "32"}
    for bad in ({"drop_policy": "drop-all"}, {"timeout": 0}, {"reconnect": -1}, {"latency_budget": -5}):
        with pytest.raises(ConfigError):
            RunConfig(**bad)
    with pytest.raises(ConfigError, match="needs -o"):
        RunConfig(input="udp://0.0.0.0:5000").output_path()


def test_a_plain_file_is_never_dropped_from(tmp_path):
    """An explicit drop policy applies to live and paced sources; a file run keeps every frame."""
    from utils import read_json, run_cli
    from pipeline.sample import make_clip

    clip = make_clip(tmp_path / "in.mp4", width=160, height=96, frames=24, audio=False)
    out, stats = tmp_path / "out.mp4", tmp_path / "s.json"
    proc = run_cli("run", str(clip), "-o", str(out), "--device", "cpu", "-q", "--drop-policy", "drop-newest",
                   "--filters", "bilateral=sigma_s=3", "--stats-json", str(stats))
    assert proc.returncode == 0, proc.stderr
    assert "applies to live or --realtime sources" in proc.stderr
    d = read_json(stats)
    assert d["frames_in"] == d["frames_out"] == 24


@pytest.mark.parametrize("in_flight, rate, depth", [
    (4, Fraction(30), 8),  # a quarter of a second at 30 fps
    (4, Fraction(60000, 1001), 15),
    (4, 25.0, 7),
    (12, Fraction(30), 12),  # never fewer than the frames in flight
    (1, Fraction(1), 2),  # nor fewer than two
    (4, Fraction(1000), MAX_QUEUE),  # a rate of thousands does not buy thousands of buffers
    (4, None, 8), (4, 0, 8), (4, float("nan"), 8), (4, float("inf"), 8), (4, -30, 8),  # unknown: 30 fps
])
def test_a_live_streams_queues_hold_a_quarter_second_of_its_video(in_flight, rate, depth):
    assert queue_depth(in_flight, rate) == depth


def test_waiting_for_workers_survives_one_that_never_started_and_an_interrupt(restore_signals):
    """A Ctrl-C while waiting leaves each worker's state true (Thread.join can mark a running thread stopped)."""
    import _thread
    import signal

    from pipeline.channels import Worker, wait_for_all

    signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own, whatever a test before installed
    release = threading.Event()
    running = Worker(lambda: release.wait(10), name="pipeline-test-running")  # bounded, should no Ctrl-C come
    never = Worker(lambda: None, name="pipeline-test-never")
    running.start()
    threading.Timer(0.2, _thread.interrupt_main).start()
    with pytest.raises(KeyboardInterrupt):
        wait_for_all([running, never], poll=0.05)
    assert running.is_alive() and not running.ended.is_set()
    release.set()
    wait_for_all([running, never], poll=0.05)
    assert not running.is_alive()


def test_a_reconnect_back_off_longer_than_the_watchdogs_limit_is_waited_out(monkeypatch):
    """The watchdog took the reader's back-off (up to 8 s) for a stuck read once it passed twice the timeout
    and a grace: --reconnect 8 --timeout 1 ended at the 5th attempt's wait, blaming the device or driver."""
    from pipeline import live
    from pipeline.decode import DecodedFrame
    from pipeline.errors import InputError, SourceStalled
    from pipeline.video import FrameMeta

    monkeypatch.setattr(live, "BACKOFF_S", (0.05, 0.8))  # the second wait is past the limit below
    monkeypatch.setattr(live, "WATCHDOG_GRACE_S", 0.1)  # the limit: 2 * 0.1 + 0.1 s

    class Flaky:
        live, path = True, "tcp://camera"
        connections = refusals = 0

        def entries(self):
            for i in range(3):
                yield DecodedFrame(object(), FrameMeta(index=i, pts=i, time_base=None))
            if self.connections == 0:
                raise SourceStalled("tcp://camera: no data for 0.1 s")

        def reopen(self):
            if self.refusals == 0:
                self.refusals += 1
                raise InputError("tcp://camera: connection refused")
            self.connections += 1

        def close(self):
            pass

    feed = live.Feed(Flaky(), size=8, policy="block", abort=threading.Event(), paced=False, limit=None,
                     reconnect=3, timeout=0.1, on_drop=lambda entry: None)
    feed.start()
    try:
        got = list(feed.entries(threading.Event()))
    finally:
        feed.stop()
    assert len(got) == 6 and feed.reconnects == 1


def test_a_thread_whose_start_was_interrupted_is_still_waited_for():
    """wait_for_all skipped a thread whose ident was not set yet: a Ctrl-C inside its start() left it running
    unseen while the run was torn down under it."""
    import time

    from pipeline.channels import Worker, wait_for_all

    never = Worker(lambda: None, name="pipeline-never")
    assert never.never_ran()
    ran = []
    late = Worker(lambda: (time.sleep(0.2), ran.append(True)), name="pipeline-late")
    late.launched = True  # as start() leaves it when interrupted before the thread has run a line
    threading.Timer(0.1, lambda: threading.Thread.start(late)).start()
    wait_for_all([never, late])
    assert ran == [True]
