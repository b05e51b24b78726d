"""End to end: the CLI and the Python API on small clips, against the CPU reference of the same chain.

Exact comparisons use FFV1 in Matroska (lossless); the H.264 run uses crf=0 (lossless too).
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from utils import (
    Decoded,
    all_devices,
    alloc_counter,
    apply_chain_cpu,
    decode,
    max_abs_diff,
    partials,
    pipeline_threads,
    read_json,
    run_cli,
)
from pipeline import OutputError, Pipeline, RunConfig, sample
from pipeline.config import DEFAULT_FILTERS
from pipeline.video import Colour, VideoFormat
from pipeline.sink import Sink
from pipeline.stats import RunStats

W, H = 160, 96
MP4_FRAMES, MKV_FRAMES = 12, 24
# make_clip tags clips under 720 lines as BT.601 limited range (AVCOL_SPC_SMPTE170M = 6, MPEG range = 1).
INPUT_COLOUR = Colour("bt601", False)
OTHER_CHAIN = "eq=contrast=1.2:brightness=-0.05:saturation=0.7:gamma=1.4,gblur=sigma=0.8"
# Largest per-pixel difference allowed against the CPU reference: the CPU backend runs the reference
# functions themselves; CUDA may round a value the other way after the blur's different summation order.
TOLERANCE = {"cpu": 0, "cuda": 2}


def quiet(message: str) -> None:
    pass


@pytest.fixture(scope="session")
def clips(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("clips")
    return {
        "mp4": sample.make_clip(root / "clip.mp4", width=W, height=H, frames=MP4_FRAMES, fps=30, seed=1),
        "mkv": sample.make_clip(root / "clip.mkv", width=W, height=H, frames=MKV_FRAMES, fps=30, seed=2,
                                     codec="ffv1"),
    }


@pytest.fixture(scope="session")
def inputs(clips):
    """The clips decoded once: frames, timestamps, audio packet counts."""
    return {name: decode(path) for name, path in clips.items()}


def run_api(device: str, src: Path, out: Path, **changes) -> RunStats:
    cfg = RunConfig(input=str(src), output=str(out), device=device, quiet=True, **changes)
    return Pipeline.from_config(cfg).run()


def assert_matches_reference(out: Decoded, src: Decoded, filters: str, tolerance: int) -> None:
    """Every output frame within ``tolerance`` of the CPU reference applied to the decoded input frame."""
    assert len(out.frames) == len(src.frames)
    assert (src.colorspace, src.color_range) == (6, 1), "INPUT_COLOUR no longer describes the test clips"
    fmt = VideoFormat(src.width, src.height, INPUT_COLOUR)
    worst = 0
    for got, frame in zip(out.frames, src.frames):
        worst = max(worst, max_abs_diff(got, apply_chain_cpu(frame, fmt, filters)))
    assert worst <= tolerance


# --- the CLI ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", all_devices())
def test_cli_run_keeps_frames_timestamps_audio_and_size(device, clips, inputs, tmp_path):
    out, stats_path = tmp_path / "out.mp4", tmp_path / "stats.json"
    proc = run_cli("run", clips["mp4"], "-o", out, "--device", device, "-q", "--stats-json", stats_path,
                   "--encoder-opt", "crf=0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""  # -q: no summary
    src, got = inputs["mp4"], decode(out)
    assert len(got.frames) == len(src.frames) == MP4_FRAMES
    assert got.pts == src.pts and got.time_base == src.time_base
    assert got.audio_packets == src.audio_packets > 0
    assert (got.width, got.height) == (src.width, src.height) == (W, H)
    assert (got.colorspace, got.color_range) == (src.colorspace, src.color_range) == (6, 1)
    assert_matches_reference(got, src, DEFAULT_FILTERS, TOLERANCE[device])
    assert partials(tmp_path) == []

    stats = read_json(stats_path)
    assert stats["frames_in"] == stats["frames_out"] == MP4_FRAMES
    assert stats["audio_packets"] == src.audio_packets
    assert stats["device"] == device
    assert set(stats["stage_ms"]) >= {"decode", "upload", "kernels", "download", "encode"}
    assert all(s["count"] == MP4_FRAMES for s in stats["stage_ms"].values())
    assert stats["latency_ms"]["count"] == MP4_FRAMES
    assert stats["memory"]["device_allocs"] == 1  # pooled: the arena, once
    assert stats["steady_device_allocs_per_frame"] == 0
    # the host rings (8 slots each; none for the input where NVDEC decodes): the CPU backend's are whole; the
    # GPU's pinned ones start with a slot and fill as frames need, each slot once (fewer than one per frame)
    rings, m = (2 if stats["decode"] == "cpu" else 1), stats["memory"]
    first = 8 if device == "cpu" else 1
    assert m["host_allocs"] <= rings * (8 - first) < rings * MP4_FRAMES
    assert m["host_bytes"] == (m["host_allocs"] + rings * first) * W * H * 3 // 2


def test_cli_frames_stops_after_n(clips, tmp_path):
    out, stats_path = tmp_path / "out.mkv", tmp_path / "s.json"
    proc = run_cli("run", clips["mkv"], "-o", out, "--device", "cpu", "-q", "-c", "ffv1", "--frames", "5",
                   "--stats-json", stats_path)
    assert proc.returncode == 0, proc.stderr
    assert len(decode(out).frames) == 5
    stats = read_json(stats_path)
    assert stats["frames_in"] == stats["frames_out"] == 5


def test_cli_default_output_name_in_cwd(clips, tmp_path):
    proc = run_cli("run", clips["mkv"].resolve(), "--device", "cpu", "-q", "-c", "ffv1", "--frames", "3",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    expected = tmp_path / "clip_processed.mkv"
    assert expected.is_file()
    assert len(decode(expected).frames) == 3
    assert not (clips["mkv"].parent / "clip_processed.mkv").exists()


def test_cli_existing_output_needs_overwrite(clips, tmp_path):
    out = tmp_path / "out.mkv"
    out.write_bytes(b"precious")
    proc = run_cli("run", clips["mkv"], "-o", out, "--device", "cpu", "-q", "-c", "ffv1", "--frames", "3")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "exists" in lines[0] and "Traceback" not in proc.stderr
    assert out.read_bytes() == b"precious"
    assert partials(tmp_path) == []

    proc = run_cli("run", clips["mkv"], "-o", out, "--device", "cpu", "-q", "-c", "ffv1", "--frames", "3", "-y")
    assert proc.returncode == 0, proc.stderr
    assert len(decode(out).frames) == 3
    assert partials(tmp_path) == []


def test_cli_unknown_encoder_exits_2_without_files(clips, tmp_path):
    proc = run_cli("run", clips["mkv"], "-o", tmp_path / "out.mkv", "--device", "cpu", "-q", "-c", "nosuchcodec")
    assert proc.returncode == 2
    assert "'nosuchcodec'" in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_cli_missing_input_exits_3(tmp_path):
    proc = run_cli("run", tmp_path / "nope.mp4", "-o", tmp_path / "out.mp4", "--device", "cpu", "-q")
    assert proc.returncode == 3
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "out.mp4").exists()


# --- the Python API ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", all_devices())
@pytest.mark.parametrize("filters", [DEFAULT_FILTERS, OTHER_CHAIN, ""], ids=["default", "other", "none"])
def test_api_matches_reference(device, filters, clips, inputs, tmp_path):
    out = tmp_path / "out.mkv"
    stats = run_api(device, clips["mkv"], out, codec="ffv1", filters=filters)
    got, src = decode(out), inputs["mkv"]
    assert stats.frames_in == stats.frames_out == MKV_FRAMES
    assert got.pts == src.pts and got.audio_packets == src.audio_packets
    assert_matches_reference(got, src, filters, TOLERANCE[device])


@pytest.mark.parametrize("device", all_devices())
@pytest.mark.parametrize("ring_size, in_flight, streams", [(2, 1, 1), (2, 4, 2), (3, 2, 1)])
def test_api_small_rings_and_pools_change_nothing(device, ring_size, in_flight, streams, clips, inputs, tmp_path):
    """Back-pressure everywhere: every slot and arena block is reused many times (on CUDA, after its
    event), and the output must not change."""
    out = tmp_path / "out.mkv"
    stats = run_api(device, clips["mkv"], out, codec="ffv1", ring_size=ring_size, in_flight=in_flight,
                    streams=streams, arena_headroom=1.0)
    assert_matches_reference(decode(out), inputs["mkv"], DEFAULT_FILTERS, TOLERANCE[device])
    assert stats.memory["device_allocs"] == 1


def test_api_cpu_pooled_memory_counters(clips, tmp_path):
    stats = run_api("cpu", clips["mkv"], tmp_path / "out.mkv", codec="ffv1")
    m = stats.memory
    assert m["strategy"] == "pool" and stats.device == "cpu"
    assert m["device_allocs"] == 1 and m["device_frees"] == 0
    assert m["pool_hits"] >= MKV_FRAMES  # every frame's buffers come from the arena
    assert m["bytes_in_use"] == 0  # everything returned at the end
    assert 0 < m["bytes_peak"] <= m["bytes_reserved"]
    assert stats.steady_allocs_per_frame() == 0


def test_api_naive_gives_the_same_frames_as_pooled(clips, tmp_path):
    pooled = run_api("cpu", clips["mkv"], tmp_path / "pooled.mkv", codec="ffv1")
    naive = run_api("cpu", clips["mkv"], tmp_path / "naive.mkv", codec="ffv1", alloc="naive")
    a, b = decode(tmp_path / "pooled.mkv"), decode(tmp_path / "naive.mkv")
    assert len(a.frames) == len(b.frames) == MKV_FRAMES
    for x, y in zip(a.frames, b.frames):
        np.testing.assert_array_equal(x, y)
    assert a.pts == b.pts
    assert pooled.memory["device_allocs"] == 1
    assert naive.memory["device_allocs"] >= 2 * MKV_FRAMES
    assert naive.steady_allocs_per_frame() > 0


@pytest.mark.parametrize("device", all_devices())
def test_failing_sink_stops_every_stage(device, clips, tmp_path, monkeypatch):
    """A stage that fails mid-run must not leave the others blocked: run() raises, no file is left."""
    original = Sink.write_video
    written = []

    def write_video(self, *args, **kwargs):
        if len(written) == 3:
            raise OutputError("simulated write failure")
        written.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Sink, "write_video", write_video)
    out = tmp_path / "out.mkv"
    outcome: dict[str, BaseException] = {}

    def run():
        try:
            run_api(device, clips["mkv"], out, codec="ffv1")
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            outcome["error"] = e

    runner = threading.Thread(target=run, name="test-runner", daemon=True)
    runner.start()
    runner.join(60)  # a hang, not a speed limit: a healthy run returns in well under a second here
    assert not runner.is_alive(), "Pipeline.run hung after the sink failed"
    assert isinstance(outcome.get("error"), OutputError), outcome
    assert "simulated write failure" in str(outcome["error"])
    assert len(written) == 3
    assert not out.exists()
    assert partials(tmp_path) == []
    assert pipeline_threads() == []


# --- CUDA -------------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_cuda_cli_output_matches_cpu_backend(clips, inputs, tmp_path):
    outs = {}
    for device in ("cpu", "cuda"):
        outs[device] = tmp_path / f"{device}.mkv"
        proc = run_cli("run", clips["mkv"], "-o", outs[device], "--device", device, "-q", "-c", "ffv1")
        assert proc.returncode == 0, proc.stderr
    cpu, cuda = decode(outs["cpu"]), decode(outs["cuda"])
    assert len(cuda.frames) == len(cpu.frames) == MKV_FRAMES
    assert cuda.pts == cpu.pts == inputs["mkv"].pts
    assert cuda.audio_packets == cpu.audio_packets == inputs["mkv"].audio_packets
    assert max(max_abs_diff(a, b) for a, b in zip(cuda.frames, cpu.frames)) <= 2


@pytest.mark.gpu
def test_cuda_pooled_run_allocates_nothing_per_frame(clips, tmp_path, monkeypatch):
    import cupy

    hook = alloc_counter(cupy)
    original_guard = Pipeline._guard

    def guard(self, *args, **kwargs):
        with hook:  # CuPy keeps memory hooks per thread: install it in every stage thread as well
            return original_guard(self, *args, **kwargs)

    monkeypatch.setattr(Pipeline, "_guard", guard)

    def counted_run(frames: int, name: str):
        before = hook.count
        with hook:
            stats = run_api("cuda", clips["mkv"], tmp_path / name, codec="ffv1", frames=frames)
        return stats, hook.count - before

    with hook:  # the hook does see CuPy allocations
        before = hook.count
        cupy.empty(1024, cupy.uint8)
        assert hook.count > before

    counted_run(4, "warmup.mkv")  # kernels compiled, one-time set-up done
    short_stats, short_count = counted_run(4, "short.mkv")
    long_stats, long_count = counted_run(MKV_FRAMES, "long.mkv")
    assert short_stats.frames_out == 4 and long_stats.frames_out == MKV_FRAMES
    assert long_count == short_count, "CuPy allocations grow with the number of frames"
    for stats in (short_stats, long_stats):
        assert stats.device == "cuda"
        assert stats.memory["device_allocs"] == 1
        assert stats.steady_allocs_per_frame() == 0


@pytest.mark.gpu
def test_cuda_naive_allocates_per_frame_and_matches_pooled(clips, tmp_path):
    pooled = run_api("cuda", clips["mkv"], tmp_path / "pooled.mkv", codec="ffv1")
    naive = run_api("cuda", clips["mkv"], tmp_path / "naive.mkv", codec="ffv1", alloc="naive")
    assert pooled.memory["device_allocs"] == 1
    assert naive.memory["device_allocs"] >= 2 * MKV_FRAMES
    a, b = decode(tmp_path / "pooled.mkv"), decode(tmp_path / "naive.mkv")
    assert len(a.frames) == len(b.frames) == MKV_FRAMES
    for x, y in zip(a.frames, b.frames):
        np.testing.assert_array_equal(x, y)


@pytest.mark.gpu
def test_cuda_write_combined_input_slots_give_the_same_frames(clips, tmp_path, monkeypatch):
    """Write-combined memory only changes how the CPU writes the slots and the GPU reads them."""
    from pipeline.gpu import memory

    made = []
    allocate = memory.write_combined_array
    monkeypatch.setattr(memory, "write_combined_array", lambda n: made.append(n) or allocate(n))
    plain = run_api("cuda", clips["mkv"], tmp_path / "pinned.mkv", codec="ffv1", ring_size=3)
    assert made == []
    combined = run_api("cuda", clips["mkv"], tmp_path / "wc.mkv", codec="ffv1", ring_size=3, write_combined=True)
    assert len(made) == 3  # the input ring, once; the output ring stays cached (the CPU reads it)
    assert combined.memory["device_allocs"] == plain.memory["device_allocs"] == 1
    a, b = decode(tmp_path / "pinned.mkv"), decode(tmp_path / "wc.mkv")
    assert len(a.frames) == len(b.frames) == MKV_FRAMES
    for x, y in zip(a.frames, b.frames):
        np.testing.assert_array_equal(x, y)


def test_write_combined_where_it_does_not_apply_is_said_once(clips, tmp_path, monkeypatch, caplog):
    """Only the pooled input ring of a single stream on a GPU is write-combined; elsewhere the flag is
    ignored with one warning per reason, however many streams build their memory."""
    import importlib

    from pipeline import log as log_module
    from pipeline.many import SharedMemory
    from pipeline.memory import registry

    monkeypatch.setattr(log_module, "_said", set())
    caplog.set_level("WARNING", logger="pipeline")
    for name in ("one", "two"):
        run_api("cpu", clips["mkv"], tmp_path / f"{name}.mkv", codec="ffv1", write_combined=True)
    request = registry.MemoryRequest(64, 64, 256, 0, 2, 1, 1.0, write_combined=True)
    shared = SharedMemory("cpu")
    for _ in range(3):
        shared.memory(request).close()
    built = []
    monkeypatch.setattr(importlib, "import_module", lambda name: type("M", (), {"naive": built.append, "pooled": built.append}))
    registry.STRATEGIES["naive"].build("cuda", request)
    registry.STRATEGIES["pool"].build("cuda", request)
    assert len(built) == 2
    said = [r.getMessage() for r in caplog.records if "--write-combined" in r.getMessage()]
    assert [m.rsplit("ignored with ", 1)[1] for m in said] == ["the CPU backend", "--alloc naive"], said


@pytest.mark.parametrize("name", ["out.mkv", "frames/f%03d.png"])
def test_two_runs_of_one_process_into_one_output_refuse_the_second(clips, tmp_path, name):
    """Their temporary name carries the process id only: the second run shared the first's temporary file,
    and the output in place held the other run's frames."""
    import pipeline

    out = tmp_path / name
    out.parent.mkdir(exist_ok=True)
    started, go_on, result = threading.Event(), threading.Event(), {}

    def held(frame) -> None:
        started.set()
        go_on.wait(30)

    def first() -> None:
        result["first"] = pipeline.run(str(clips["mkv"]), str(out), device="cpu", filters="", stage=held)

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert started.wait(30)
        # -f mp4 with a pattern's name is one MP4 file of that literal name (as ffmpeg writes it), not the sequence
        for given in ({}, {"output_format": "image2" if "%" in name else "mp4"}):
            with pytest.raises(pipeline.ConfigError, match="another run in this process is writing it now") as e:
                pipeline.run(str(clips["mp4"]), str(out), device="cpu", filters="", overwrite=True, **given)
            assert "format" not in str(e.value)  # not put as a muxer the name or --format did not choose
    finally:
        go_on.set()
        thread.join(60)
    assert result["first"]["frames_out"] == MKV_FRAMES
    written = sorted(out.parent.iterdir()) if "%" in name else [out]
    assert len(decode(written[0]).frames if "%" not in name else written) == MKV_FRAMES
    assert partials(out.parent) == []
