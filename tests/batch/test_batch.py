"""``pipeline batch`` and ``pipeline.batch.run_batch``: many files on Dask, CPU workers only.

Most tests share one local cluster of two worker processes (``--scheduler`` to it, as a cluster of
several machines is joined); the command-line tests start their own, as ``pipeline batch`` does.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from batch_helpers import CHAIN, FILE_FIELDS, FRAMES, by_name, good, refused
from utils import (ROOT, cli_command, decode, environment, partials, read_json, run_cli, run_command, video_frames,
                   wait_until)

from pipeline import sample as make_sample
from pipeline.batch import BatchReport, FileResult, StopRequest, run_batch
from pipeline.batch import cluster
from pipeline.batch.resume import marker_path, options_hash, why_incomplete
from pipeline.config import RunConfig
from pipeline.errors import SIGNAL_ECHO_S, OutputError

distributed = pytest.importorskip("distributed")


# --- batches on a cluster --------------------------------------------------------------------------------


def test_a_bad_file_fails_alone_and_the_others_are_complete(clips, tmp_path, scheduler):
    out = tmp_path / "out"
    report = run_batch([str(clips / "*.mkv")], out, filters=CHAIN, device="cpu", scheduler=scheduler)
    results = by_name(report)
    assert results["bad.mkv"].status == "failed" and results["bad.mkv"].exit_code == 3
    assert "bad.mkv" in results["bad.mkv"].error
    assert report.exit_code == 3
    for clip in good(clips):
        r = results[clip.name]
        assert (r.status, r.exit_code, r.error, r.frames) == ("done", 0, "", FRAMES)
        assert r.output == str(out / f"{clip.stem}_processed.mkv") and r.gpu == "cpu"
        assert r.worker in {w["name"] for w in report.workers}
        assert len(video_frames(r.output)) == FRAMES and marker_path(Path(r.output)).exists()
    assert not (out / "bad_processed.mkv").exists()
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".done")) == sorted(
        [f"{c.stem}_processed.mkv" for c in good(clips)] + [f".{c.stem}_processed.mkv.done.json" for c in good(clips)])


def test_results_json_has_every_field_and_sane_overhead(clips, tmp_path, scheduler):
    report = run_batch([str(p) for p in good(clips)], tmp_path, filters=CHAIN, device="cpu", scheduler=scheduler)
    path = tmp_path / "results.json"
    report.write_json(path)
    data = read_json(path)
    assert data["batch"]["scheduler"] == scheduler and len(data["batch"]["workers"]) == 2
    totals = data["totals"]
    assert {"files", "done", "skipped", "failed", "interrupted", "cancelled", "frames", "wall_s",
            "files_per_minute", "run_s", "overhead_s", "overhead_fraction", "exit_code"} <= set(totals)
    assert (totals["files"], totals["done"], totals["failed"], totals["exit_code"]) == (3, 3, 0, 0)
    assert totals["frames"] == 3 * FRAMES and totals["files_per_minute"] > 0
    for f in data["files"]:
        assert FILE_FIELDS <= set(f)
        # one clock (the workers' moved onto the client's); a millisecond of slack for that estimate
        assert f["submitted"] <= f["started"] + 1e-3 and f["started"] <= f["ended"] <= f["received"] + 1e-3
        assert f["seconds"] <= f["task_s"] + 1e-4
        assert 0 <= f["start_gap_s"] < 2 and 0 <= f["end_gap_s"] < 2
        assert f["overhead_s"] == pytest.approx(f["start_gap_s"] + f["end_gap_s"] + f["task_s"] - f["seconds"],
                                                abs=1e-4)
        assert f["overhead_fraction"] == pytest.approx(f["overhead_s"] / f["seconds"], rel=1e-2)
    assert totals["overhead_fraction"] == pytest.approx(totals["overhead_s"] / totals["run_s"], rel=1e-2)


def test_resume_skips_complete_outputs_and_refuses_others_without_y(clips, tmp_path, scheduler):
    inputs = [str(p) for p in good(clips)]
    first = run_batch(inputs, tmp_path, filters=CHAIN, device="cpu", scheduler=scheduler)
    assert [r.status for r in first.results] == ["done"] * 3
    # A worker's temporary file, left by a batch stopped at once: its process gone, or still exiting.
    from pipeline.outfile import partial_prefix

    out = Path(first.results[0].output)
    ended = subprocess.Popen(["true"])
    ended.wait()
    stale, live = (out.with_name(f"{partial_prefix(out)}{pid}{out.suffix}") for pid in (ended.pid, 1))
    stale.write_bytes(b"half")
    live.write_bytes(b"half")
    again = run_batch(inputs, tmp_path, filters=CHAIN, device="cpu", scheduler=scheduler, ring_size=4)
    assert [r.status for r in again.results] == ["skipped"] * 3 and again.exit_code == 0
    assert not stale.exists() and live.exists()
    live.unlink()
    other = run_batch(inputs, tmp_path, filters="gblur=sigma=2", device="cpu", scheduler=scheduler)
    assert [(r.status, r.exit_code) for r in other.results] == [("failed", 2)] * 3
    assert all("other options" in r.error and "-y" in r.error for r in other.results)
    redo = run_batch(inputs, tmp_path, filters="gblur=sigma=2", device="cpu", scheduler=scheduler, overwrite=True)
    assert [r.status for r in redo.results] == ["done"] * 3
    assert why_incomplete(good(clips)[0], Path(redo.results[0].output), options_hash(
        RunConfig(filters="gblur=sigma=2", device="cpu", overwrite=True))) is None


def test_a_changed_input_or_output_is_not_complete(clips, tmp_path, scheduler):
    src = tmp_path / "clip.mkv"
    shutil.copy(good(clips)[0], src)
    report = run_batch([src], tmp_path / "out", filters=CHAIN, device="cpu", scheduler=scheduler)
    out, digest = Path(report.results[0].output), options_hash(RunConfig(filters=CHAIN, device="cpu"))
    assert why_incomplete(src, out, digest) is None
    os.utime(src, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert why_incomplete(src, out, digest) == "the input changed since"
    marker_path(out).unlink()
    assert why_incomplete(src, out, digest).startswith("no marker")


@pytest.mark.parametrize("text, why", [("[" * 5_000 + "]" * 5_000, "no marker"), ("{", "no marker"),
                                       ("[1, 2]", "another version"), ('{"version": {"a": [[]]}}', "another version")],
                         ids=["nested", "truncated", "list", "odd-version"])
def test_a_tampered_marker_vouches_for_nothing(tmp_path, monkeypatch, text, why):
    # JSON nested deeper than Python's recursion limit raised RecursionError: an internal error ended the batch.
    import json

    if text.startswith("[["):  # how deep the parser goes depends on the interpreter: make it give up
        def too_deep(*args, **kwargs):
            raise RecursionError("maximum recursion depth exceeded while decoding a JSON array")
        monkeypatch.setattr(json, "loads", too_deep)
    src, out = tmp_path / "in.mkv", tmp_path / "out.mkv"
    src.write_bytes(b"in")
    out.write_bytes(b"out")
    marker_path(out).write_text(text)
    assert why in why_incomplete(src, out, "digest")


@pytest.mark.parametrize("kind", ["fifo", "device", "directory", "huge"])
def test_a_marker_that_is_not_a_small_file_vouches_for_nothing_and_blocks_nothing(tmp_path, kind):
    """Read without blocking and no further than a marker's size (a FIFO put there hung the batch, one
    linked to /dev/zero ran it out of memory); one that cannot be removed is an output error, not a bug."""
    from pipeline.batch.resume import forget
    from pipeline.errors import OutputError

    src, out = tmp_path / "in.mkv", tmp_path / "out.mkv"
    src.write_bytes(b"in")
    out.write_bytes(b"out")
    marker = marker_path(out)
    {"fifo": lambda: os.mkfifo(marker), "device": lambda: marker.symlink_to("/dev/zero"),
     "directory": marker.mkdir, "huge": lambda: marker.write_bytes(b" " * (1 << 20))}[kind]()
    assert why_incomplete(src, out, "digest").startswith("no marker")
    if kind == "directory":
        with pytest.raises(OutputError, match="cannot remove the resume marker"):
            forget(out)
    else:
        forget(out)
        assert not marker.exists() and not marker.is_symlink()


def test_a_marker_that_cannot_be_written_leaves_no_temporary_file(tmp_path, monkeypatch):
    from pipeline.batch import resume

    out = tmp_path / "out.mkv"
    out.write_bytes(b"out")

    def full(self, text):
        Path.write_bytes(self, text[:3].encode())
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError):
        resume.write_marker(out, (2, 3), "digest", 5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.mkv"]


def test_null_output_processes_and_writes_nothing(clips, tmp_path, scheduler, monkeypatch):
    monkeypatch.chdir(tmp_path)
    report = run_batch([str(p) for p in good(clips)], "null", filters=CHAIN, device="cpu", scheduler=scheduler)
    assert [(r.status, r.output, r.frames) for r in report.results] == [("done", None, FRAMES)] * 3
    assert list(tmp_path.iterdir()) == []


def test_relative_paths_mean_the_batch_process_directory_not_the_workers(clips, tmp_path, scheduler,
                                                                         monkeypatch):
    monkeypatch.chdir(clips)  # the workers were started elsewhere
    report = run_batch(["clip*.mkv"], os.path.relpath(tmp_path / "out"), filters=CHAIN, device="cpu",
                       scheduler=scheduler)
    assert [(r.input, r.status) for r in report.results] == [(c.name, "done") for c in good(clips)]
    assert sorted(p.name for p in (tmp_path / "out").glob("*.mkv")) == [f"{c.stem}_processed.mkv" for c in good(clips)]


def test_workers_stay_warm_across_files(clips, tmp_path, scheduler):
    inputs = [str(p) for p in good(clips)]
    run_batch(inputs, "null", filters=CHAIN, device="cpu", scheduler=scheduler)
    report = run_batch(inputs, "null", filters=CHAIN, device="cpu", scheduler=scheduler)
    assert all(r.warm for r in report.results)  # same worker processes: nothing set up again


def test_a_workers_files_share_its_memory_once_it_has_run_one(clips, tmp_path):
    """The worker's first pooled file allocates its arena chunk and host buffers; files of the same size
    after it borrow them (no new allocation, counted), and a naive file reports none of its own here."""
    report = run_batch([str(p) for p in good(clips)], "null", filters=CHAIN, device="cpu", workers=1,
                       processes=False)
    first, *later = sorted(report.results, key=lambda r: r.started)
    assert first.status == "done" and first.device_allocs > 0 and first.pinned_allocs > 0
    assert [(r.status, r.device_allocs, r.pinned_allocs) for r in later] == [("done", 0, 0)] * 2
    naive = run_batch([str(good(clips)[0])], "null", filters=CHAIN, device="cpu", workers=1, processes=False,
                      alloc="naive")
    assert (naive.results[0].status, naive.results[0].device_allocs, naive.results[0].pinned_allocs) == ("done", None, None)


def test_a_workers_memory_is_one_per_gpu_takes_each_files_cap_and_outlives_no_run(monkeypatch):
    """Keyed by backend and GPU; the pinned cap is the current file's (a later batch on a long-lived cluster
    may set another); a worker closing while a file runs (Dask tears plugins down first) leaves it be."""
    import types

    from pipeline.batch import worker

    made, closed = [], []

    class Shared:
        def __init__(self, device):
            self.pinned = types.SimpleNamespace(max_bytes=None)
            made.append(device)

        def close(self):
            closed.append(self)

    monkeypatch.setattr(worker, "SharedMemory", Shared)
    state = worker.WorkerState("w")
    gpu0, gpu1 = (types.SimpleNamespace(name="cuda", device_id=i) for i in (0, 1))
    first = state.memory_for(gpu0, RunConfig(pinned_cap_mib=64))
    assert first.pinned.max_bytes == 64 * 2**20
    assert state.memory_for(gpu0, RunConfig(pinned_cap_mib=4096)) is first and first.pinned.max_bytes == 4096 * 2**20
    assert state.memory_for(gpu1, RunConfig()) is not first and made == ["cuda", "cuda"]
    job = types.SimpleNamespace(batch_id="b", index=0)
    state.begin(job, object())
    state.close_memory()
    assert closed == []  # a file is running: its blocks stay where they are
    state.end()
    state.close_memory()
    assert len(closed) == 2 and state.memory_for(gpu0, RunConfig()) is not first


def test_a_files_own_error_comes_before_its_devices_as_in_pipeline_run(tmp_path):
    """A missing input on a worker whose GPU cannot be used (or can) fails with exit 3, as `pipeline run`
    says it: the file is checked and opened beside the backend's making, not after it."""
    from pipeline.batch import worker
    from pipeline.batch.jobs import Job
    from pipeline.engine import RunControl

    cfg = RunConfig(input=str(tmp_path / "missing.mkv"), output="null", device="cuda")
    result = FileResult(0, cfg.input, None)
    worker._run(Job(0, "b", cfg.input, None, cfg, "h"), RunControl(), worker.WorkerState("w"), result)
    assert (result.status, result.exit_code) == ("failed", 3), result.error


