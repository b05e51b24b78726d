"""The Python API: pipeline.frames, pipeline.run with a stage, frames from your own source.

Each body runs on the CPU backend and on CUDA; outputs are checked against the CPU reference of the
same chain applied to the decoded input (utils.apply_chain_cpu), and the pooled path's allocations
are counted.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from pipeline import sample as make_sample
import pipeline
from utils import all_devices, alloc_counter, decode, max_abs_diff, partials, pipeline_threads, run_python
from pipeline.convert import i420_to_rgb_cpu, rgb_to_rgb24_cpu
from pipeline.filters import parse_chain
from pipeline.video import Colour, VideoFormat

W, H, FRAMES = 160, 96, 24
CHAIN = "gblur=sigma=1,eq=contrast=1.2"
TOLERANCE = {"cpu": 0, "cuda": 2}


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    return make_sample.make_clip(tmp_path_factory.mktemp("api") / "clip.mkv", width=W, height=H, frames=FRAMES,
                                 fps=30, seed=5, codec="ffv1")


@pytest.fixture(scope="module")
def decoded(clip):
    return decode(clip)


def expected_rgb(i420: np.ndarray, filters: str) -> np.ndarray:
    """The CPU reference: conversion, the chain's references, conversion to packed RGB."""
    fmt = VideoFormat(W, H, Colour("bt601", False))
    rgb = np.empty((3, H, W), np.float32)
    i420_to_rgb_cpu(i420, fmt, rgb)
    for f in parse_chain(filters):
        out = np.empty_like(rgb)
        f.cpu(rgb, out, [np.empty(s, np.float32) for s in f.scratch_shapes(W, H)])
        rgb = out
    packed = np.empty((H, W, 3), np.uint8)
    rgb_to_rgb24_cpu(rgb, fmt, packed)
    return packed


def as_numpy(array) -> np.ndarray:
    return array if isinstance(array, np.ndarray) else array.get()


# --- frames() --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", all_devices())
def test_frames_are_rgb_views_matching_the_reference(device, clip, decoded):
    seen = []
    with pipeline.frames(clip, filters=CHAIN, device=device) as frames:
        for frame in frames:
            assert frame.array.shape == (H, W, 3) and frame.array.dtype == np.uint8
            assert frame.index == len(seen) and frame.pts == decoded.pts[frame.index]
            assert frame.time == pytest.approx(frame.pts * decoded.time_base)
            got = as_numpy(frame.array)
            assert max_abs_diff(got, expected_rgb(decoded.frames[frame.index], CHAIN)) <= TOLERANCE[device]
            seen.append(frame.copy())
    assert len(seen) == FRAMES
    assert frames.stats.device == device
    # copies stay valid after the iteration moved on (the views were reused)
    assert max_abs_diff(as_numpy(seen[0].array), expected_rgb(decoded.frames[0], CHAIN)) <= TOLERANCE[device]
    assert pipeline_threads() == []


@pytest.mark.parametrize("device", all_devices())
def test_frames_break_stops_the_run_and_gives_memory_back(device, clip):
    frames = pipeline.frames(clip, device=device)
    for frame in frames:
        if frame.index == 3:
            break
    frames.close()
    assert pipeline_threads() == []
    m = frames.stats.memory
    assert m["bytes_in_use"] == 0 and frames.stats.frames_out == 4


@pytest.mark.parametrize("device", all_devices())
def test_closing_frames_from_another_thread_while_next_waits_ends_the_iteration(device):
    """A viewer's close button, a watchdog: close() from another thread while the loop waits for a frame.
    It raised "generator already executing" and left the run going; the loop ends as after a break."""
    import threading

    rgb = np.arange(48 * 64 * 3, dtype=np.uint8).reshape(48, 64, 3)

    def camera():
        for _ in range(1000):
            time.sleep(0.02)
            yield rgb

    frames = pipeline.frames(camera(), device=device)
    taken = [next(frames)]
    closer = threading.Timer(0.2, frames.close)
    closer.start()
    started = time.monotonic()
    taken += list(frames)  # StopIteration, not Interrupted: the application asked for the end
    closer.join()
    assert time.monotonic() - started < 10 and 2 <= len(taken) < 100
    assert pipeline_threads() == [] and frames.stats.memory["bytes_in_use"] == 0
    frames.close()  # again, as a with block's end does: nothing left to do


def test_the_applications_own_stop_says_so():
    source = pipeline.ArraySource([RGB] * 4)
    run = pipeline.Pipeline.from_config(pipeline.RunConfig(input="<frames>", output="null", device="cpu"),
                                        source=source)
    run.stop()
    with pytest.raises(pipeline.Interrupted, match="stopped by Pipeline.stop()") as e:
        run.run()
    assert e.value.exit_code == 130


def test_frames_stopped_by_the_application_speak_of_no_output(clip):
    """frames() writes nothing, but its stop said "the output holds the N frames done"."""
    frames = pipeline.frames(clip, device="cpu")
    with pytest.raises(pipeline.Interrupted, match=r"stopped by Pipeline\.stop\(\); \d+ frames processed$"):
        for frame in frames:
            if frame.index == 1:
                frames._pipeline.stop()
    assert pipeline_threads() == []


