"""``pipeline batch`` before any file runs: inputs, outputs, workers, schedulers, resume markers, exit codes
(no cluster is needed but for the scheduler checks)."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
from batch_helpers import CHAIN, good, refused

from pipeline.batch import BatchReport, FileResult, StopRequest, run_batch
from pipeline.batch import cluster
from pipeline.batch.cluster import plan_workers
from pipeline.batch.inputs import expand_inputs, outputs_for
from pipeline.batch.resume import options_hash
from pipeline.config import RunConfig
from pipeline.errors import ConfigError, GPUError

distributed = pytest.importorskip("distributed")


# --- inputs, outputs, workers, resume markers (no cluster) -----------------------------------------------


def test_inputs_from_paths_globs_and_lists_in_order_each_once(clips, tmp_path, monkeypatch):
    monkeypatch.chdir(clips)
    listing = tmp_path / "list.txt"
    listing.write_text("# the second clip, then a glob\n\nclip1.mkv\n  clip*.mkv  \n")
    got = expand_inputs(["clip2.mkv", f"@{listing}", "missing.mkv"])
    assert got == [Path("clip2.mkv"), Path("clip1.mkv"), Path("clip0.mkv"), Path("missing.mkv")]


def test_a_link_to_an_input_already_named_runs_once_and_says_so(clips, tmp_path, caplog):
    link = tmp_path / "again.mkv"
    link.symlink_to(clips / "clip0.mkv")
    with caplog.at_level("INFO", logger="pipeline"):
        got = expand_inputs([str(clips / "clip0.mkv"), str(link), str(clips / "clip0.mkv")])
    assert got == [clips / "clip0.mkv"]
    assert [r.getMessage() for r in caplog.records] == [f"{link}: the same file as {clips / 'clip0.mkv'}; run once"]


def test_a_hard_link_to_an_input_already_named_runs_once(clips, tmp_path):
    link = tmp_path / "hard.mkv"
    os.link(clips / "clip0.mkv", link)
    assert expand_inputs([str(clips / "clip0.mkv"), str(link)]) == [clips / "clip0.mkv"]


def test_a_missing_name_with_brackets_is_a_name_not_a_pattern(tmp_path):
    """It fails alone as a missing input (exit 3), not the whole batch as a pattern matching nothing."""
    assert expand_inputs([str(tmp_path / "clip[1].mp4")]) == [tmp_path / "clip[1].mp4"]


def test_an_output_never_replaces_an_input_list_even_with_y(clips, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    listing = tmp_path / "clip0_processed.mkv"  # the name the batch's output of clip0 would have
    listing.write_text(f"{clips / 'clip0.mkv'}\n")
    message = refused(capsys, 2, f"@{listing.name}", "-o", ".", "-y")
    assert "would replace the input list" in message
    assert listing.read_text() == f"{clips / 'clip0.mkv'}\n"


def test_inputs_refused_a_glob_matching_nothing_a_missing_list_or_nothing(tmp_path):
    with pytest.raises(ConfigError, match="no file matches"):
        expand_inputs([str(tmp_path / "*.mp4")])
    with pytest.raises(ConfigError, match="input list: file not found"):
        expand_inputs([f"@{tmp_path / 'none.txt'}"])
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    with pytest.raises(ConfigError, match="no input files"):
        expand_inputs([f"@{empty}"])


def test_an_input_list_that_is_a_device_or_too_large_is_refused(clips, tmp_path, monkeypatch):
    from pipeline.batch import inputs

    with pytest.raises(ConfigError, match="/dev/zero is a character device; only a regular file or a pipe"):
        expand_inputs(["@/dev/zero"])
    monkeypatch.setattr(inputs, "LIST_LIMIT", 1000)
    big = tmp_path / "big.txt"
    big.write_text(f"{clips / 'clip0.mkv'}\n" * 100)
    with pytest.raises(ConfigError, match="big.txt is .* bytes; the limit is 1000 bytes"):
        expand_inputs([f"@{big}"])
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"caf\xe9.mkv\n")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        expand_inputs([f"@{latin}"])
    nul = tmp_path / "nul.txt"
    nul.write_bytes(b"a.mkv\x00b.mkv\n")
    with pytest.raises(ConfigError, match="the entry 'a.mkv.x00b.mkv' holds a NUL character"):
        expand_inputs([f"@{nul}"])
    other = tmp_path / "other.txt"  # a file URL of another host: refused naming the list it is in
    other.write_text("file://otherhost/a.mkv\n")
    with pytest.raises(ConfigError, match="input list: .*other.txt: file://otherhost/a.mkv: a file URL names"):
        expand_inputs([f"@{other}"])


def test_an_input_list_from_a_pipe_is_read_up_to_the_limit(clips, tmp_path, monkeypatch):
    import threading

    from pipeline.batch import inputs

    monkeypatch.setattr(inputs, "LIST_LIMIT", 1000)
    fifo = tmp_path / "list.fifo"
    for body, size_ok in ((f"{clips / 'clip0.mkv'}\n{clips / 'clip1.mkv'}\n", True), ("x" * 5000, False)):
        os.mkfifo(fifo)
        writer = threading.Thread(target=lambda: _write_ignoring_a_closed_reader(fifo, body))
        writer.start()
        try:
            if size_ok:
                assert expand_inputs([f"@{fifo}"]) == [clips / "clip0.mkv", clips / "clip1.mkv"]
            else:
                with pytest.raises(ConfigError, match="larger than the limit of 1000 bytes"):
                    expand_inputs([f"@{fifo}"])
        finally:
            writer.join(10)
            fifo.unlink()


def _write_ignoring_a_closed_reader(path: Path, body: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(body)
    except BrokenPipeError:  # the reader stopped at its limit
        pass


def test_two_inputs_writing_one_output_are_refused(tmp_path):
    assert outputs_for([Path("a/x.mp4")], tmp_path, "_p") == [tmp_path / "x_p.mp4"]
    with pytest.raises(ConfigError, match="would both write"):
        outputs_for([Path("a/x.mp4"), Path("b/x.mp4")], tmp_path, "_p")


@pytest.mark.parametrize("suffix", ["/../../x", "_p/", "a\0b"])
def test_a_suffix_that_is_not_part_of_a_name_is_refused(tmp_path, suffix):
    with pytest.raises(ConfigError, match="--suffix .*: a path separator or a NUL"):
        outputs_for([Path("a/x.mp4")], tmp_path / "out", suffix)


def test_an_output_that_is_an_input_is_refused(tmp_path):
    """``-o`` the inputs' own directory: a batch run again picks up its outputs as inputs."""
    first, done = tmp_path / "x.mp4", tmp_path / "x_p.mp4"
    with pytest.raises(ConfigError, match="x.mp4: its output .*x_p.mp4 is an input too"):
        outputs_for([first, done], tmp_path, "_p")
    with pytest.raises(ConfigError, match="is the input itself"):
        outputs_for([first], tmp_path, "")
    assert outputs_for([first, done], tmp_path / "out", "_p") == [tmp_path / "out" / "x_p.mp4",
                                                                   tmp_path / "out" / "x_p_p.mp4"]


