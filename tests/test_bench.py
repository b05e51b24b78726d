"""pipeline bench: CLI contract without a GPU, report rendering on canned results, and a real run on the GPU."""

from __future__ import annotations


import pytest
from rich.console import Console

from utils import ROOT, read_json, run_cli
from pipeline.bench import report

ROWS = [
    {"strategy": "pool", "fps": 1500.0, "x_pooled": 1.0, "latency_p50_ms": 1.1, "latency_p99_ms": 2.0,
     "device_allocs_per_frame": 0.0, "h2d_gbps": 18.6, "latency_ms": [1.0, 1.1, 1.2], "fps_runs": [1500.0]},
    {"strategy": "naive", "fps": 300.0, "x_pooled": 0.2, "latency_p50_ms": 5.0, "latency_p99_ms": 9.0,
     "device_allocs_per_frame": 6.0, "h2d_gbps": 3.7, "latency_ms": [4.0, 5.0, 9.0], "fps_runs": [300.0]},
]
RESULT = {
    "input": "clip.mp4", "size": [1920, 1080], "filters": "gblur=sigma=1", "device": {"name": "Test GPU"},
    "scopes": {"gpu": ROWS, "e2e": ROWS},
    "peers": {"transcode": {"label": "plain transcode", "fps": 340.0}, "ffmpeg_filters": {"label": "FFmpeg", "skipped": "no equivalent"}},
    "bandwidth": [{"direction": "H2D", "memory": "pinned", "gbps": 50.0}],
}


def test_render_tables_name_every_strategy_and_peer():
    console = Console(record=True, width=160)
    report.render(RESULT, console)
    text = console.export_text()
    for word in ("pool", "naive", "1500.0", "plain transcode", "no equivalent", "Test GPU", "x pooled"):
        assert word in text


def test_chart_is_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = report.write_chart(RESULT, tmp_path / "chart.png", Console(file=None))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_json_round_trips(tmp_path):
    report.write_json(RESULT, tmp_path / "r.json")
    assert read_json(tmp_path / "r.json") == RESULT


def test_without_gpu_bench_exits_5_with_one_line(tmp_path):
    from utils import gpu_available

    if gpu_available():
        pytest.skip("a GPU is present")
    proc = run_cli("bench", "samples/sample.mp4", "--json", tmp_path / "x.json", "--no-chart")
    assert proc.returncode == 5
    assert proc.stderr.count("\n") == 1 and "needs a CUDA GPU" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args, said", [(("--filters", "gblur=sigma=nan"), "sigma must be a finite number"),
                                        (("--peer-filters", "nosuch"), "unknown filter 'nosuch'"),
                                        (("--warmup", "-1"), "Invalid --warmup (-1)")])
def test_a_bad_setting_is_a_usage_error_before_the_gpu_is_looked_for(tmp_path, args, said):
    # --peer-filters and --warmup were looked at only on a GPU: exit 5 on a machine without one
    proc = run_cli("bench", "samples/sample.mp4", *args, "--json", tmp_path / "x.json", "--no-chart")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert said in proc.stderr and not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("kind", ["missing", "directory", "fifo", "url"])