def test_stop_takes_a_signal_number_and_says_so_of_anything_else():
    """99999, 'TERM' or 2.5 were taken and failed the run at its end (ValueError, TypeError), its output
    written."""
    run = pipeline.Pipeline.from_config(pipeline.RunConfig(input="<frames>", output="null", device="cpu"),
                                        source=pipeline.ArraySource([RGB] * 4))
    for wrong in (99999, "TERM", 2.5, True, -1):
        with pytest.raises(pipeline.ConfigError, match="signum must be a signal number"):
            run.stop(wrong)
    run.stop(signal.SIGTERM)
    with pytest.raises(pipeline.Interrupted, match="SIGTERM") as e:
        run.run()
    assert e.value.exit_code == 143


@pytest.mark.parametrize("leave", ["break", "raise"])
def test_leaving_frames_early_never_raises_about_a_frame_not_taken(clip, leave):
    """The stages run ahead of the caller: a failure on a frame it never took is not raised in place of
    its own exception (or its break)."""
    from pipeline.filters import FILTERS, Filter, register_filter

    done = []

    @register_filter("test_fails_from_frame_7")
    class FailsLater(Filter):
        def cpu(self, src, dst, scratch):
            done.append(1)
            if len(done) >= 7:  # frame 6: the caller holds frame 5, the stages run two ahead
                raise RuntimeError("a later frame")
            dst[...] = src

    def leave_at_frame_5():
        with pipeline.frames(clip, device="cpu", filters="test_fails_from_frame_7") as frames:
            for frame in frames:
                if frame.index == 5:
                    deadline = time.monotonic() + 10
                    while len(done) < 7 and time.monotonic() < deadline:
                        time.sleep(0.01)
                    assert len(done) >= 7  # the stages ran ahead and failed
                    if leave == "break":
                        break
                    raise ValueError("the caller's own")

    try:
        if leave == "break":
            leave_at_frame_5()
        else:
            with pytest.raises(ValueError, match="the caller's own"):
                leave_at_frame_5()
    finally:
        FILTERS.pop("test_fails_from_frame_7")
    assert pipeline_threads() == []


def test_leaving_frames_early_still_raises_a_gpu_failure(clip):
    """The device may be unusable for what the caller does next: that one is never kept quiet."""
    from pipeline.filters import FILTERS, Filter, register_filter

    @register_filter("test_gpu_lost_at_frame_7")
    class GpuLost(Filter):
        def cpu(self, src, dst, scratch):
            if self.seen == 6:
                raise pipeline.GPUError("the device was lost")
            self.seen += 1
            dst[...] = src

        seen = 0

    try:
        with pytest.raises(pipeline.GPUError, match="the device was lost"):
            with pipeline.frames(clip, device="cpu", filters="test_gpu_lost_at_frame_7") as frames:
                for frame in frames:
                    if frame.index == 5:
                        deadline = time.monotonic() + 10
                        while frames._pipeline._error is None and time.monotonic() < deadline:
                            time.sleep(0.01)
                        break
    finally:
        FILTERS.pop("test_gpu_lost_at_frame_7")
    assert pipeline_threads() == []


def test_frames_are_dlpack_arrays(clip):
    with pipeline.frames(clip, device="cpu", frames=2) as frames:
        frame = next(frames)
        assert np.array_equal(np.from_dlpack(frame), frame.array)


def test_pooled_frames_allocate_nothing_per_frame_cpu(clip):
    counts = {}
    for n in (4, FRAMES):
        frames = pipeline.frames(clip, device="cpu", frames=n)
        assert sum(1 for _ in frames) == n
        counts[n] = frames.stats.memory
    for m in counts.values():
        # the CPU backend commits its input ring whole (no output ring: the frames stay in memory)
        assert m["device_allocs"] == 1 and m["host_allocs"] == 0 and m["device_frees"] == 0
    assert counts[4]["host_bytes"] == counts[FRAMES]["host_bytes"] == pipeline.RunConfig().ring_size * W * H * 3 // 2


@pytest.mark.parametrize("device", all_devices())
def test_frames_figures_count_their_set_up_as_runs_do(clip, device, monkeypatch):
    """frames() made its backend and opened its input before its figures started: its fps and time to the
    first frame left out the CUDA context and the decoder's open that run()'s include, and startup_ms
    named neither."""
    import pipeline.api as api

    opened = api.open_source

    def slow_open(*args, **kwargs):
        time.sleep(0.3)  # an open that takes long: its time must be in the figures
        return opened(*args, **kwargs)

    monkeypatch.setattr(api, "open_source", slow_open)
    frames = pipeline.frames(clip, device=device, frames=4)
    assert sum(1 for _ in frames) == 4
    stats = frames.stats.to_dict(per_frame=False)
    backend = "cuda_context" if device == "cuda" else "backend"
    assert {backend, "decoder_open"} <= set(stats["startup_ms"]) and stats["startup_ms"]["decoder_open"] >= 300
    assert stats["time_to_first_frame_ms"] >= 300 and stats["wall_s"] >= 0.3


def test_the_backends_set_up_is_named_for_the_device_auto_chose(clip):
    """--device auto on a machine without a GPU made the CPU backend and called its time cuda_context, in
    run() and frames() alike."""
    frames = pipeline.frames(clip, device="auto", frames=2)
    assert sum(1 for _ in frames) == 2
    for stats in (pipeline.run(clip, "null", device="auto", frames=2), frames.stats.to_dict(per_frame=False)):
        cuda = stats["device"].startswith("cuda")
        made, other = ("cuda_context", "backend") if cuda else ("backend", "cuda_context")
        assert made in stats["startup_ms"] and other not in stats["startup_ms"], stats["startup_ms"]