def test_a_second_batch_into_a_directory_in_use_is_refused(clips, tmp_path):
    """Its runs would remove the first batch's resume markers: refused before any work."""
    from pipeline.batch.inputs import claim_directory

    with claim_directory(tmp_path):
        with pytest.raises(ConfigError, match="another batch is writing into this directory"):
            run_batch([str(good(clips)[0])], tmp_path, device="cpu", workers=1, processes=False)
        with claim_directory(None):  # -o null: nothing to hold
            pass
    assert list(tmp_path.iterdir()) == []
    with claim_directory(tmp_path):  # released with the first
        pass


def test_workers_one_per_gpu_pinned_by_environment_or_cpu(monkeypatch):
    monkeypatch.setattr(cluster, "usable_cores", lambda: 8)
    with monkeypatch.context() as m:
        m.setattr(cluster, "visible_gpus", lambda: ["0", "1"])
        specs = plan_workers("0,1,1", None, "auto")
        assert [(s.name, s.env) for s in specs] == [("gpu0", {"CUDA_VISIBLE_DEVICES": "0"}),
                                                    ("gpu1", {"CUDA_VISIBLE_DEVICES": "1"}),
                                                    ("gpu1.1", {"CUDA_VISIBLE_DEVICES": "1"})]
    cpu = plan_workers(None, 3, "auto")
    assert [s.name for s in cpu] == ["cpu0", "cpu1", "cpu2"] and all(s.env == {"CUDA_VISIBLE_DEVICES": ""}
                                                                      for s in cpu)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU visible: CPU workers by default
    assert all(s.gpu is None for s in plan_workers(None, None, "auto"))
    with pytest.raises(GPUError):
        plan_workers("all", None, "auto")
    with pytest.raises(ConfigError):
        plan_workers("0", 2, "auto")
    with pytest.raises(ConfigError):
        plan_workers(None, 2, "cuda")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in plan_workers("all", None, "auto")] == ["3", "5"]