def test_bench_input_that_is_not_a_regular_file_exits_3_with_one_line(tmp_path, kind):
    """Checked before the GPU and without opening it: a FIFO with no writer would block the first reader.
    A file:// URL is its file, as for run (it was "no such file" whether the file was there or not)."""
    import os

    path = tmp_path / "in.mp4"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    proc = run_cli("bench", path.as_uri() if kind == "url" else path, "--json", tmp_path / "x.json", timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.count("\n") == 1 and str(path) in proc.stderr and "Traceback" not in proc.stderr
    assert "file:" not in proc.stderr and not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("name", ["-", "pipe:0"])
def test_bench_of_a_pipe_says_it_needs_a_regular_file(tmp_path, name):
    """"-: no such file": the name was looked for as a file."""
    proc = run_cli("bench", name, "--json", tmp_path / "x.json", timeout=60)
    assert proc.returncode == 3 and proc.stderr == (f"pipeline: error: {name}: a pipe; pipeline bench reads its "
                                                    "input several times and needs a regular file\n"), proc.stderr


def test_bad_strategy_is_a_usage_error():
    proc = run_cli("bench", "x.mp4", "--strategies", "pool,bogus")
    assert proc.returncode == 2 and "bogus" in proc.stderr


@pytest.mark.gpu
def test_bench_runs_every_strategy_and_counts_allocations(tmp_path):
    """Consistency, not speed: frame counts and allocation counters per strategy."""
    out = tmp_path / "b.json"
    proc = run_cli("bench", ROOT / "samples" / "sample.mp4", "--scope", "gpu,e2e", "--repeats", "1", "--frames", "24",
                   "--warmup", "4", "--json", out, "--chart", tmp_path / "b.png", timeout=240)
    assert proc.returncode == 0, proc.stderr
    result = read_json(out)
    strategies = {"pool", "naive", "cupy", "async", "pinned-per-frame"}
    for scope, names in (("gpu", strategies), ("e2e", strategies | {f"{s}, nvdec" for s in strategies})):
        rows = {r["strategy"]: r for r in result["scopes"][scope]}
        assert set(rows) == names
        assert rows["pool"]["device_allocs_per_frame"] == 0
        assert rows["naive"]["device_allocs_per_frame"] >= 2
        assert rows["pool"]["x_pooled"] == 1.0
        assert all(r["fps"] > 0 for r in rows.values())
    assert {r["strategy"]: r for r in result["scopes"]["e2e"]}["naive, nvdec"]["x_pooled"] < 1.5
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"
    assert result["peers"]["transcode"]["frames"] > 0


@pytest.mark.gpu
def test_bench_run_scope_pairs_whole_processes(tmp_path):
    """The run scope: one `pipeline run` process per row, pooled against naive, per decoder and output."""
    out = tmp_path / "b.json"
    proc = run_cli("bench", ROOT / "samples" / "sample.mp4", "--scope", "run", "--repeats", "1", "--frames", "24",
                   "--no-peers", "--no-chart", "--json", out, timeout=240)
    assert proc.returncode == 0, proc.stderr
    run = read_json(out)["run"]
    assert {(r["decode"], r["alloc"], r["output"]) for r in run} == {
        (d, a, o) for d in ("cpu", "nvdec") for a in ("pool", "naive") for o in ("null", "file")}
    for r in run:
        assert "error" not in r, r
        assert r["process_fps"] > 0 and r["ttff_ms"] > 0
        assert (r["allocs_per_frame"] == 0) == (r["alloc"] == "pool")
        assert ("x_naive" in r) == (r["alloc"] == "pool")


def test_a_script_report_has_its_date_and_command_and_is_written_both_ways(tmp_path, capsys):
    from pipeline.bench.report import script_run, write_script_report

    head = script_run("bench_x.py", ["--seconds", "4"])
    assert head["command"] == "python scripts/bench_x.py --seconds 4" and head["date"].endswith("+00:00")
    write_script_report(tmp_path, "x", {**head, "rows": [1]}, "| a |\n")
    assert read_json(tmp_path / "x.json")["rows"] == [1]
    assert (tmp_path / "x.md").read_text() == "| a |\n" and "| a |" in capsys.readouterr().out


def test_bench_streams_finds_the_decoders_gaps_on_the_trials_clock(monkeypatch):
    import importlib

    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    bench_streams = importlib.import_module("bench_streams")
    streams = [{"started_at": 1000.5, "per_frame": {"decoded": [0.0, 33.0, 66.0, 250.0, 283.0, None, 316.0]}},
               {"started_at": 1000.4, "per_frame": {"decoded": [0.0, 33.0, 200.0, 233.0]}},
               {"started_at": 1000.4, "per_frame": {"decoded": [0.0, 33.0, 66.0]}}]  # no gap
    assert bench_streams.decode_stalls(streams, 1000.0) == [
        {"stream": 0, "at_s": 0.566, "gap_ms": 184.0}, {"stream": 1, "at_s": 0.433, "gap_ms": 167.0}]


def test_bench_streams_counts_a_stream_behind_its_schedule(monkeypatch):
    """A paced stream whose decoder is late drops nothing (its schedule moves): the slip catches it,
    and the first frames' window shows when the decoders opened."""
    import importlib

    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    bench_streams = importlib.import_module("bench_streams")
    on_time = {"started_at": 1000.5, "per_frame": {"pts_s": [0.0, 1 / 30, 2 / 30], "decoded": [100.0, 133.3, 166.7]}}
    # released in another order than their timestamps (a B-frame stream), 0.4 s late in all
    late = {"started_at": 1001.0, "per_frame": {"pts_s": [2 / 30, None, 0.0, 1 / 30],
                                                 "decoded": [466.7, 500.0, 0.0, 33.3]}}
    assert bench_streams.schedule_slip(on_time) == pytest.approx(0.0, abs=1e-3)
    assert bench_streams.schedule_slip(late) == pytest.approx(0.4, abs=1e-3)
    # late at the start only (a stall while the decoders opened), on time from the middle on
    start_late = {"per_frame": {"pts_s": [i / 30 for i in range(6)],
                                "decoded": [0.0, 233.3, 266.7, 300.0, 333.3, 366.7]}}
    assert bench_streams.schedule_slip(start_late) == pytest.approx(0.2, abs=1e-3)
    assert bench_streams.schedule_slip(start_late, since=0.5) == pytest.approx(0.0, abs=1e-3)
    assert bench_streams.schedule_slip(late, since=0.5) == pytest.approx(0.4, abs=1e-3)
    assert bench_streams.schedule_slip({"per_frame": {"pts_s": [0.0], "decoded": [5.0]}}) == 0.0
    assert bench_streams.first_frames([on_time, late], 1000.0) == [0.6, 1.0]
    assert bench_streams.first_frames([{"per_frame": {}}], 1000.0) is None


def test_bench_whole_runs_times_every_row_and_reports_a_missing_peer(tmp_path):
    """scripts/bench_whole_runs.py on its smallest clip: each of our rows runs (the command's own exit and the
    interpreter's, and `pipeline.run` on PEERS.md's clock), and a peer that cannot run (no PyNvVideoCodec or CuPy
    here) is its row's error."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_whole_runs.py"), "--clips", "tiny",
                           "--repeats", "1", "--out-dir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = {r["row"]: r for r in read_json(tmp_path / "whole_runs.json")["clips"]["tiny"]}
    assert set(rows) == {"peer", "ours", "ours, interpreter exit", "ours -o null", "ours -o null, interpreter exit",
                         "peer, from open", "ours, from open"}
    for name, row in rows.items():
        if not name.startswith("peer"):
            assert row["frames"] == 30 and row["whole_fps"] > 0 and row["process_s"] > row["after_run_s"] > -0.05
    assert "error" in rows["peer"] or rows["peer"]["frames"] == 30
    assert "error" in rows["peer, from open"] or rows["peer, from open"]["frames"] == 30
    assert "| ours | 30 |" in (tmp_path / "whole_runs.md").read_text()


def test_bench_warm_runs_alternates_strategies_in_one_process(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_warm_runs.py"), "--clips", "tiny",
                           "--runs", "2", "--device", "cpu", "--decode", "cpu", "--out-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = read_json(tmp_path / "warm_runs.json")["clips"]["tiny"]
    assert [(r["run"], r["alloc"], r["warm"]) for r in result["rows"]] == [
        (1, "pool", False), (1, "naive", True), (2, "naive", True), (2, "pool", True)]  # only the process's first is cold
    assert all(r["frames"] == 30 and 0 < r["run_over_steady"] and r["first_frame_ms"] > 0 for r in result["rows"])
    assert set(result["summary"]) == {"warm_pool_over_naive", "warm_pool_run_over_steady", "warm_naive_run_over_steady"}
    assert "| 2 | pool | 30 |" in (tmp_path / "warm_runs.md").read_text()


def test_a_runs_start_is_in_its_statistics_on_the_wall_clock(tmp_path):
    import time

    from pipeline.stats import RunStats

    stats = RunStats(started=time.perf_counter() - 2.0)
    assert abs(stats.to_dict()["started_at"] - (time.time() - 2.0)) < 0.05