@pytest.mark.gpu
def test_pooled_frames_allocate_nothing_per_frame_cuda(clip):
    import cupy

    hook = alloc_counter(cupy)
    engine = pipeline.Pipeline
    original_guard = engine._guard

    def counted(n: int) -> tuple[int, dict]:
        before = hook.count
        with hook:
            frames = pipeline.frames(clip, device="cuda", frames=n)
            for frame in frames:
                assert frame.array.shape == (H, W, 3)
        return hook.count - before, frames.stats

    def guard(self, *args, **kwargs):
        with hook:
            return original_guard(self, *args, **kwargs)

    engine._guard = guard
    try:
        counted(4)  # kernels compiled, one-time set-up done
        short, short_stats = counted(4)
        long, long_stats = counted(FRAMES)
    finally:
        engine._guard = original_guard
    assert long == short, "CuPy allocations grow with the number of frames"
    for stats in (short_stats, long_stats):
        assert stats.memory["device_allocs"] == 1 and stats.steady_allocs_per_frame() == 0


@pytest.mark.gpu
def test_frames_take_the_decoders_an_earlier_iterator_left_and_give_what_fresh_ones_give(tmp_path):
    """``frames(decoders=pool)``: NVDEC's decoders outlive an iterator, also one stopped part-way (flushed
    as they stop), and the next file of the same parameter sets decodes through them exactly."""
    import hashlib

    first, second = (make_sample.make_clip(tmp_path / f"h{i}.mp4", width=320, height=180, frames=128, fps=30,
                                           audio=False, seed=i, options={"g": "16"}) for i in range(2))

    def digests(path, limit=None, **kwargs) -> tuple[list[str], int]:
        out = []
        with pipeline.frames(path, filters=CHAIN, device="cuda", decode="nvdec", **kwargs) as frames:
            for frame in frames:
                out.append(hashlib.sha1(as_numpy(frame.array).tobytes()).hexdigest())
                if len(out) == limit:
                    break
        return out, frames.stats.decoders_reused

    fresh, reused = digests(second)
    assert len(fresh) == 128 and len(set(fresh)) > 100 and reused == 0
    pool = pipeline.DecoderPool()
    try:
        assert digests(first, decoders=pool)[1] == 0
        assert digests(first, limit=40, decoders=pool)[1] == 4  # stopped mid-segment
        frames, reused = digests(second, decoders=pool)
        assert frames == fresh and reused == 4
    finally:
        pool.close()


# --- run() with a stage ------------------------------------------------------------------------------------


def invert(frame) -> None:
    frame.planes[...] = 1 - frame.planes


@pytest.mark.parametrize("device", all_devices())
def test_run_with_a_stage_equals_the_same_work_as_a_filter(device, clip, tmp_path):
    staged = pipeline.run(clip, tmp_path / "staged.mkv", filters="gblur=sigma=1", stage=invert, device=device,
                          codec="ffv1")
    pipeline.run(clip, tmp_path / "filtered.mkv", filters="gblur=sigma=1,invert", device=device, codec="ffv1")
    a, b = decode(tmp_path / "staged.mkv"), decode(tmp_path / "filtered.mkv")
    assert len(a.frames) == FRAMES and a.pts == b.pts
    assert max(max_abs_diff(x, y) for x, y in zip(a.frames, b.frames)) <= 1
    assert staged["frames_out"] == FRAMES and staged["device"] == device
    assert staged["memory"]["device_allocs"] == 1


@pytest.mark.parametrize("device", all_devices())
def test_the_stage_sees_each_frame_once_in_order_on_its_stream(device, clip):
    seen = []

    def stage(frame):
        seen.append((frame.index, frame.pts, frame.planes.shape, frame.stream is None))

    pipeline.run(clip, "null", stage=stage, device=device)
    assert [s[0] for s in seen] == list(range(FRAMES))
    assert all(shape == (3, H, W) for _, _, shape, _ in seen)
    assert all(no_stream == (device == "cpu") for *_, no_stream in seen)


@pytest.mark.parametrize("device", all_devices())
def test_a_failing_stage_raises_stage_error_and_leaves_no_output(device, clip, tmp_path):
    def broken(frame):
        if frame.index == 5:
            raise ValueError("model exploded")

    out = tmp_path / "out.mkv"
    with pytest.raises(pipeline.StageError, match="broken.*frame 5.*model exploded") as e:
        pipeline.run(clip, out, stage=broken, device=device, codec="ffv1")
    assert isinstance(e.value.__cause__, ValueError) and e.value.stage.endswith("broken")
    assert not out.exists() and list(tmp_path.glob(".*partial*")) == []
    assert pipeline_threads() == []


def test_unknown_options_name_the_valid_ones(clip):
    with pytest.raises(pipeline.ConfigError, match="unknown option 'ringsize'.*ring_size") as e:
        pipeline.run(clip, "null", ringsize=4)
    assert isinstance(e.value, ValueError)
    with pytest.raises(pipeline.ConfigError, match="in_flight"):
        pipeline.frames(clip, in_flight=0)