@pytest.mark.parametrize("fails", [False, True], ids=["done", "failed"])
def test_a_files_time_includes_letting_go_of_its_run(monkeypatch, fails):
    """A file's seconds stop after its pipeline's parts are let go (an NVDEC decoder takes 0.1-0.25 s to
    free), also when the run failed and its traceback still holds them."""
    from types import SimpleNamespace

    from pipeline.batch import worker
    from pipeline.batch.jobs import Job
    from pipeline.engine import RunControl
    from pipeline.errors import InputError

    events: list[str] = []

    class Run:
        def run(self):
            if fails:
                raise InputError("a corrupt packet")
            return SimpleNamespace(frames_out=3, fps=30.0, device="cpu", decoders_reused=0)

        def __del__(self):
            events.append("let go")

    def clock():
        events.append("clock")
        return float(len(events))

    monkeypatch.setattr(worker, "_pipeline", lambda job, control, state: (Run(), lambda: (None, None)))
    monkeypatch.setattr(worker, "time", SimpleNamespace(perf_counter=clock, time=time.time))
    cfg = RunConfig(input="in.mkv", output="null")
    result = FileResult(0, cfg.input, None)
    worker._run(Job(0, "b", cfg.input, None, cfg, "h"), RunControl(), worker.WorkerState("w"), result)
    assert result.status == ("failed" if fails else "done"), result.error
    assert events == ["clock", "let go", "clock"]