@pytest.mark.parametrize("kwargs, words", [
    ({"inputs": 5}, "run_batch takes a list of inputs, not 5"),
    ({"inputs": [None]}, "None among the inputs is not a path"),
    ({"output": 5}, "Invalid output (5)"),
    ({"output": ""}, "Invalid output ('')"),
    ({"suffix": None}, "Invalid suffix (None)"),
    ({"suffix": ["_l"]}, "Invalid suffix (['_l'])"),
    ({"gpus": 0}, "Invalid gpus (0)"),
    ({"dashboard": 3}, "Invalid dashboard (3)"),
    ({"processes": "no"}, "Invalid processes ('no')"),
    ({"on_result": 3}, "Invalid on_result (3)"),
    ({"stop": 3}, "Invalid stop (3)"),
])
def test_run_batch_refuses_arguments_of_the_wrong_type_before_any_work(clips, tmp_path, kwargs, words):
    """They were a bare TypeError or AttributeError (some after every file had run, the report lost), or
    taken: a list as the suffix named files a['_l'].mp4, the number 5 as the output made a directory ./5."""
    args = {"inputs": [str(clips / "clip0.mkv")], "output": str(tmp_path / "out"), "device": "cpu", **kwargs}
    with pytest.raises(ConfigError, match=re.escape(words)):
        run_batch(args.pop("inputs"), args.pop("output"), **args)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bad", [0, -1, float("nan"), 2.5, "2", True, None.__class__])
def test_a_worker_count_that_is_not_a_whole_number_is_refused_saying_so(monkeypatch, bad):
    """From the Python API any value arrives: NaN and "2" were a bare TypeError, 2.5 a count of cores."""
    monkeypatch.setattr(cluster, "usable_cores", lambda: 8)
    with pytest.raises(ConfigError, match=r"Invalid --workers \(.*\)\. Supported values are integers >= 1"):
        plan_workers(None, bad, "cpu")


def test_a_numpy_worker_count_is_a_count(monkeypatch):
    import numpy as np

    monkeypatch.setattr(cluster, "usable_cores", lambda: 8)
    assert [s.name for s in plan_workers(None, np.int64(2), "cpu")] == ["cpu0", "cpu1"]


def test_chosen_gpus_are_checked_and_device_cuda_n_is_that_gpus_worker(monkeypatch):
    monkeypatch.setattr(cluster, "usable_cores", lambda: 8)
    monkeypatch.setattr(cluster, "visible_gpus", lambda: ["0", "1"])
    for bad in ("x", "0,", "1.5", "-1"):
        with pytest.raises(ConfigError, match="Invalid --gpus"):
            plan_workers(bad, None, "auto")
    with pytest.raises(GPUError, match=r"--gpus 0,2: no GPU 2 here; the GPUs are 0, 1"):
        plan_workers("0,2", None, "auto")
    with pytest.raises(GPUError, match=r"--device cuda:7: no such GPU here; the GPUs are cuda:0 to cuda:1"):
        plan_workers(None, None, "cuda:7")
    assert [(s.name, s.env) for s in plan_workers(None, None, "cuda:1")] == [("gpu1", {"CUDA_VISIBLE_DEVICES": "1"})]
    with pytest.raises(ConfigError, match="choose one"):
        plan_workers("0", None, "cuda:1")
    monkeypatch.setattr(cluster, "gpu_uuids", lambda: {"GPU-aaaa", "GPU-bbbb"})
    assert [s.env for s in plan_workers("GPU-bbbb", None, "auto")] == [{"CUDA_VISIBLE_DEVICES": "GPU-bbbb"}]
    with pytest.raises(GPUError, match="no GPU GPU-cccc here"):
        plan_workers("GPU-cccc", None, "auto")
    monkeypatch.setattr(cluster, "visible_gpus", lambda: ["2", "3"])  # CUDA_VISIBLE_DEVICES=2,3
    assert [s.env for s in plan_workers(None, None, "cuda:0")] == [{"CUDA_VISIBLE_DEVICES": "2"}]  # as run counts
    monkeypatch.setattr(cluster, "visible_gpus", lambda: [])
    with pytest.raises(GPUError, match="--gpus 0: no GPU visible"):
        plan_workers("0", None, "auto")
    with pytest.raises(GPUError, match="none is visible"):
        plan_workers(None, None, "cuda:0")