def test_decoders_that_are_no_decoder_pool_are_a_config_error(clip):
    for call in (lambda: pipeline.run(clip, "null", device="cpu", decoders="pool"),
                 lambda: pipeline.frames(clip, device="cpu", decoders=object())):
        with pytest.raises(pipeline.ConfigError, match="must be a pipeline.DecoderPool"):
            call()


def test_run_returns_what_stats_json_holds(clip, tmp_path):
    stats = pipeline.run(clip, tmp_path / "out.mkv", device="cpu", codec="ffv1", filters=CHAIN)
    assert stats["frames_in"] == stats["frames_out"] == FRAMES
    assert stats["steady_device_allocs_per_frame"] == 0
    assert {"fps", "stage_ms", "memory", "latency_ms"} <= set(stats)


# --- your own source -------------------------------------------------------------------------------------


def camera(n: int, w: int = 96, h: int = 64):
    rng = np.random.default_rng(1)
    for _ in range(n):
        yield rng.integers(0, 256, (h, w, 3), dtype=np.uint8)


@pytest.mark.parametrize("device", all_devices())
def test_frames_from_a_generator_come_back_unchanged_without_filters(device):
    expected = list(camera(10))
    got = [as_numpy(f.array).copy() for f in pipeline.frames(camera(10), device=device)]
    assert len(got) == 10
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)  # rgb24 in and out: an exact round trip


def test_a_generator_through_the_pipeline_into_a_file(tmp_path):
    out = tmp_path / "camera.mkv"
    stats = pipeline.run(pipeline.ArraySource(camera(12), fps=25), out, filters="hflip", device="cpu",
                         codec="ffv1")
    got = decode(out)
    assert stats["frames_out"] == len(got.frames) == 12
    assert (got.width, got.height) == (96, 64)
    assert got.time_base is not None and got.pts[1] - got.pts[0] > 0


def test_bad_arrays_are_input_errors():
    with pytest.raises(pipeline.InputError, match="H x W x 3 uint8"):
        pipeline.frames([np.zeros((4, 4), np.float32)], device="cpu")
    with pytest.raises(pipeline.InputError, match="no frames"):
        pipeline.frames(iter(()), device="cpu")


def test_run_many_writes_one_output_per_source_and_reports_each(clip, tmp_path):
    """pipeline.run_many: the CLI's several-inputs run from Python; a bad source fails alone."""
    out = tmp_path / "out"
    out.mkdir()
    other = tmp_path / "other.mkv"
    other.write_bytes(clip.read_bytes())
    result = pipeline.run_many([clip, other, tmp_path / "missing.mp4"], out, filters=CHAIN, device="cpu",
                               codec="ffv1")
    assert [s.exit_code for s in result.streams] == [0, 0, 3] and result.exit_code == 3
    assert "missing.mp4" in result.streams[2].error
    first, second = (decode(Path(s.output)) for s in result.streams[:2])
    assert len(first.frames) == len(second.frames) == FRAMES
    assert max(max_abs_diff(a, b) for a, b in zip(first.frames, second.frames)) == 0
    assert result.totals()["frames_out"] == 2 * FRAMES
    with pytest.raises(pipeline.ConfigError, match="bogus"):
        pipeline.run_many([clip], "null", bogus=1)


def test_an_empty_source_name_and_arrays_without_an_output_are_config_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(pipeline.ConfigError, match="the input's name is empty"):
        pipeline.run("", "null", device="cpu")
    frames = [np.full((8, 8, 3), 90, np.uint8)] * 2
    with pytest.raises(pipeline.ConfigError, match="need an output"):
        pipeline.run(frames, None, device="cpu")
    assert list(tmp_path.iterdir()) == []


RGB = np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3)