@pytest.mark.gpu
def test_a_gpu_workers_files_share_its_device_arena_and_pinned_pool(clips):
    report = run_batch([str(p) for p in good(clips)], "null", filters=CHAIN, device="cuda", gpus="0")
    first, *later = sorted(report.results, key=lambda r: r.started)
    assert first.status == "done" and first.gpu.startswith("cuda:0"), first.error
    assert first.device_allocs > 0 and first.pinned_allocs > 0
    assert [(r.status, r.device_allocs, r.pinned_allocs) for r in later] == [("done", 0, 0)] * 2


@pytest.mark.gpu
def test_a_gpu_workers_nvdec_files_reuse_its_decoders_and_give_what_single_runs_give(tmp_path):
    import av

    (tmp_path / "in").mkdir()
    clips = [make_sample.make_clip(tmp_path / "in" / f"h{i}.mp4", width=320, height=180, frames=128, fps=30,
                                   audio=False, seed=i, options={"g": "16"}) for i in range(3)]
    extradata = set()
    for c in clips:
        with av.open(str(c)) as container:
            extradata.add(bytes(container.streams.video[0].codec_context.extradata))
    assert len(extradata) == 1  # one encoder's settings: the same parameter sets, other pictures
    report = run_batch([str(c) for c in clips], tmp_path / "out", filters=CHAIN, device="cuda", gpus="0",
                       decode="nvdec", codec="ffv1")
    first, *later = sorted(report.results, key=lambda r: r.started)
    assert [r.status for r in report.results] == ["done"] * 3, [r.error for r in report.results]
    assert first.decoders_reused == 0 and [r.decoders_reused for r in later] == [4, 4]
    for result in report.results:
        single = tmp_path / f"single_{Path(result.input).stem}{Path(result.output).suffix}"  # the same container
        proc = run_cli("run", result.input, "-o", single, "-q", "-vf", CHAIN, "--device", "cuda", "--decode", "nvdec",
                       "-c", "ffv1")
        assert proc.returncode == 0, proc.stderr
        a, b = decode(result.output), decode(single)
        assert len(a.frames) == 128 and a.pts == b.pts
        assert all((x == y).all() for x, y in zip(a.frames, b.frames))


