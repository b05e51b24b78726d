"""The command's exit (:func:`pipeline.cli.entry`): out of the process without the interpreter's tear-down,
with everything a normal exit would give its user: the exit code, the output and statistics in place,
the summary flushed into a pipe, the exit handlers run, a non-daemon thread waited for."""

from __future__ import annotations

import json

from tests.utils import pipeline_command, run_command

PLUGIN = """
import atexit
import os
import threading
import time

from pipeline.filters import Filter, register_filter

MARK = os.environ["EXIT_MARK"]


def mark(what):
    with open(MARK, "a") as f:
        f.write(what + "\\n")


atexit.register(mark, "atexit")
if os.environ.get("EXIT_THREAD"):
    def late():
        time.sleep(0.5)
        mark("thread")

    threading.Thread(target=late, daemon=False).start()


@register_filter("passthrough_exit")
class Passthrough(Filter):
    help = "copies the frame"
    params = ()

    def cpu(self, src, dst, scratch):
        dst[...] = src

    def cuda(self, src, dst, scratch):
        dst[...] = src
"""


def _run(tmp_path, clip, *extra, thread=False, quiet=True):
    plugin = tmp_path / "exit_plugin.py"
    plugin.write_text(PLUGIN)
    mark = tmp_path / "mark.txt"
    env = {**__import__("os").environ, "EXIT_MARK": str(mark), **({"EXIT_THREAD": "1"} if thread else {})}
    cmd = pipeline_command(clip, "-o", tmp_path / "out.mp4", "--plugin", plugin, "--filters", "passthrough_exit",
                           "--frames", "6", "--stats-json", tmp_path / "stats.json", *extra, quiet=quiet)
    return run_command(cmd, env=env), mark


def test_a_run_exits_with_its_output_statistics_and_summary_and_the_exit_handlers_run(tmp_path, clip):
    done, mark = _run(tmp_path, clip, quiet=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.mp4").stat().st_size > 0
    assert json.loads((tmp_path / "stats.json").read_text())["frames_out"] == 6
    assert "wrote" in done.stdout.splitlines()[-1]  # the summary's last line reached the pipe
    assert mark.read_text().split() == ["atexit"]


def test_a_failed_run_keeps_its_exit_code(tmp_path, clip):
    done, mark = _run(tmp_path, tmp_path / "missing.mp4")
    assert done.returncode == 3, done.stderr
    assert "missing.mp4" in done.stderr


def test_a_thread_that_is_not_a_daemon_is_waited_for(tmp_path, clip):
    done, mark = _run(tmp_path, clip, thread=True)
    assert done.returncode == 0, done.stderr
    assert sorted(mark.read_text().split()) == ["atexit", "thread"]


def _run_in_process(tmp_path, clip, monkeypatch, *, process_ends: bool, slow: bool = True):
    from pipeline import engine
    from pipeline.config import RunConfig
    from pipeline.source import Source

    closed = []
    monkeypatch.setattr(Source, "frees_slowly", property(lambda self: slow))
    real_close = Source.close
    monkeypatch.setattr(Source, "close", lambda self: closed.append(self) or real_close(self))
    control = engine.RunControl()
    control.process_ends = process_ends
    out = tmp_path / f"out_{process_ends}_{slow}.mp4"
    cfg = RunConfig(input=str(clip), output=str(out), device="cpu", quiet=True)
    pipeline = engine.Pipeline.from_config(cfg, control=control)
    stats = pipeline.run()
    assert stats.frames_out == 6 and out.stat().st_size > 0
    return pipeline.source, closed


def test_a_source_that_frees_slowly_is_left_to_the_exit_of_a_process_that_ends(tmp_path, clip, monkeypatch):
    from pipeline import teardown

    source, closed = _run_in_process(tmp_path, clip, monkeypatch, process_ends=True)
    try:
        assert closed == [] and teardown._LEFT_TO_EXIT[-1] is source
    finally:
        teardown._LEFT_TO_EXIT.remove(source)
        source.close()


def test_otherwise_the_source_is_closed(tmp_path, clip, monkeypatch):
    from pipeline import teardown

    for process_ends, slow in ((False, True), (True, False)):
        source, closed = _run_in_process(tmp_path, clip, monkeypatch, process_ends=process_ends, slow=slow)
        assert closed == [source] and source not in teardown._LEFT_TO_EXIT


def test_every_error_survives_pickling_with_its_message_and_exit_code():
    """A batch worker's error reaches the batch pickled (Dask): Interrupted, made from a signal number, was
    rebuilt from its message and raised a TypeError there instead."""
    import copy
    import pickle

    from pipeline import errors

    made = [errors.Interrupted(15, "nothing written"), errors.Interrupted(None), errors.StageError("boom", "mine")]
    made += [cls(f"a {cls.__name__}") for cls in vars(errors).values()
             if isinstance(cls, type) and issubclass(cls, errors.PipelineError)
             and cls not in (errors.Interrupted, errors.StageError)]
    assert len(made) > 8
    for error in made:
        for back in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
            assert (type(back), str(back), back.exit_code) == (type(error), str(error), error.exit_code)
            assert getattr(back, "stage", None) == getattr(error, "stage", None)