@pytest.mark.parametrize("call, error, message", [
    (lambda: pipeline.run_many([None]), pipeline.ConfigError, "None among the sources is not a path"),
    (lambda: pipeline.run_many(5), pipeline.ConfigError, "run_many takes a list of sources, not 5"),
    (lambda: pipeline.frames("clip.mp4", codec="nosuch"), pipeline.ConfigError, "codec: an option of an output"),
    (lambda: pipeline.frames("clip.mp4", pix_fmt="zzz", audio="none"), pipeline.ConfigError,
     "pix_fmt, audio: options of an output; frames() writes none"),
    (lambda: pipeline.run_many(None), pipeline.ConfigError, "run_many takes a list of sources, not None"),
    (lambda: pipeline.run_many(["a.mp4"], None), pipeline.ConfigError, "run_many takes files or URLs"),
    (lambda: pipeline.run([1, 2], "null", device="cpu"), pipeline.InputError, "frames must be NumPy arrays, got int"),
    (lambda: pipeline.run([None], "null", device="cpu"), pipeline.InputError, "frames must be NumPy arrays, got NoneT"),
    (lambda: pipeline.frames({"a": 1}, device="cpu"), pipeline.InputError, "NumPy arrays, got str"),
    (lambda: pipeline.ArraySource([np.zeros((4, 4, 3), np.uint8)], fps="30"), pipeline.ConfigError,
     "Invalid fps ('30')"),
    (lambda: pipeline.ArraySource([np.zeros(24, np.uint8)], layout="i420", size=[4, 4]), pipeline.ConfigError,
     "needs size=(width, height)"),
    (lambda: pipeline.frames([np.broadcast_to(np.uint8(9), (20000, 8, 3))], device="cpu"), pipeline.InputError,
     "frame size 8x20000 is too large"),
    (lambda: pipeline.ArraySource([RGB], fps=1e-9), pipeline.ConfigError, "Invalid fps (1e-09)"),
    (lambda: pipeline.ArraySource([RGB], repeat=-1), pipeline.ConfigError, "Invalid repeat (-1)"),
    (lambda: pipeline.ArraySource([RGB], repeat=2.5), pipeline.ConfigError, "Invalid repeat (2.5)"),
    (lambda: pipeline.ArraySource([RGB], repeat=True), pipeline.ConfigError, "Invalid repeat (True)"),
    (lambda: pipeline.run(pipeline.ArraySource([np.arange(90, dtype=np.uint8)], layout="i420", size=(8, 8)),
                          "null", device="cpu"), pipeline.InputError, "is 96 uint8 bytes, got 90 uint8"),
    (lambda: pipeline.run(pipeline.ArraySource([np.ones(96, np.float32)], layout="i420", size=(8, 8)),
                          "null", device="cpu"), pipeline.InputError, "got 96 float32"),
    (lambda: pipeline.ArraySource([np.zeros(1000, np.uint8)], layout="i420", size=(9, 8)), pipeline.ConfigError,
     "needs an even width and height (4:2:0), not 9x8"),
    (lambda: pipeline.ArraySource(5), pipeline.ConfigError, "Invalid frames (int)"),
    (lambda: pipeline.run(np.array(5), "null", device="cpu"), pipeline.ConfigError, "Invalid frames (ndarray)"),
    (lambda: pipeline.run_many([RGB], "null", device="cpu"), pipeline.ConfigError,  # not its 200 lines of digits
     "run_many: <ndarray of shape (8, 8, 3) uint8> among the sources is not a path"),
    (lambda: pipeline.ArraySource([RGB], fps=np.float32), pipeline.ConfigError, "Invalid fps (<class 'numpy.float32'>)"),
    (lambda: pipeline.run([RGB, RGB.astype(np.uint16) * 300], "null", device="cpu"), pipeline.InputError,
     "frame of shape (8, 8, 3) uint16 after frames of (8, 8, 3) uint8"),  # was wrapped modulo 256
    (lambda: pipeline.run([RGB, RGB.astype(np.float64)], "null", device="cpu"), pipeline.InputError,
     "float64 after frames of"),
    (lambda: pipeline.run("clip.mp4", "null", stage="hflip"), pipeline.ConfigError, "Invalid stage (str)"),
    (lambda: pipeline.run_many(["clip.mp4"], "null", stage=5), pipeline.ConfigError, "Invalid stage (int)"),
    (lambda: pipeline.ArraySource([RGB], repeat=2**64), pipeline.ConfigError, "Invalid repeat (18446744073709551616)"),
    (lambda: pipeline.ArraySource([RGB], fps=10**5000), pipeline.ConfigError,
     "Invalid fps (<an integer of 16610 bits>)"),
    (lambda: pipeline.run("clip.mp4", "null", codec=10**5000), pipeline.ConfigError,
     "Invalid codec (an integer of 16610 bits)"),
    (lambda: pipeline.run("clip.mp4", "null", filters=10**5000), pipeline.ConfigError,
     "Invalid filters (<an integer of 16610 bits>)"),
    (lambda: pipeline.run("clip.mp4", "null", plugins=[10**5000]), pipeline.ConfigError,
     "Invalid plugins (<a list holding an integer too long to write out>)"),
    (lambda: pipeline.run("clip.mp4", "null", encoder_opts=10**5000), pipeline.ConfigError,
     "Invalid --encoder-opt (<an integer of 16610 bits>)"),
    (lambda: pipeline.ArraySource("frames"), pipeline.ConfigError, "Invalid frames (str)"),
    (lambda: pipeline.run("clip.mp4", "null", encoder_opts={"crf": 10**5000}), pipeline.ConfigError,
     "Invalid --encoder-opt 'crf' (an integer of 16610 bits)"),
    (lambda: pipeline.run("clip.mp4", "null", encoder_opts={10**5000: 1}), pipeline.ConfigError,
     "Invalid --encoder-opt <an integer of 16610 bits>=1"),
    (lambda: __import__("pipeline.batch").batch.run_batch("clip.mp4", "out"), pipeline.ConfigError,
     "run_batch takes a list of inputs"),
    (lambda: pipeline.run("clip.mp4", 5, device="cpu"), pipeline.ConfigError, "Invalid output (int)"),
    (lambda: pipeline.run("clip.mp4", "", device="cpu"), pipeline.ConfigError, "output is an empty name"),
    (lambda: pipeline.run("clip.mp4", "null", stats_json=""), pipeline.ConfigError, "stats_json is an empty name"),
    (lambda: pipeline.run("clip.mp4", "null", plugins=""), pipeline.ConfigError, "Invalid plugins ('')"),
    (lambda: pipeline.run("clip.mp4", "null", filters=["hflip"]), pipeline.ConfigError, "Invalid filters (['hflip'])"),
    (lambda: pipeline.frames("clip.mp4", filters=0), pipeline.ConfigError, "Invalid filters (0)"),
    (lambda: pipeline.run([RGB], "null", device="cpu", realtime=True), pipeline.ConfigError,
     "realtime: an option of a file or stream input"),
    (lambda: pipeline.frames([RGB], device="cpu", start=0.5, end=1), pipeline.ConfigError,
     "start, end: options of a file or stream input"),
])
def test_sources_of_the_wrong_kind_are_the_projects_errors(call, error, message):
    with pytest.raises(error, match=re.escape(message)):
        call()