def test_no_more_workers_start_than_files_to_run(clips, tmp_path):
    report = run_batch([str(good(clips)[0])], "null", filters=CHAIN, device="cpu", workers=2, processes=False)
    assert report.results[0].status == "done" and [w["name"] for w in report.workers] == ["cpu0"]


def test_in_process_workers_and_a_stop_before_the_start(clips, tmp_path):
    report = run_batch([str(p) for p in good(clips)], tmp_path, filters=CHAIN, device="cpu", workers=2,
                       processes=False)
    assert [r.status for r in report.results] == ["done"] * 3
    assert {r.worker for r in report.results} <= {"cpu0", "cpu1"}
    stop = StopRequest()
    stop()
    stopped = run_batch([str(p) for p in good(clips)], tmp_path / "later", filters=CHAIN, device="cpu", workers=2,
                        processes=False, stop=stop)
    assert [(r.status, r.exit_code) for r in stopped.results] == [("cancelled", 130)] * 3
    assert stopped.exit_code == 130 and list((tmp_path / "later").iterdir()) == []


def test_a_name_too_long_for_the_filesystem_fails_its_file_before_it_runs(clips, tmp_path):
    """The output's name, or its resume marker's (the name and ten more bytes), over the limit: exit 4."""
    report = run_batch([str(p) for p in good(clips)[:2]], tmp_path, device="cpu", workers=1, processes=False,
                       suffix="x" * 245)
    assert [(r.status, r.exit_code) for r in report.results] == [("failed", 4)] * 2
    assert all("file name too long" in r.error for r in report.results)
    assert list(tmp_path.iterdir()) == []


def test_a_stopped_file_leaves_an_earlier_output_of_its_name_as_it_was(clips, tmp_path, monkeypatch):
    """With -y a file's run replaces what is at its output's name only once complete: stopped mid-run, the
    file there before (an earlier batch's output, or the user's) stays, byte for byte."""
    from pipeline.batch import worker
    from pipeline.processor import Processor

    clip = good(clips)[0]
    theirs = tmp_path / f"{clip.stem}_processed{clip.suffix}"
    theirs.write_bytes(b"an earlier output" * 64)
    stop, controls = StopRequest(), []

    class Control(worker.RunControl):
        def __init__(self):
            super().__init__()
            controls.append(self)

    real_submit = Processor.submit

    def submit(self, item, **kwargs):
        if item.meta.index == 3:  # frames are out: stop, and go on only once the run has heard it
            stop()
            deadline = time.monotonic() + 30
            while not controls[-1].stop_event.is_set():
                assert time.monotonic() < deadline, "the run never heard the stop"
                time.sleep(0.02)
        real_submit(self, item, **kwargs)

    monkeypatch.setattr(worker, "RunControl", Control)
    monkeypatch.setattr(Processor, "submit", submit)
    report = run_batch([str(clip)], tmp_path, filters=CHAIN, device="cpu", workers=1, processes=False,
                       overwrite=True, stop=stop, ring_size=2, in_flight=1)
    assert [r.status for r in report.results] == ["interrupted"], report.results[0].error
    assert theirs.read_bytes() == b"an earlier output" * 64
    assert sorted(p.name for p in tmp_path.iterdir()) == [theirs.name]