def test_at_most_one_worker_per_core_or_one_per_gpu(monkeypatch):
    monkeypatch.setattr(cluster, "usable_cores", lambda: 4)
    monkeypatch.setattr(cluster, "visible_gpus", lambda: [str(i) for i in range(6)])
    assert len(plan_workers(None, 4, "cpu")) == 4
    for gpus, workers in ((None, 5), (None, 10**12), ("0,0,0,0,1", None)):
        with pytest.raises(ConfigError, match="than the 4 cores here; at most 4"):
            plan_workers(gpus, workers, "auto")
    assert len(plan_workers(",".join(map(str, range(6))), None, "auto")) == 6  # one per GPU: always
    monkeypatch.setattr(cluster, "usable_cores", lambda: 64)
    assert len(plan_workers(None, None, "cpu")) == 32


@pytest.mark.parametrize("address", ["bogus", "tcp://head", "head:port", "tcp://:8786", "tcp://head:0",
                                     "tcp://head:65536", "smoke://head:8786", " tcp://head:8786"])
def test_a_scheduler_address_dask_cannot_use_is_refused_up_front(address):
    with pytest.raises(ConfigError, match="not a scheduler address"):
        cluster.check_scheduler_address(address)


def test_scheduler_addresses_dask_takes_pass(scheduler):
    for address in (scheduler, scheduler.removeprefix("tcp://"), "tls://head:8786", "tcp://[::1]:8786",
                    "inproc://10.0.0.1/1234/1"):
        cluster.check_scheduler_address(address)


def test_a_scheduler_is_reached_from_a_thread_running_an_event_loop(scheduler):
    """As in a notebook: the greeting is read on a loop of its own."""
    import asyncio

    async def in_a_loop():
        cluster._greeted(scheduler)

    asyncio.run(in_a_loop())


@pytest.mark.parametrize("server", ["silent", "chatty"])
def test_a_scheduler_address_where_no_scheduler_answers_is_refused_in_bounded_time(server, monkeypatch):
    """A port that accepts and never answers (Dask's own handshake would wait on it for good), and one
    that answers something else."""
    import socket
    import threading

    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1)
    listener = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def serve():
        conn, _ = listener.accept()
        accepted.append(conn)
        if server == "chatty":
            conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n" * 4)

    threading.Thread(target=serve, daemon=True).start()
    address = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    t0 = time.monotonic()
    try:
        with pytest.raises(ConfigError, match="no Dask scheduler"):
            with cluster.connect([], scheduler=address):
                pass
    finally:
        listener.close()
        for conn in accepted:
            conn.close()
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize("address, error", [("bogus", "not an address"), (":99999", "not an address"),
                                            ("[::1]:8787", "not an address"), ("nosuch.invalid:8787", "unknown host")])
def test_a_dashboard_address_the_cluster_cannot_serve_on_is_refused_up_front(address, error, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "bokeh" else real(name, *a))
    with pytest.raises(ConfigError, match=error):
        cluster.check_dashboard_address(address)
    for fine in ("8787", ":8787", "127.0.0.1:0", "localhost:8787"):
        cluster.check_dashboard_address(fine)