@pytest.mark.parametrize("at", [0, 3])
@pytest.mark.parametrize("error", [ValueError("camera"), SystemExit(4)], ids=["ValueError", "SystemExit"])
def test_a_frame_source_that_raises_is_an_input_error_with_its_cause(at, error):
    """SystemExit too, as from a stage: ended in the decode thread, it reached the caller as the process's end."""
    def camera():
        for _ in range(at):
            yield RGB
        raise error

    with pytest.raises(pipeline.InputError, match=f"the frame source raised at frame {at}: "
                                                  f"{type(error).__name__}: {error}") as e:
        pipeline.run(camera(), "null", device="cpu")
    assert e.value.__cause__ is error
    assert pipeline_threads() == []


def test_a_filter_the_application_registers_is_blamed_when_it_fails(clip):
    from pipeline.filters import FILTERS, Filter, register_filter

    @register_filter("test_kaput")
    class Kaput(Filter):
        def cpu(self, src, dst, scratch):
            raise RuntimeError("kaput")

    try:
        with pytest.raises(pipeline.PluginError, match=r"filter 'test_kaput' from .*test_api.py failed at frame 0: "
                                                       "RuntimeError: kaput"):
            pipeline.run(clip, "null", device="cpu", filters="test_kaput")
    finally:
        FILTERS.pop("test_kaput")


def test_a_filter_registered_in_code_without_a_file_is_blamed_too(clip):
    """``python -c`` or a notebook's cell: the class's module has no ``__file__`` (its failure was a raw error)."""
    code = f"""
import pipeline
from pipeline.filters import Filter, register_filter

@register_filter("kaput_here")
class Kaput(Filter):
    def cpu(self, src, dst, scratch):
        raise ValueError("kaput")

try:
    pipeline.run({str(clip)!r}, "null", device="cpu", filters="kaput_here")
except pipeline.PluginError as e:
    print(e)
"""
    result = run_python("-c", code, timeout=60)
    assert result.stdout.strip() == "filter 'kaput_here' from __main__ failed at frame 0: ValueError: kaput", \
        result.stderr


_WAITING_CAMERA = """
import _thread, threading, time
import av, numpy as np
import pipeline

def threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("pipeline-")]

waiting = threading.Event()

def camera(frames, stopped):  # nothing more after its first frames until the application stops it
    for i in range(frames):
        yield np.full((48, 64, 3), 40 * i, np.uint8)
    waiting.set()
    stopped.wait()
    yield np.zeros((48, 64, 3), np.uint8)
"""


@pytest.mark.parametrize("device", all_devices())
def test_leaving_frames_of_a_waiting_iterable_does_not_wait_for_it(device):
    """The stop waited for the thread inside the application's generator: break hung until it yielded,
    which it would only do once the application went on past the break."""
    code = _WAITING_CAMERA + f"""
stopped = threading.Event()
for frame in pipeline.frames(camera(3, stopped), device={device!r}):
    if frame.index == 2:
        waiting.wait(10)  # the run has asked for the next frame, which the camera does not give
        break
print(threads())  # the generator's reader, still inside it
stopped.set()
deadline = time.monotonic() + 10
while threads() and time.monotonic() < deadline:
    time.sleep(0.05)
print(threads())
"""
    result = run_python("-c", code, timeout=60)
    assert result.returncode == 0 and result.stdout.split("\n")[:2] == ["['pipeline-frames']", "[]"], result


def test_a_generator_refilling_one_buffer_and_a_stop_take_the_frames_they_took_before():
    """Frames read ahead on the thread of their own: the refilled buffer was overwritten before its copy
    (frames 50, 60, ... 90, 90, 90), and the frames read ahead of a stop were dropped unseen, uncounted."""
    buffer = np.zeros((16, 16, 3), np.uint8)

    def refilled():
        for i in range(12):
            buffer[...] = 10 * i
            yield buffer

    assert [int(f.array[0, 0, 0]) for f in pipeline.frames(refilled(), device="cpu")] == [10 * i for i in range(12)]
    pulled, holder = [], []

    def stops_its_run():
        for i in range(40):
            pulled.append(i)
            if i == 10:
                holder[0].stop()
            yield np.full((16, 16, 3), i, np.uint8)

    run = pipeline.Pipeline.from_config(pipeline.RunConfig(input="<frames>", output="null", device="cpu"),
                                        source=pipeline.ArraySource(stops_its_run()))
    holder.append(run)
    with pytest.raises(pipeline.Interrupted):
        run.run()
    assert (len(pulled), run.stats.frames_out) == (11, 10) and pipeline_threads() == []