def test_a_failed_rerun_with_y_leaves_a_complete_output_complete(clips, tmp_path, monkeypatch):
    """Its marker was removed before the run and not put back: the output, byte for byte the complete one,
    then counted as incomplete, and the first batch's own command was refused ("not complete ...")."""
    from pipeline.processor import Processor

    clip = good(clips)[0]
    first = run_batch([str(clip)], tmp_path, filters=CHAIN, device="cpu", workers=1, processes=False)
    assert [r.status for r in first.results] == ["done"]
    out = Path(first.results[0].output)
    whole, marker = out.read_bytes(), marker_path(out).read_text()
    real_submit = Processor.submit

    def submit(self, item, **kwargs):
        if item.meta.index == 2:
            raise MemoryError("out of memory mid-run")
        real_submit(self, item, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(Processor, "submit", submit)
        failed = run_batch([str(clip)], tmp_path, filters="hflip", device="cpu", workers=1, processes=False,
                           overwrite=True)
    # Host memory running out is the command's exit 5, not a bug's 1.
    assert [(r.status, r.exit_code) for r in failed.results] == [("failed", 5)], failed.results[0]
    assert failed.results[0].error == "out of host memory: out of memory mid-run"
    assert out.read_bytes() == whole and marker_path(out).read_text() == marker
    again = run_batch([str(clip)], tmp_path, filters=CHAIN, device="cpu", workers=1, processes=False)
    assert [r.status for r in again.results] == ["skipped"]


def test_a_worker_whose_gpu_stalled_runs_no_more_files(clips, tmp_path, monkeypatch):
    """Its threads are stuck in a CUDA call for good: later files fail at once, they do not stall again."""
    import threading

    from pipeline import engine
    from pipeline.errors import GPUStalled
    from pipeline.processor import Processor

    released = threading.Event()

    class Never:  # the done event of a frame whose work does not complete (until the test ends)
        def synchronize(self):
            released.wait()

    real_submit = Processor.submit

    def submit(self, item, **kwargs):
        real_submit(self, item, **kwargs)
        if item.meta.index == 2:
            item.ctx.done = Never()

    monkeypatch.setattr(Processor, "submit", submit)
    monkeypatch.setattr(engine, "GPU_STALL_S", 0.3)
    monkeypatch.setattr(GPUStalled, "happened", False)
    try:
        report = run_batch([str(p) for p in good(clips)], tmp_path, filters=CHAIN, device="cpu", workers=1,
                           processes=False)
    finally:
        released.set()
    assert [(r.status, r.exit_code) for r in report.results] == [("failed", 5)] * 3
    stalled = [r for r in report.results if "made no progress" in r.error]
    assert len(stalled) == 1  # the one that ran; the others were not run (in whatever order they came)
    name = Path(stalled[0].input).name
    assert sorted(r.error for r in report.results if r is not stalled[0]) == [
        f"not run: this worker's GPU stalled on an earlier file ({name})"] * 2
    assert report.exit_code == 5 and list(tmp_path.iterdir()) == []


# --- the command line ------------------------------------------------------------------------------------


def batch_command(*args: str) -> list[str]:
    return cli_command("batch", "--device", "cpu", "--workers", "2", *args)


def child_env() -> dict[str, str]:
    return environment(PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def test_file_urls_name_the_batchs_inputs_folder_and_report(clips, tmp_path):
    """A file:// URL of this machine is its file, as for ``pipeline run``: as an input (it was "not found"),
    the output folder and the --json report (each was made as a folder named "file:")."""
    inputs = [(clips / "clip0.mkv").as_uri(), f"@{(tmp_path / 'list.txt').as_uri()}"]
    (tmp_path / "list.txt").write_text(f"{(clips / 'clip1.mkv').as_uri()}\n")
    result = run_command(batch_command(*inputs, "-o", (tmp_path / "out").as_uri(), "--json",
                                       (tmp_path / "r.json").as_uri()), cwd=tmp_path, env=child_env())
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "out").glob("*.mkv")) == ["clip0_processed.mkv", "clip1_processed.mkv"]
    assert [r["status"] for r in read_json(tmp_path / "r.json")["files"]] == ["done", "done"]


def test_run_batch_takes_a_file_url_folder_and_f_names_the_extension(clips, tmp_path):
    """run_batch(..., "file:///.../out") wrote into ./file:/.../out; -f mpegts wrote <stem>_processed.mkv."""
    out = tmp_path / "out"
    report = run_batch([str(clips / "clip0.mkv")], out.as_uri(), device="cpu", workers=1, processes=False,
                       output_format="mpegts")
    assert report.exit_code == 0, [r.error for r in report.results]
    assert [p.name for p in out.glob("clip0*")] == ["clip0_processed.ts"]


def test_a_file_named_file_colon_is_that_file_however_it_is_named(clips, tmp_path, monkeypatch):
    """file:x.mkv is FFmpeg's file protocol (x.mkv), but ./file:x.mkv, a glob's match and a Path name the file
    itself: once expanded, a batch took them for the protocol again and ran x.mkv (for a glob, x.mkv twice
    and file:x.mkv never)."""
    ins = tmp_path / "in"
    ins.mkdir()
    shutil.copy(clips / "clip0.mkv", ins / "file:x.mkv")
    shutil.copy(clips / "clip1.mkv", ins / "x.mkv")
    for given, out in (("./file:x.mkv", "dot"), ("*.mkv", "glob")):
        result = run_command(batch_command(given, "-o", str(tmp_path / out), "-vf", "hflip", "-c", "ffv1", "-q"),
                             cwd=ins, env=child_env())  # lossless: the outputs of one input match whatever the run
        assert result.returncode == 0, result.stderr
    monkeypatch.chdir(ins)
    report = run_batch([Path("file:x.mkv")], tmp_path / "api", filters="hflip", device="cpu", workers=1,
                       processes=False, codec="ffv1")
    assert report.exit_code == 0, [r.error for r in report.results]
    assert sorted(p.name for p in (tmp_path / "glob").glob("*.mkv")) == ["file:x_processed.mkv", "x_processed.mkv"]
    wanted = decode(tmp_path / "glob" / "file:x_processed.mkv").frames
    other = decode(tmp_path / "glob" / "x_processed.mkv").frames
    assert not all(a.tobytes() == b.tobytes() for a, b in zip(wanted, other))
    for out in ("dot", "api"):
        assert [p.name for p in (tmp_path / out).glob("*.mkv")] == ["file:x_processed.mkv"]
        got = decode(tmp_path / out / "file:x_processed.mkv").frames
        assert [f.tobytes() for f in got] == [f.tobytes() for f in wanted]