def test_a_dashboard_without_bokeh_is_refused_up_front(monkeypatch):
    """Dask served none and said so only in a log the batch keeps quiet: exit 0, no dashboard, no word."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bokeh" else real(name, *a))
    with pytest.raises(ConfigError, match="--dashboard :8787: Dask's dashboard needs bokeh"):
        cluster.check_dashboard_address(":8787")


def test_an_output_directory_that_is_a_file_is_refused(clips, tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.write_text("a file")
    assert "taken: not a directory" in refused(capsys, 4, str(clips / "clip0.mkv"), "-o", str(taken))
    assert taken.read_text() == "a file"


def test_a_config_with_streams_is_refused_not_half_used(clips, tmp_path, capsys):
    config = tmp_path / "streams.toml"
    config.write_text(f'[[streams]]\ninput = "{clips / "clip0.mkv"}"\n[[streams]]\ninput = "{clips / "clip1.mkv"}"\n')
    message = refused(capsys, 2, str(clips / "clip0.mkv"), "-o", "null", "--config", str(config))
    assert "[[streams]] are for `pipeline run --config`" in message


def test_a_configs_output_is_refused_not_ignored(clips, tmp_path, capsys):
    """The batch wrote DIR/<stem>_processed<ext> and said nothing of the output the config names."""
    config = tmp_path / "one.toml"
    config.write_text('output = "wanted.mkv"\n')
    message = refused(capsys, 2, str(clips / "clip0.mkv"), "-o", str(tmp_path / "out"), "--config", str(config))
    assert "a batch writes DIR/<stem><suffix><ext> (-o DIR)" in message and not (tmp_path / "out").exists()


@pytest.mark.parametrize("suffix", ["_%03d", "_processed"])
def test_pictures_as_a_batchs_outputs_are_refused_before_any_work(clips, tmp_path, capsys, suffix):
    """-f image2 made each output pictures: the frames were written, then the resume marker could not vouch
    for them (exit 4, the frames left), or one picture could not hold every frame (exit 2 per file)."""
    out = tmp_path / "out"
    message = refused(capsys, 2, str(clips / "clip0.mkv"), "-o", str(out), "--suffix", suffix, "-f", "image2")
    assert "-f image2: a batch writes one file per input" in message
    assert not out.exists()


def test_a_scheduler_without_workers_is_said_and_the_batch_can_be_stopped(clips, caplog):
    import threading

    stop = StopRequest()
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None) as empty, \
            caplog.at_level("WARNING", logger="pipeline"):
        timer = threading.Timer(1.0, stop)
        timer.start()
        report = run_batch([str(good(clips)[0])], "null", device="cpu", scheduler=empty.scheduler_address, stop=stop)
        timer.cancel()
    assert [r.status for r in report.results] == ["cancelled"] and report.exit_code == 130
    assert any("no workers yet" in r.getMessage() for r in caplog.records)


def test_cli_refuses_a_bad_scheduler_and_local_options_with_one(clips, capsys):
    clip = str(clips / "clip0.mkv")
    assert "not a scheduler address" in refused(capsys, 2, clip, "-o", "null", "--scheduler", "bogus")
    assert "--workers with --scheduler" in refused(capsys, 2, clip, "-o", "null", "--scheduler", "head:8786",
                                                   "--workers", "2")


def test_options_hash_counts_what_shapes_the_output_only(tmp_path):
    base = RunConfig(filters=CHAIN)
    assert options_hash(base) == options_hash(base.replace(ring_size=16, alloc="naive", quiet=True))
    assert options_hash(base) != options_hash(base.replace(filters="gblur=sigma=2"))
    assert options_hash(base) != options_hash(base.replace(encoder_opts={"crf": "18"}))
    plugin = tmp_path / "p.py"
    plugin.write_text("# one\n")
    with_plugin = options_hash(base.replace(plugins=(str(plugin),)))
    plugin.write_text("# two\n")
    assert options_hash(base.replace(plugins=(str(plugin),))) != with_plugin


def test_options_hash_counts_a_luts_contents_and_not_a_live_sources_or_the_memorys_settings(tmp_path):
    lut = tmp_path / "look.cube"
    lut.write_text("LUT_3D_SIZE 2\n" + "".join(f"{r} {g} {b}\n" for b in (0, 1) for g in (0, 1) for r in (0, 1)))
    graded = RunConfig(filters=f"lut3d=file={lut}")
    before = options_hash(graded)
    lut.write_text("LUT_3D_SIZE 2\n" + "".join(f"{1 - r} {g} {b}\n" for b in (0, 1) for g in (0, 1)
                                                for r in (0, 1)))
    assert options_hash(graded) != before  # the same path, another grade: the outputs are redone
    same = graded.replace(pinned_cap_mib=64, write_combined=True, timeout=5.0, reconnect=3)
    assert options_hash(same) == options_hash(graded)


@pytest.mark.parametrize("chain, message", [("nosuch=1", "unknown filter 'nosuch'"),
                                            ("lut3d=file=missing.cube", "file not found")])
def test_a_bad_filter_chain_is_refused_before_any_work(clips, tmp_path, capsys, chain, message):
    out = tmp_path / "out"
    assert message in refused(capsys, 2, str(clips / "clip0.mkv"), "-o", str(out), "--filters", chain)
    assert not out.exists()  # no directory made, no cluster started


def test_exit_code_is_the_largest_files_or_the_signals():
    results = [FileResult(i, f"{i}.mp4", None, status=s, exit_code=c)
               for i, (s, c) in enumerate([("done", 0), ("failed", 3), ("failed", 5), ("skipped", 0)])]
    assert BatchReport(results).exit_code == 5
    assert BatchReport(results[:1]).exit_code == 0
    assert BatchReport(results, signum=signal.SIGINT).exit_code == 130


class _RecordingClient:
    """A cluster of one single-threaded worker, as the collector sees it: files end as they are submitted;
    the files in ``killed`` end with their worker's death."""

    def __init__(self, killed=()):
        self.calls: list[str] = []
        self.killed = set(killed)

    def register_plugin(self, plugin, name):
        pass

    def run(self, function, *args):
        return {"tcp://w": {"name": "w", "host": "elsewhere", "time": time.time(), "cuda_visible_devices": ""}}

    def nthreads(self):
        return {"tcp://w": 1}

    def submit(self, function, job, key, pure):
        self.calls.append(f"submit {job.index}")
        return _EndedFuture(key, job, self.calls, job.index in self.killed)