def test_the_frames_thread_runs_the_backends_set_up_and_closes_the_iterator_itself(caplog):
    """The application's generator ran on the run's GPU in the decode thread: its own thread makes that GPU
    current first. A generator whose clean-up fails once the run is over is a line in the log, not a
    thread's traceback."""
    import threading

    seen = []

    def frames():
        try:
            for i in range(3):
                seen.append(threading.current_thread().name)
                yield np.full((16, 16, 3), i, np.uint8)
        finally:
            raise RuntimeError("the camera would not close")

    source = pipeline.ArraySource(frames())
    stop = threading.Event()
    entries = source.items(stop=stop, on_thread=lambda: seen.append("set up"))
    assert [next(entries).meta.index for _ in range(2)] == [0, 1]
    stop.set()
    entries.close()
    source.close()
    deadline = time.monotonic() + 10
    while pipeline_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    # The first frame is taken where the source is made (its size is the run's), the others on their thread.
    assert pipeline_threads() == [] and seen[:2] == ["MainThread", "set up"] and set(seen[2:]) == {"pipeline-frames"}
    assert "the camera would not close" in caplog.text


@pytest.mark.gpu
def test_a_generator_using_cupy_runs_on_the_runs_gpu_in_its_own_thread():
    """A new thread has no CUDA context current (the driver's current context is NULL): the generator's own
    thread makes the run's current before the application's code runs there. Frames are NumPy arrays; a
    CuPy one is refused naming its module."""
    import threading

    import cupy

    seen = []

    def frames():
        for i in range(6):
            # read before any CUDA call of this code's own, which would make a context current itself
            seen.append((threading.current_thread().name, cupy.cuda.driver.ctxGetCurrent()))
            yield cupy.full((32, 48, 3), 30 * i + 7, cupy.uint8).get()  # made on the GPU, as a camera's SDK might

    got = [int(as_numpy(f.array)[5, 5, 0]) for f in pipeline.frames(frames(), device="cuda", filters="invert")]
    assert got == [255 - (30 * i + 7) for i in range(6)]
    run_context = cupy.cuda.driver.ctxGetCurrent()
    assert run_context != 0 and {name for name, _ in seen[1:]} == {"pipeline-frames"}
    assert {context for _, context in seen[1:]} == {run_context}
    with pytest.raises(pipeline.InputError, match=r"got cupy\.ndarray \(\.get\(\) gives"):
        list(pipeline.frames([cupy.zeros((32, 48, 3), cupy.uint8)], device="cuda"))


def test_only_frames_from_code_are_read_on_a_thread_of_their_own():
    """A list or an array cannot wait: read in the decode stage, as the bench's gpu scope measures it."""
    assert not any(pipeline.ArraySource(frames).read_apart for frames in ([RGB], (RGB,), np.stack([RGB, RGB])))
    assert pipeline.ArraySource([RGB], repeat=3).read_apart is False
    assert pipeline.ArraySource(iter([RGB])).read_apart and pipeline.ArraySource(f for f in [RGB]).read_apart