@pytest.mark.parametrize("how", ["url", "nested"])
def test_json_never_replaces_a_list_named_as_a_url_or_inside_another(clips, tmp_path, how):
    """--json l.txt -y replaced the list l.txt when it was named @file:///.../l.txt or inside another list."""
    listed = tmp_path / "l.txt"
    listed.write_text(f"{clips / 'clip0.mkv'}\n")
    if how == "url":
        named = f"@{listed.as_uri()}"
    else:
        (tmp_path / "outer.txt").write_text(f"@{listed}\n")
        named = f"@{tmp_path / 'outer.txt'}"
    result = run_command(batch_command(named, "-o", str(tmp_path / "out"), "--json", str(listed), "-y"),
                         cwd=tmp_path, env=child_env())
    assert result.returncode == 2 and "--json is an input list" in result.stderr, result.stderr
    assert listed.read_text() == f"{clips / 'clip0.mkv'}\n"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_stop_signal_while_a_fifo_list_is_read_ends_the_batch_with_one_line(tmp_path, signum):
    """A FIFO @LIST whose writer sends nothing: the batch waits in its read, before any worker starts; a
    stop signal ends it at once, saying so, with the signal's exit code (SIGTERM used to kill it without
    a word)."""
    fifo = tmp_path / "list.fifo"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    proc = subprocess.Popen(batch_command(f"@{fifo}", "-o", str(out)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env())
    try:
        with open(fifo, "w"):  # returns once the batch has opened the list: it now waits in read()
            time.sleep(0.3)
            proc.send_signal(signum)
            _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, err
    assert err.strip().splitlines() == [f"pipeline: interrupted by {name}; nothing started"]
    assert not out.exists()


def test_cli_list_input_table_json_and_the_worst_exit_code(clips, tmp_path):
    listing = tmp_path / "inputs.txt"
    listing.write_text(f"{clips / 'clip*.mkv'}\n{tmp_path / 'missing.mkv'}\n")
    cmd = batch_command(f"@{listing}", "-o", str(tmp_path / "out"), "--filters", CHAIN, "--json",
                        str(tmp_path / "r.json"))
    result = run_command(cmd, timeout=120, env=child_env())
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    assert "4 files: 3 done, 1 failed" in result.stdout and "exit 3" in result.stdout
    data = read_json(tmp_path / "r.json")
    assert [f["status"] for f in data["files"]] == ["done", "done", "done", "failed"]
    assert data["files"][3]["input"].endswith("missing.mkv") and data["files"][3]["exit_code"] == 3
    assert data["totals"]["exit_code"] == 3 and data["batch"]["scheduler"] == "local"
    assert {w["name"] for w in data["batch"]["workers"]} == {"cpu0", "cpu1"}


def test_cli_quiet_still_says_each_failure_and_a_full_stdout_is_an_output_error(clips, tmp_path):
    """-q: no table, but a file that failed still gets its one line on stderr. Without -q, a table that
    stdout cannot take is exit 4 (the batch itself is complete, its JSON written)."""
    missing = tmp_path / "missing.mkv"
    quiet = run_command(batch_command(str(clips / "clip0.mkv"), str(missing), "-o", str(tmp_path / "q"), "-q"),
                        timeout=120, env=child_env())
    assert quiet.returncode == 3 and quiet.stdout == "", quiet.stderr
    assert quiet.stderr == f"pipeline: error: {missing}: no such file (exit 3)\n"
    with open("/dev/full", "w") as full:
        proc = subprocess.run(batch_command(str(clips / "clip0.mkv"), "-o", str(tmp_path / "f"), "--json",
                                            str(tmp_path / "r.json")), stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=120, env=child_env())
    assert proc.returncode == 4 and "the batch itself is complete" in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and read_json(tmp_path / "r.json")["totals"]["done"] == 1


def test_cli_json_on_stdout_is_all_stdout_holds(clips, tmp_path):
    """The results table followed the JSON on stdout: `--json /dev/stdout | jq` failed unless -q was given."""
    import json

    proc = run_command(batch_command(str(clips / "clip0.mkv"), "-o", str(tmp_path / "o"), "--json", "/dev/stdout"),
                       timeout=120, env=child_env())
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["totals"]["done"] == 1 and "clip0" in proc.stderr


def test_cli_json_never_replaces_a_file_without_y_nor_an_input_or_output(clips, tmp_path, capsys):
    clip, out = clips / "clip0.mkv", tmp_path / "out"
    results = tmp_path / "r.json"
    results.write_text("an earlier batch's")
    assert "already exists" in refused(capsys, 2, str(clip), "-o", str(out), "--json", str(results))
    assert results.read_text() == "an earlier batch's"
    listing = tmp_path / "list.txt"
    listing.write_text(f"{clip}\n")
    (out / "clip0_processed.mkv").parent.mkdir()
    for path, what in ((clip, "an input"), (listing, "an input list"), (out / "clip0_processed.mkv", "an output"),
                       (out / ".clip0_processed.mkv.done.json", "an output's marker")):
        assert f"--json is {what}" in refused(capsys, 2, f"@{listing}", "-o", str(out), "-y", "--json", str(path))
    assert listing.read_text() == f"{clip}\n" and not (out / "clip0_processed.mkv").exists()
    new = tmp_path / "new"  # the directory the batch would make: refused before any file runs
    assert "--json is the output directory" in refused(capsys, 2, str(clip), "-o", str(new), "--json", str(new))
    assert not new.exists()


def test_cli_json_may_go_into_the_output_directory_it_creates(clips, tmp_path):
    from pipeline.checks import check_report_path

    out = tmp_path / "new" / "out"
    check_report_path(str(out / "r.json"), "--json", [], False, made_by_run=out)
    with pytest.raises(OutputError, match="--json directory .* does not exist"):
        check_report_path(str(tmp_path / "elsewhere" / "r.json"), "--json", [], False, made_by_run=out)


def test_a_json_file_that_appears_during_the_batch_is_kept(clips, tmp_path, capsys, monkeypatch):
    from pipeline.batch import cli as batch_cli

    results = tmp_path / "r.json"

    def execute(sources, *args, **kwargs):
        results.write_text("another batch's")
        return BatchReport([FileResult(0, str(sources[0]), None, status="done")])

    monkeypatch.setattr(batch_cli, "execute", execute)
    monkeypatch.setattr(batch_cli, "_install_signal_handlers", lambda stop: None)
    assert "appeared during the batch" in refused(capsys, 2, str(clips / "clip0.mkv"), "-o", "null",
                                                  "--json", str(results))
    assert results.read_text() == "another batch's"


def test_cli_refuses_options_of_a_single_run(clips, tmp_path):
    cmd = batch_command(str(clips / "clip0.mkv"), "--stats-json", str(tmp_path / "s.json"))
    result = run_command(cmd, timeout=60, env=child_env())
    assert result.returncode == 2 and "--json" in result.stderr


# --- Ctrl-C ----------------------------------------------------------------------------------------------

SLOW_CHAIN = "gblur=sigma=8,gblur=sigma=8"  # about 25 fps at 640x360 per worker, two workers on two cores
CRASH_PLUGIN = """
import os

from pipeline.filters import Filter, register_filter


@register_filter("crash_on_wide")
class CrashOnWide(Filter):
    help = "Ends its process on frames 96 pixels wide, as a crashing plugin would; copies the others."

    def cpu(self, src, dst, scratch):
        if src.shape[2] == 96:
            os._exit(1)
        dst[...] = src

    def cuda(self, src, dst, scratch):
        self.cpu(src, dst, scratch)
"""


def test_a_file_that_kills_its_worker_fails_alone(tmp_path):
    """A worker holds one file at a time: Dask would hand it the next in advance, and that file would fail
    with the worker that crashed on the first."""
    ins = tmp_path / "in"
    ins.mkdir()
    make_sample.make_clip(ins / "wide.mp4", width=96, height=64, frames=4, audio=False)  # the largest: first
    for i in range(4):
        make_sample.make_clip(ins / f"small{i}.mp4", width=64, height=48, frames=4, audio=False, seed=i)
    plugin = tmp_path / "crash.py"
    plugin.write_text(CRASH_PLUGIN)
    results = tmp_path / "r.json"
    proc = run_command(batch_command(str(ins / "*.mp4"), "-o", str(tmp_path / "out"), "--plugin", str(plugin),
                                     "--filters", "crash_on_wide", "--json", str(results), "-q"),
                       env=child_env(), timeout=240)
    statuses = {Path(f["input"]).name: f["status"] for f in read_json(results)["files"]}
    assert statuses == {"wide.mp4": "failed", **{f"small{i}.mp4": "done" for i in range(4)}}, proc.stderr
    assert proc.returncode == 1 and "wide.mp4: its worker process died while processing it" in proc.stderr
    # The dead worker's temporary file is gone too: it stayed, hidden, until a later batch ran that file.
    assert not [p.name for p in (tmp_path / "out").iterdir() if ".partial-" in p.name]


SLOW_FRAMES = 45


@pytest.fixture(scope="module")
def slow_clips(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("slow")
    first = make_sample.make_clip(folder / "long0.mp4", width=640, height=360, frames=SLOW_FRAMES, audio=False,
                                  options={"preset": "ultrafast"})
    for i in range(1, 5):
        shutil.copy(first, folder / f"long{i}.mp4")
    return folder


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP, signal.SIGTERM], ids=["SIGINT", "SIGHUP", "SIGTERM"])
def test_sigint_stops_running_files_cancels_the_rest_and_keeps_finished_outputs(slow_clips, tmp_path, signum):
    """Ctrl-C, the terminal closing (SIGHUP), `timeout` and a service manager's stop (SIGTERM) all signal
    the whole process group."""
    out, results = tmp_path / "out", tmp_path / "r.json"
    cmd = batch_command(str(slow_clips / "*.mp4"), "-o", str(out), "--filters", SLOW_CHAIN, "--json", str(results),
                        "-q")
    # Its own process group, signalled as a whole as a terminal's Ctrl-C is: the workers must outlive it.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(),
                            start_new_session=True)
    try:
        # One file finished, and another one being written (five files of seconds each: not all done).
        wait_until(lambda: any(out.glob(".*.done.json")), proc, "finished file")
        wait_until(lambda: partials(out), proc, "file in progress")
        os.killpg(proc.pid, signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signum, err
    assert f"interrupted by {signum.name}" in err and "Traceback" not in err
    files = read_json(results)["files"]
    statuses = [f["status"] for f in files]
    assert set(statuses) <= {"done", "interrupted", "cancelled"} and "done" in statuses
    assert set(statuses) != {"done"}
    assert not [p for p in out.iterdir() if ".partial-" in p.name]
    kept = sorted(p for p in out.iterdir() if not p.name.startswith("."))
    assert kept == sorted(Path(f["output"]) for f in files if f["status"] == "done")
    for path in kept:  # complete: every frame, and the marker that lets the next batch skip it
        assert len(video_frames(path)) == SLOW_FRAMES and marker_path(path).exists()


HOLD_PLUGIN = """
import time

from pipeline.filters import Filter, register_filter


@register_filter("hold")
class Hold(Filter):
    help = "Holds each frame for seconds, as a filter far slower than the stop would; copies it."

    def cpu(self, src, dst, scratch):
        time.sleep(8)
        dst[...] = src

    def cuda(self, src, dst, scratch):
        self.cpu(src, dst, scratch)
"""


def test_a_second_sigint_exits_at_once_with_one_line_and_the_workers_semaphores_removed(slow_clips, tmp_path):
    """multiprocessing's resource tracker outlives the batch that leaves at once: it removes the workers'
    semaphores, and must not add its "leaked semaphore" warnings after the batch's last line. The files'
    frames take seconds each, so the first stop is still waiting on them when the second signal comes."""
    import threading

    shm = Path("/dev/shm")
    before = set(os.listdir(shm)) if shm.is_dir() else set()
    out = tmp_path / "out"
    plugin = tmp_path / "hold.py"
    plugin.write_text(HOLD_PLUGIN)
    cmd = batch_command(str(slow_clips / "*.mp4"), "-o", str(out), "--plugin", str(plugin), "--filters", "hold",
                        "-q")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=child_env(),
                            start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)  # to EOF: the tracker's too
    reader.start()
    try:
        wait_until(lambda: partials(out), proc, "file in progress")
        os.killpg(proc.pid, signal.SIGINT)
        wait_until(lambda: any("again to exit at once" in line for line in lines), proc, "the first stop's line")
        time.sleep(SIGNAL_ECHO_S + 0.2)  # sooner, the second is taken for the first's echo (timeout's)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
        reader.join(60)  # the tracker holds stderr open until it has cleaned up
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    err = "".join(lines)
    assert proc.returncode == 130 and not reader.is_alive(), err
    assert lines[-1].strip() == "pipeline: SIGINT again: exiting now", err
    assert "resource_tracker" not in err and "leaked" not in err and "Traceback" not in err
    if shm.is_dir():
        assert not [n for n in set(os.listdir(shm)) - before if n.startswith("sem.mp-")]