class KilledWorker(Exception):
    """Named as Dask's is: what a future raises whose worker died during its task."""


class _EndedFuture:
    def __init__(self, key, job, calls, killed):
        self.key, self.job, self.calls, self.killed = key, job, calls, killed

    def add_done_callback(self, callback):
        callback(self)

    def result(self):
        if self.killed:
            raise KilledWorker(self.key)
        return FileResult(self.job.index, self.job.input, self.job.output, status="done")

    def release(self):
        self.calls.append(f"release {self.job.index}")


def test_the_next_file_is_submitted_before_the_last_ones_result_is_released(tmp_path):
    """Dask's client holds a message sent within 10 ms of the one before (it batches them): submitted after
    the release, a file waited that long for its worker (on the H200, 11-13 ms from submission to start
    against 3-5 ms submitted first)."""
    from pipeline.batch.jobs import Job
    from pipeline.batch.runner import Collector

    jobs = [Job(i, "b", str(tmp_path / f"{i}.mp4"), None, RunConfig(), "h") for i in range(3)]
    report = BatchReport([FileResult(j.index, j.input, j.output) for j in jobs])
    client = _RecordingClient(killed={1})
    Collector(client, report, StopRequest(), lambda result: None).run(jobs)
    assert client.calls == ["submit 0", "submit 1", "release 0", "submit 2", "release 1", "release 2"]
    assert [r.status for r in report.results] == ["done", "failed", "done"]
    assert "its worker process died while processing it" in report.results[1].error
    # A result is held before the next file is submitted: the next submission is not the batch layer's end gap.
    for held, next_one in zip(report.results, report.results[1:]):
        assert held.received <= next_one.submitted


def test_batch_help_offers_no_option_batch_refuses():
    """--stats-json and --preview were listed in batch --help, and refused when given."""
    from pipeline.cli_parser import build_parser

    help_text = build_parser("batch")._subparsers._group_actions[0].choices["batch"].format_help()
    offered = re.findall(r"^\s+(--[\w-]+)", help_text, re.MULTILINE)
    assert "--stats-json" not in offered and "--preview" not in offered and "--nvtx" in offered
    assert "--json PATH" in help_text