@pytest.mark.parametrize("device", all_devices())
def test_ctrl_c_in_run_of_a_waiting_iterable_keeps_the_frames_done(tmp_path, device):
    """Each Ctrl-C only set abort while the run waited for the generator's thread: the call never returned."""
    out = tmp_path / "out.mp4"
    code = _WAITING_CAMERA + f"""
stopped = threading.Event()
threading.Timer(1.0, _thread.interrupt_main).start()
try:
    pipeline.run(camera(2, stopped), {str(out)!r}, device={device!r})
except KeyboardInterrupt:
    with av.open({str(out)!r}) as back:
        print("KeyboardInterrupt", len(list(back.decode(video=0))))
stopped.set()
"""
    result = run_python("-c", code, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "KeyboardInterrupt 2", result


def test_a_pipeline_object_runs_once(clip):
    run = pipeline.Pipeline.from_config(pipeline.RunConfig(input=str(clip), output="null", device="cpu", frames=2))
    assert run.run().frames_out == 2
    with pytest.raises(pipeline.ConfigError, match="runs once"):
        run.run()
    assert pipeline_threads() == []


def test_a_closed_pipeline_a_config_not_a_runconfig_and_empty_names_are_config_errors(clip, tmp_path):
    """A closed Pipeline's run said "no frames decoded" (a bad input, exit 3); from_config(None) was an
    AttributeError; RunConfig(output="") wrote the default file, stats_json="" meant no report."""
    closed = pipeline.Pipeline.from_config(pipeline.RunConfig(input=str(clip), output="null", device="cpu"))
    closed.close()
    with pytest.raises(pipeline.ConfigError, match="this Pipeline is closed"):
        closed.run()
    for cfg in (None, {"input": str(clip)}):
        with pytest.raises(pipeline.ConfigError, match="Supported values are RunConfig objects"):
            pipeline.Pipeline.from_config(cfg)
    for name, hint in (("output", "the default"), ("stats_json", "none")):
        with pytest.raises(pipeline.ConfigError, match=f"{name} is an empty name .*leave it out for {hint}"):
            pipeline.RunConfig(input=str(clip), **{name: ""})
    assert pipeline_threads() == [] and list(tmp_path.iterdir()) == []


def test_frames_of_a_pipeline_with_an_output_are_refused_and_a_pipeline_never_run_leaves_no_file(clip, tmp_path):
    """Its frames go to its sink: a caller pulling them would wait forever for frames the sink holds."""
    import gc

    out = tmp_path / "out.mkv"
    run = pipeline.Pipeline.from_config(pipeline.RunConfig(input=str(clip), output=str(out), device="cpu"))
    assert partials(tmp_path)  # the output is checked and staged at build
    with pytest.raises(pipeline.ConfigError, match=r"writes an output: run\(\) it"):
        run.frames()  # at once, not at the first frame
    run.close()
    assert list(tmp_path.iterdir()) == [] and pipeline_threads() == []
    def open_here() -> list[str]:  # descriptors open on files of tmp_path, removed ones included
        links = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                links.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:  # the listing's own descriptor, closed by now
                pass
        return [link for link in links if link.startswith(str(tmp_path))]

    never_run = pipeline.Pipeline.from_config(pipeline.RunConfig(input=str(clip), output=str(out), device="cpu"))
    assert partials(tmp_path) and open_here()
    del never_run
    gc.collect()
    assert list(tmp_path.iterdir()) == []
    assert open_here() == []  # the temporary file's stayed open, removed: its container and streams, a cycle
    assert pipeline.run(clip, out, device="cpu", frames=2)["frames_out"] == 2  # a completed run's is kept
    gc.collect()
    assert [p.name for p in tmp_path.iterdir()] == ["out.mkv"]


def test_an_array_source_gives_its_frames_to_one_run():
    source = pipeline.ArraySource([RGB] * 3, fps=np.float32(25))
    assert pipeline.run(source, "null", device="cpu")["frames_out"] == 3
    with pytest.raises(pipeline.ConfigError, match="gives its frames to one run"):
        pipeline.run(source, "null", device="cpu")


def test_a_path_given_as_bytes_is_a_path(clip):
    import os

    assert pipeline.run(os.fsencode(clip), b"null", device="cpu", frames=2)["frames_out"] == 2
    assert pipeline.run(bytearray(os.fsencode(clip)), "null", device="cpu", frames=2)["frames_out"] == 2


def test_stats_json_is_written_by_run_and_run_many_and_refused_by_frames(clip, tmp_path):
    """As ``--stats-json``: written after the run, an existing file kept unless overwrite=True."""
    import json

    report = tmp_path / "run.json"
    pipeline.run(clip, "null", device="cpu", stats_json=report, frames=3)
    assert json.loads(report.read_text())["frames_out"] == 3
    with pytest.raises(pipeline.ConfigError, match="already exists"):
        pipeline.run(clip, "null", device="cpu", stats_json=report, frames=2)
    pipeline.run(clip, "null", device="cpu", stats_json=report, frames=2, overwrite=True)
    assert json.loads(report.read_text())["frames_out"] == 2
    many = tmp_path / "many.json"
    pipeline.run_many([clip, clip], "null", device="cpu", stats_json=many, frames=2)
    assert len(json.loads(many.read_text())["streams"]) == 2
    with pytest.raises(pipeline.ConfigError, match="iterator's .stats"):
        pipeline.frames(clip, device="cpu", stats_json=tmp_path / "f.json")


# Run in a fresh process: threads other tests leave behind (Dask's offload and callback threads live as
# long as the process) make cyclic garbage of their own while the run is measured.
CYCLES_AFTER_A_RUN = """
import gc, json, sys
import pipeline
clip, how, device, out = sys.argv[1:]

def once():
    if how == "frames":
        with pipeline.frames(clip, device=device) as frames:
            for _ in frames:
                pass
    else:
        pipeline.run(clip, "null" if how == "null" else out, device=device, overwrite=True)

once()  # caches filled (codecs, kernels, lazily built tables)
gc.collect()
gc.set_debug(gc.DEBUG_SAVEALL)
once()
found = gc.collect()
print(json.dumps([found, sorted({type(o).__qualname__ for o in gc.garbage})]))
"""


@pytest.mark.parametrize("device", all_devices())
@pytest.mark.parametrize("how", ["null", "file", "frames"])
def test_a_run_leaves_no_reference_cycles(device, how, clip, tmp_path):
    """Everything a run held is freed when its last reference goes, not at a later full collection: a
    process running file after file (a batch worker) would otherwise hold decoders, frames and buffers
    of past runs, and grow between collections."""
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", CYCLES_AFTER_A_RUN, str(clip), how, device, str(tmp_path / "out.mkv")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    found, kinds = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found == 0, kinds


@pytest.mark.parametrize("ending", ["next(it)", "", "next(it); sys.exit(3)",
                                    "def main():\n    for f in it: raise KeyError\nmain()"],
                         ids=["one-frame-taken", "none-taken", "sys-exit", "uncaught-exception"])
def test_an_iterator_left_open_does_not_keep_the_program_from_ending(clip, ending):
    """Left to __del__ at the interpreter's finalisation, its close waited forever on the decoder's drain."""
    code = f"import sys, pipeline\nit = pipeline.frames({str(clip)!r}, device='cpu')\n{ending}\n"
    result = run_python("-c", code, timeout=60)
    assert result.returncode in (0, 1, 3) and "Fatal" not in result.stderr, result.stderr
    assert result.returncode == (3 if "exit" in ending else 1 if "raise" in ending else 0), result.stderr


def test_a_ctrl_c_while_frames_joins_its_threads_still_joins_them(clip, monkeypatch):
    """frames()'s end waited for its threads unguarded: a Ctrl-C there went straight on, and the source and
    memory were closed under threads still running."""
    from pipeline import engine

    real, calls = engine.wait_for_all, []

    def interrupted_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "wait_for_all", interrupted_once)
    frames = pipeline.frames(clip, device="cpu")
    next(iter(frames))
    with pytest.raises(KeyboardInterrupt):
        frames.close()
    assert len(calls) == 2 and pipeline_threads() == []