WINDOW_PROBE = """
import io, json, multiprocessing, os, signal, sys, threading, time
from rich.console import Console
from pipeline.batch import cli, cluster

signum = signal.Signals(int(sys.argv[1]))
cluster.start_thread_pools_deaf()  # NumPy's threads, as pipeline batch starts them
got = []
signal.signal(signum, lambda n, frame: got.append(n))
terminal = Console(force_terminal=True, file=io.StringIO())
with cli.progress(terminal, 1, True), cluster._terminal_signals_ignored_by_children():  # the bar's thread too
    ctx = multiprocessing.get_context("spawn")  # as Dask starts its workers (the resource tracker too)
    child = ctx.Process(target=time.sleep, args=(0,))
    child.start()
    child.join()
    probe = f"import signal; print(signal.getsignal({int(signum)}) == signal.SIG_IGN)"
    ignored = os.popen(f"{sys.executable} -c '{probe}'").read().strip() == "True"
    sender = threading.Thread(target=os.kill, args=(os.getpid(), signum))
    sender.start()
    sender.join()
    time.sleep(0.1)
    held = list(got)
deadline = time.monotonic() + 5
while not got and time.monotonic() < deadline:
    time.sleep(0.01)
blocked = signum in signal.pthread_sigmask(signal.SIG_BLOCK, [])
print(json.dumps({"held": held, "got": got, "child_ignores": ignored, "still_blocked": blocked}))
"""


