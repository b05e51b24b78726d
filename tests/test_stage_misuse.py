"""A user's stage used in ways that did nothing, or failed outside the stage's own error: a frame replaced or
reshaped instead of written in place, an async or generator function, an exception that cannot say itself."""

from __future__ import annotations

import numpy as np
import pytest
from utils import all_devices, pipeline_threads

import pipeline


def _rebinds(frame):
    frame.planes = frame.planes * 0.5  # a new array: the frame went on unchanged


def _retypes(frame):
    frame.planes.dtype = np.uint8  # the same bytes read as four times as many values


def _reshapes(frame):
    frame.planes.shape = (frame.planes.shape[0], -1)


def _deletes(frame):
    del frame.planes  # the check after the stage read it: AttributeError, not the stage's error


@pytest.mark.filterwarnings("ignore:Setting the (dtype|shape):DeprecationWarning")  # NumPy 2.5: the misuse itself
@pytest.mark.parametrize("device", all_devices())
@pytest.mark.parametrize("stage", [_rebinds, _retypes, _reshapes, _deletes],
                         ids=["rebinds", "retypes", "reshapes", "deletes"])
def test_a_stage_that_replaces_or_reshapes_the_frame_is_a_stage_error(device, clip, tmp_path, stage):
    out = tmp_path / "out.mkv"
    with pytest.raises(pipeline.StageError, match=f"{stage.__name__}.*frame 0") as e:
        pipeline.run(clip, out, stage=stage, device=device, codec="ffv1")
    assert "in place" in str(e.value) or e.value.__cause__ is not None  # CuPy may refuse the change itself
    assert not out.exists() and list(tmp_path.iterdir()) == []
    assert pipeline_threads() == []


async def _async_stage(frame):
    frame.planes[...] = 0


def _generator_stage(frame):
    frame.planes[...] = 0
    yield


@pytest.mark.parametrize("stage, kind", [(_async_stage, "an async function"),
                                         (_generator_stage, "a generator function")])
def test_a_stage_whose_call_does_not_run_its_body_is_refused(clip, tmp_path, stage, kind):
    """Called, it returned a coroutine or a generator and the frames went on unchanged, the run a success."""
    with pytest.raises(pipeline.ConfigError, match=f"Invalid stage .*{stage.__name__}.*{kind}"):
        pipeline.run(clip, tmp_path / "out.mkv", stage=stage, device="cpu")
    assert list(tmp_path.iterdir()) == []


class _Unsayable(Exception):
    def __str__(self):
        raise RuntimeError("no words")


def test_an_exception_that_cannot_say_itself_is_still_the_stages_error(clip, tmp_path):
    def mute(frame):
        raise _Unsayable()

    with pytest.raises(pipeline.StageError, match="_Unsayable: .its message could not be read") as e:
        pipeline.run(clip, tmp_path / "out.mkv", stage=mute, device="cpu")
    assert isinstance(e.value.__cause__, _Unsayable)


@pytest.mark.parametrize("raised", [SystemExit(3), GeneratorExit()], ids=["SystemExit", "GeneratorExit"])
def test_a_stage_that_exits_fails_the_run_not_the_callers_program(clip, tmp_path, raised):
    """SystemExit went past the run to the caller, ending a program that had only asked for one run."""
    def leaves(frame):
        if frame.index == 2:
            raise raised

    out = tmp_path / "out.mkv"
    with pytest.raises(pipeline.StageError, match=f"leaves.*frame 2: {type(raised).__name__}") as e:
        pipeline.run(clip, out, stage=leaves, device="cpu")
    assert e.value.__cause__ is raised
    assert list(tmp_path.iterdir()) == []
    assert pipeline_threads() == []


def test_a_keyboard_interrupt_from_the_stage_reaches_the_caller_with_no_output(clip, tmp_path):
    def stops(frame):
        if frame.index == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pipeline.run(clip, tmp_path / "out.mkv", stage=stops, device="cpu")
    assert list(tmp_path.iterdir()) == []
    assert pipeline_threads() == []


def test_a_failure_in_the_callers_thread_stops_and_joins_the_run_before_it_closes(clip, tmp_path, monkeypatch):
    """What the caller's thread runs while it waits (the preview window, the GPU watchdog) failing ended the
    run with its threads still running: the output was finished and kept under the encoder still writing."""
    import time

    from pipeline.engine import Pipeline

    ticks = {"n": 0}
    tick = Pipeline._tick

    def failing_tick(self):
        ticks["n"] += 1
        if ticks["n"] == 3:
            raise RuntimeError("the caller's part failed")
        tick(self)

    monkeypatch.setattr(Pipeline, "_tick", failing_tick)
    with pytest.raises(RuntimeError, match="the caller's part failed"):
        pipeline.run(clip, tmp_path / "out.mkv", stage=lambda frame: time.sleep(0.05), device="cpu")
    assert pipeline_threads() == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", ["draining", "flushing"])
def test_a_ctrl_c_while_the_run_ends_leaves_no_temporary_file_and_frees_the_name(clip, tmp_path, monkeypatch, where):
    """A KeyboardInterrupt in the caller's thread while the frames in flight drained or the encoder flushed
    left the temporary file, and the output's name claimed: every later run() into it in this process was
    refused as "another run in this process is writing it now"."""
    from pipeline.audio_out import AudioOut
    from pipeline.teardown import Teardown

    def interrupted(*args):
        raise KeyboardInterrupt

    if where == "draining":
        monkeypatch.setattr(Teardown, "_drain_leftovers", interrupted)
    else:  # the audio's flush comes between the encoder's and the container's close
        monkeypatch.setattr(AudioOut, "flush", interrupted)
    out = tmp_path / "out.mkv"
    with pytest.raises(KeyboardInterrupt):
        pipeline.run(clip, out, device="cpu", codec="ffv1")
    assert list(tmp_path.iterdir()) == [] and pipeline_threads() == []
    monkeypatch.undo()
    assert pipeline.run(clip, out, device="cpu", codec="ffv1", frames=3)["frames_out"] == 3


def test_an_output_that_cannot_be_kept_still_says_why_the_run_ended(clip, tmp_path, monkeypatch):
    """A GPU failure mid-run keeps the frames done; when finishing that output failed too, the GPU's error
    was gone from the message and the exception."""
    from pipeline.audio_out import AudioOut
    from pipeline.errors import GPUError, OutputError
    from pipeline.stages import Stages

    encode_frame = Stages._encode_frame

    def failing_gpu(self, item, lent):
        if item.meta.index == 3:
            raise GPUError("CUDA error: an illegal memory access was encountered")
        encode_frame(self, item, lent)

    def disk_full(self):
        raise OutputError("out.mkv: write failed: No space left on device")

    monkeypatch.setattr(Stages, "_encode_frame", failing_gpu)
    monkeypatch.setattr(AudioOut, "flush", disk_full)
    with pytest.raises(pipeline.OutputError, match="No space left on device .the run had ended: CUDA error") as e:
        pipeline.run(clip, tmp_path / "out.mkv", device="cpu", codec="ffv1")
    assert isinstance(e.value.__cause__, GPUError)
    assert list(tmp_path.iterdir()) == [] and pipeline_threads() == []