@pytest.mark.parametrize("signum", cluster.LEFT_TO_THE_BATCH, ids=lambda s: s.name)
def test_a_signal_while_the_workers_start_waits_for_the_batchs_handler(signum):
    """Workers are started with the terminal's signals ignored, so that they outlive a Ctrl-C. One that
    comes meanwhile, with NumPy's threads and the progress bar's running and one more process started, is
    not lost: it reaches the batch's handler once that is back (in a process of its own: the test runner's threads would take
    it and drop it)."""
    import sys

    import json

    probe = subprocess.run([sys.executable, "-c", WINDOW_PROBE, str(int(signum))], capture_output=True, text=True,
                           timeout=60, env=environment(), cwd=ROOT)
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == {"held": [], "got": [int(signum)], "child_ignores": True,
                                        "still_blocked": False}


def test_the_results_table_shows_names_and_errors_as_written():
    """rich read "[cuda12]" in an error (and brackets in a file name) as markup and dropped it."""
    from rich.console import Console

    from pipeline.batch.report import BatchReport, FileResult, table

    results = [FileResult(0, "/in/[x].mp4", "/out/[x]_processed.mp4", status="failed", exit_code=5,
                          error="install the project with .[cuda12] or .[cuda13]")]
    console = Console(width=200, record=True, file=open(os.devnull, "w"))
    console.print(table(BatchReport(results)))
    text = console.export_text()
    assert "[x].mp4" in text and "[x]_processed.mp4" in text and ".[cuda12] or .[cuda13]" in text


def test_an_output_takes_the_inputs_extension_only_where_ffmpeg_writes_it():
    """As `pipeline run` names the outputs of several inputs: Matroska (any codec) for the rest."""
    from pipeline.batch.inputs import output_for

    got = [output_for(Path(name), Path("o"), "_p").name for name in ("a.mp4", "noext", "cam.fifo", "b.mov")]
    assert got == ["a_p.mp4", "noext_p.mkv", "cam_p.mkv", "b_p.mov"]
