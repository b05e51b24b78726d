"""Signals mid-run, on the CLI as a subprocess.

SIGINT/SIGTERM/SIGHUP: in-flight frames drained, encoder flushed, container finalised, exit 130/143/129
(SIGHUP also when it comes from a terminal that closed, which takes stderr with it); a second signal
exits at once with no output, and so does SIGQUIT; SIGKILL leaves the target untouched (the work goes to
a temporary file renamed into place only when complete).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from utils import (partials, pipeline_command, pipeline_threads, read_json, run_pipeline, run_python, video_times,
                   wait_until)

from pipeline import cli, engine
from pipeline.errors import SIGNAL_ECHO_S
from pipeline.sample import make_clip

FRAMES = 240
# Heavy enough on 2 cores (about 50 fps) that a signal sent after the first frames lands mid-run.
SLOW_CHAIN = "gblur=sigma=8,gblur=sigma=8"


@pytest.fixture(scope="module")
def long_clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("signals") / "long.mp4"
    return make_clip(path, width=640, height=360, frames=FRAMES, options={"preset": "ultrafast"})


def start(src: Path, out: Path) -> subprocess.Popen:
    cmd = pipeline_command(src, "-o", out, "--filters", SLOW_CHAIN, "--ring-size", "16", "--in-flight", "8")
    return subprocess.Popen(cmd, cwd=out.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_progress(proc: subprocess.Popen, out: Path, settle: float = 1.0) -> None:
    """Until the run has started writing (the temporary file and its header exist), then ``settle``
    seconds of processing (some 50 frames here). The file's size says nothing finer: the encoder's
    look-ahead and the muxer's write buffer hold back the first hundreds of kilobytes."""
    wait_until(lambda: partials(out.parent), proc, "progress", timeout=30)
    time.sleep(settle)
    assert proc.poll() is None, "finished before the signal: make the run slower"


def test_ctrl_c_while_the_command_imports_its_modules_is_exit_130_and_one_line(tmp_path):
    """The Ctrl-C lands while a module being imported makes a dataclass (code run through exec() of a
    string): the interpreter then marks itself to end by SIGINT, which an exit code does not undo."""
    code = """
import importlib.abc, importlib.machinery, sys

class Loader(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        exec("raise KeyboardInterrupt")  # as inside dataclasses' generated __init__, when the Ctrl-C comes

class Finder:
    def find_spec(self, name, path, target=None):
        return importlib.machinery.ModuleSpec(name, Loader()) if name == "pipeline.cli" else None

sys.meta_path.insert(0, Finder())
from pipeline.launch import entry
entry()
"""
    (tmp_path / "interrupted_import.py").write_text(code)
    result = run_python("-m", "interrupted_import", cwd=tmp_path)  # as `python -m pipeline` runs
    assert result.returncode == 130 and result.stderr == "pipeline: interrupted\n", result


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)],
                         ids=["INT", "TERM", "HUP"])
def test_first_signal_drains_and_finalises(tmp_path, long_clip, signum, code):
    out = tmp_path / "out.mp4"
    proc = start(long_clip, out)
    wait_for_progress(proc, out)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "interrupted by" in lines[0] and "Traceback" not in err
    done = int(lines[0].split("holds the ")[1].split()[0])
    assert 0 < done < FRAMES
    times = video_times(out)  # playable, and exactly the frames done, with the input's timestamps
    assert len(times) == done
    assert times == video_times(long_clip)[:done]
    assert partials(out.parent) == []


def _second_signal_during_drain(tmp_path: Path, src: Path, blurs: int) -> tuple[subprocess.Popen, str, float] | None:
    """SIGINT, then SIGINT again once past the first's echo window (timeout's), while the frames in flight
    still drain through ``blurs`` blurs each. None where the run had finished before the second came."""
    out = tmp_path / "out.mp4"
    chain = ",".join(["gblur=sigma=8"] * blurs)
    cmd = pipeline_command(src, "-o", out, "--filters", chain, "--ring-size", "16", "--in-flight", "8")
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_progress(proc, out)
    proc.send_signal(signal.SIGINT)
    time.sleep(SIGNAL_ECHO_S + 0.15)
    if proc.poll() is not None:
        proc.communicate()
        return None
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 130 and "again" not in err and "interrupted by" in err:
        return None  # the drain ended between the check and the signal
    return proc, err, time.monotonic() - t0


def test_second_signal_exits_at_once_without_output(tmp_path, long_clip):
    # How long the drain takes depends on the machine's load (a full suite on two cores once drained
    # twelve blurs before the second signal came): a run that drained first says nothing, so the next
    # try drains through a longer chain.
    for blurs in (12, 48, 192):
        for leftover in [tmp_path / "out.mp4", *partials(tmp_path)]:
            leftover.unlink(missing_ok=True)
        result = _second_signal_during_drain(tmp_path, long_clip, blurs)
        if result is not None:
            break
    else:
        pytest.fail("every run had drained before its second signal")
    proc, err, waited = result
    assert proc.returncode == 130, err
    assert "again" in err and "Traceback" not in err
    assert waited < 5
    assert not (tmp_path / "out.mp4").exists() and partials(tmp_path) == []


def test_sigkill_leaves_the_target_untouched_and_the_next_run_clean(tmp_path, long_clip):
    out = tmp_path / "out.mp4"
    proc = start(long_clip, out)
    wait_for_progress(proc, out)
    proc.kill()
    proc.wait(timeout=30)
    assert not out.exists()  # never a half-written target
    stale = partials(out.parent)
    assert len(stale) == 1  # the temporary file of the killed run
    result = run_pipeline(long_clip, "-o", out, "--frames", "5", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(video_times(out)) == 5
    assert partials(out.parent) == []  # the dead run's leftover was removed


def test_signal_after_exactly_n_frames_in_process(tmp_path, long_clip, monkeypatch, capsys, restore_signals):
    """The same path, timed precisely: the encode thread signals the process after frame 20."""
    real_init = engine.Pipeline.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.on_frame = lambda stats: stats.frames_out == 20 and os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(engine.Pipeline, "__init__", init)
    out = tmp_path / "out.mp4"
    code = cli.main(["run", str(long_clip), "-o", str(out), "--device", "cpu", "-q", "--filters", "",
                     "--frames", str(FRAMES)])
    err = capsys.readouterr().err
    assert code == 143, err
    done = int(err.split("holds the ")[1].split()[0])
    assert 20 <= done < FRAMES  # the frames in flight when the signal came were finished, not dropped
    assert video_times(out) == video_times(long_clip)[:done]
    assert partials(out.parent) == []
    assert pipeline_threads() == []


def test_a_second_signal_while_frames_are_placed_lets_them_all_be_placed(tmp_path, long_clip, monkeypatch, capfd,
                                                                         restore_signals):
    """An image sequence is moved into place frame by frame: a second signal then must not stop half-way,
    leaving new frames beside the old ones of the same names; a third one exits at once. The run had all its
    frames before the signals came: it ends as complete."""
    from pipeline import outfile

    old = [tmp_path / f"f{i:03d}.png" for i in range(1, 11)]
    for path in old:
        path.write_bytes(b"old frame")
    real_place, placed = outfile.place_output, []

    def place(tmp, final, overwrite, name=None):
        real_place(tmp, final, overwrite, name)
        placed.append(final.name)
        if len(placed) == 3:  # the first signal, and the second while frames are still to be placed
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)

    def exit_now(code):
        raise AssertionError(f"exited at once ({code}) with {len(placed)} frames placed")

    monkeypatch.setattr(outfile, "place_output", place)
    monkeypatch.setattr(os, "_exit", exit_now)
    monkeypatch.setattr("pipeline.errors.SIGNAL_ECHO_S", 0)  # the two signals back to back are two
    code = cli.main(["run", str(long_clip), "-o", str(tmp_path / "f%03d.png"), "-y", "--device", "cpu", "-q",
                     "--filters", "", "--frames", "10"])
    err = capfd.readouterr().err  # the handler writes to the descriptor
    assert code == 0, err
    assert "being moved into place" in err and "Traceback" not in err
    assert len(placed) == 10 and all(path.read_bytes()[:4] == b"\x89PNG" for path in old)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name for path in old]  # no staging left


class _Run:
    """What RunControl needs of a run: its sink's staged output, and the Pipeline's own methods on it."""

    discard_output = engine.Pipeline.discard_output
    placing = engine.Pipeline.placing
    staged_sequence = engine.Pipeline.staged_sequence

    def __init__(self, staged):
        self.sink = type("Sink", (), {"staged": staged})()


def _staged(tmp_path: Path, name: str):
    from pipeline.sequence import StagedSequence

    staging = StagedSequence(tmp_path / name)
    staging.prepare()
    (staging.dir / name.replace("%02d", "01")).write_bytes(b"frame")
    return staging


def test_while_one_run_places_its_frames_no_run_loses_its_output(tmp_path):
    """Several runs side by side: a second signal while one places its frames drops nothing, so that
    every run finishes as after the first signal; forced (a third signal, SIGQUIT), every staging goes."""
    import weakref

    placing, other = _staged(tmp_path, "a%02d.png"), _staged(tmp_path, "b%02d.png")
    runs = [_Run(placing), _Run(other)]
    control = engine.RunControl()
    control.pipelines = [weakref.ref(r) for r in runs]
    placing.placing = True
    assert not control.discard_output()
    assert placing.dir.exists() and other.dir.exists()
    assert control.discard_output(force=True)
    assert not placing.dir.exists() and not other.dir.exists()


def test_a_staging_discarded_first_is_never_placed(tmp_path):
    from pipeline.errors import OutputError

    staging = _staged(tmp_path, "f%02d.png")
    assert staging.hold()
    staging.discard_held()
    assert not staging.dir.exists()
    staging.dir.mkdir()
    (staging.dir / "f01.png").write_bytes(b"frame")  # as if the encoder wrote on meanwhile
    with pytest.raises(OutputError, match="discarded"):
        staging.place(True, tmp_path / "f%02d.png")
    assert not (tmp_path / "f01.png").exists()


@pytest.mark.parametrize("last", [signal.SIGINT, signal.SIGQUIT], ids=["third", "SIGQUIT"])
def test_a_third_signal_or_sigquit_while_placing_drops_the_staging_and_exits(tmp_path, monkeypatch, capfd,
                                                                            restore_signals, last):
    import weakref

    staging = _staged(tmp_path, "f%02d.png")
    staging.placing = True
    run, control = _Run(staging), engine.RunControl()
    control.pipelines = [weakref.ref(run)]
    exits, kills = [], []
    monkeypatch.setattr(os, "_exit", lambda code: exits.append(code))
    monkeypatch.setattr(os, "kill", lambda pid, signum: kills.append(signum))  # SIGQUIT's own default action
    monkeypatch.setattr("pipeline.errors.SIGNAL_ECHO_S", 0)  # the signals back to back are each one
    cli._install_signal_handlers(control)
    control.stop(signal.SIGINT)  # the first signal came before
    signal.raise_signal(signal.SIGINT)  # the second: the frames are placed first
    assert exits == [] and staging.dir.exists()
    if last == signal.SIGINT:
        signal.raise_signal(signal.SIGINT)
        assert exits == [130]
    else:
        signal.raise_signal(signal.SIGQUIT)
        assert kills == [signal.SIGQUIT]
    assert not staging.dir.exists()
    err = capfd.readouterr().err
    assert "being moved into place" in err and "some frames placed" in err and "Traceback" not in err


def _in_session_of(tty: int, cmd: list[str]) -> list[str]:
    """``cmd`` run as the leader of a new session whose controlling terminal is ``tty`` (its stdin), as a
    shell in a terminal window runs it: closing the terminal then sends it SIGHUP."""
    code = ("import fcntl, os, sys, termios; os.setsid(); fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
            "os.execv(sys.argv[1], sys.argv[1:])")
    return [cmd[0], "-c", code, *cmd]


def test_a_terminal_that_closes_ends_the_run_as_sighup_with_a_playable_output(tmp_path, long_clip):
    """The progress bar and the last line go to the terminal, which is gone: the run still exits 129."""
    import pty
    import select

    out = tmp_path / "out.mp4"
    master, slave = pty.openpty()
    cmd = pipeline_command(long_clip, "-o", out, "--filters", SLOW_CHAIN, "--stats-json", tmp_path / "s.json",
                           quiet=False)
    proc = subprocess.Popen(_in_session_of(slave, cmd), cwd=tmp_path, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)

    def read_terminal(until) -> None:  # as a terminal does: a bar nobody reads would block the run
        deadline = time.monotonic() + 30
        while not until():
            assert proc.poll() is None and time.monotonic() < deadline, "no progress"
            if select.select([master], [], [], 0.05)[0]:
                os.read(master, 65536)

    read_terminal(lambda: partials(tmp_path))
    settled = time.monotonic() + 1.0
    read_terminal(lambda: time.monotonic() > settled)
    os.close(master)  # the window closes
    assert proc.wait(timeout=60) == 129
    done = read_json(tmp_path / "s.json")["frames_out"]
    assert 0 < done < FRAMES
    assert video_times(out) == video_times(long_clip)[:done]
    assert partials(tmp_path) == []


def test_a_ctrl_c_while_the_program_imports_is_one_line_and_exit_130(tmp_path, clip):
    """The signal's KeyboardInterrupt raised inside an import (here the first import of a module the CLI
    takes, made to raise it) ends the command as one during set-up does, not with a traceback."""
    from utils import environment, run_command

    fake = tmp_path / "interrupting" / "rich"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise KeyboardInterrupt\n")
    path = os.pathsep.join(p for p in (str(fake.parent), os.environ.get("PYTHONPATH", "")) if p)
    result = run_command(pipeline_command(clip, "-o", tmp_path / "out.mp4"), cwd=tmp_path,
                         env=environment(PYTHONPATH=path))
    assert result.returncode == 130, result.stderr
    assert result.stderr == "pipeline: interrupted\n"
    assert not (tmp_path / "out.mp4").exists()


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGINT])  # nohup; a script's background job (cmd &)
def test_a_signal_ignored_from_the_start_stays_ignored(tmp_path, long_clip, signum):
    out = tmp_path / "out.mp4"
    cmd = pipeline_command(long_clip, "-o", out, "--filters", SLOW_CHAIN, "--frames", "60")
    proc = subprocess.Popen(cmd, cwd=tmp_path, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signum, signal.SIG_IGN))
    wait_for_progress(proc, out, settle=0.2)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert len(video_times(out)) == 60


def test_sigquit_exits_at_once_and_leaves_no_temporary_file(tmp_path, long_clip):
    import resource

    out = tmp_path / "out.mp4"
    cmd = pipeline_command(long_clip, "-o", out, "--filters", SLOW_CHAIN)
    proc = subprocess.Popen(cmd, cwd=tmp_path, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))
    wait_for_progress(proc, out)
    proc.send_signal(signal.SIGQUIT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGQUIT, err  # the signal's own end, as the shell expects of it
    assert "SIGQUIT" in err and "Traceback" not in err
    assert not out.exists() and partials(tmp_path) == []


_API_RUN = """
import sys, threading
import pipeline
from pipeline.sink import Sink

def running():
    return [t.name for t in threading.enumerate() if t.name.startswith("pipeline-")]

finish, at_finish = Sink.finish, []
Sink.finish = lambda self: (at_finish.append(running()), finish(self))[1]
try:
    pipeline.run(sys.argv[1], sys.argv[2], device="cpu", filters=sys.argv[3], quiet=True)
except KeyboardInterrupt:
    print("KeyboardInterrupt", at_finish, running())
"""


def test_ctrl_c_in_an_api_call_drains_the_run_then_reaches_the_caller(tmp_path, long_clip):
    """pipeline.run() in the caller's own process: no handler of ours, a KeyboardInterrupt. The threads stop
    and are joined before anything closes (closing the encoder under its thread could crash the process),
    the output keeps the frames done, and the caller gets its KeyboardInterrupt."""
    from utils import python_command

    out = tmp_path / "out.mp4"
    proc = subprocess.Popen(python_command("-c", _API_RUN, long_clip, out, SLOW_CHAIN), cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_progress(proc, out)
    proc.send_signal(signal.SIGINT)
    stdout, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and stdout.strip() == "KeyboardInterrupt [[]] []", (stdout, err)
    assert 0 < len(video_times(out)) < FRAMES and partials(tmp_path) == []


# The API call of the next two tests, after each one's way of interrupting it (the Ctrl-C, landed somewhere).
_API_CALL = """
try:
    pipeline.run(sys.argv[1], sys.argv[2], device="cpu", quiet=True)
except KeyboardInterrupt:
    print("KeyboardInterrupt", [t.name for t in threading.enumerate() if t.name.startswith("pipeline-")])
"""


def _interrupted_api_call(tmp_path, clip, interruption: str) -> None:
    """``interruption`` then the call, in a child process: the caller gets its KeyboardInterrupt within the
    timeout, no thread of the run is left, nothing is written (no frame was done)."""
    from utils import python_command

    out = tmp_path / "out.mp4"
    result = subprocess.run(python_command("-c", interruption + _API_CALL, clip, out), cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "KeyboardInterrupt []", result
    assert not out.exists() and partials(tmp_path) == []


def test_ctrl_c_while_the_stages_start_ends_the_api_call(tmp_path, long_clip):
    """Decode and submit started, the encoder not: nothing drains their channels, so the graceful stop
    waited forever on them. They stop at once."""
    _interrupted_api_call(tmp_path, long_clip, """
import sys, threading
import pipeline
from pipeline.channels import Worker

start = Worker.start

def start_but_the_encoder(self):
    if self.name == "pipeline-encode":
        raise KeyboardInterrupt  # the Ctrl-C comes while the stages are being started
    start(self)

Worker.start = start_but_the_encoder
""")


def test_ctrl_c_that_leaves_the_import_lock_taken_ends_the_api_call(tmp_path, clip):
    """The caller's KeyboardInterrupt raised inside importlib's locked section: the set-up thread waited
    for the lock forever, and the call for the set-up thread."""
    _interrupted_api_call(tmp_path, clip, """
import _imp, sys, threading, time
import pipeline
from pipeline import build

def interrupted_inside_importlib(*args, **kwargs):
    _imp.acquire_lock()  # as importlib's code holds it when the Ctrl-C lands, never to release it
    time.sleep(0.5)  # meanwhile the set-up thread's first import of the backend waits for it
    raise KeyboardInterrupt

build._open_source = interrupted_inside_importlib
""")


_API_RUN_MANY = """
import sys, threading
import pipeline

try:
    pipeline.run_many([sys.argv[1], sys.argv[1]], sys.argv[2], device="cpu", filters=sys.argv[3], quiet=True)
except KeyboardInterrupt:
    print("KeyboardInterrupt", [t.name for t in threading.enumerate() if t.name.startswith("pipeline-")])
"""


def test_ctrl_c_in_run_many_stops_every_stream_before_it_reaches_the_caller(tmp_path, long_clip):
    """As for run(): each stream drains and keeps its frames done, every stream's threads are joined before
    the shared memory closes, and only then does the caller get its KeyboardInterrupt."""
    from utils import python_command

    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen(python_command("-c", _API_RUN_MANY, long_clip, f"{out}/", SLOW_CHAIN), cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_progress(proc, out / "x")
    proc.send_signal(signal.SIGINT)
    stdout, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and stdout.strip() == "KeyboardInterrupt []", (stdout, err)
    written = sorted(out.iterdir())
    assert len(written) == 2 and partials(out) == [], written
    assert all(0 < len(video_times(path)) < FRAMES for path in written)


@pytest.mark.parametrize("where, raised", [("<frozen importlib._bootstrap>", False), ("/app/pipeline/source.py", True)],
                         ids=["importlib", "elsewhere"])
def test_a_set_up_signal_inside_importlib_waits_for_the_set_ups_check(restore_signals, where, raised):
    """Raised between importlib's lock acquire and the try that releases it, Interrupted left the import
    lock taken: the set-up thread's next import, and the run, waited forever (SIGTERM 0.34-0.39 s into a
    run, 3 runs in 300). There the stop waits for the set-up's check before the output is made."""
    import types

    from pipeline.cli import _install_signal_handlers
    from pipeline.control import RunControl
    from pipeline.errors import Interrupted

    control = RunControl()
    control.interruptible = True
    _install_signal_handlers(control)
    frame = types.SimpleNamespace(f_code=types.SimpleNamespace(co_filename=where))
    if raised:
        with pytest.raises(Interrupted):
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, frame)
        return
    signal.getsignal(signal.SIGTERM)(signal.SIGTERM, frame)
    assert control.stop_event.is_set()
    with pytest.raises(Interrupted, match="SIGTERM"):
        control.before_output()


@pytest.mark.parametrize("keep_partial", [False, True], ids=["batch", "run"])
def test_a_stop_while_a_complete_output_is_finished_leaves_it_complete(tmp_path, clip, monkeypatch, keep_partial):
    """The stop comes after the last frame, while the trailer is written: the run was complete, and says so.
    It raised Interrupted after the file was in place, and a batch (whose stopped runs keep nothing) then
    removed it: the user's earlier file of that name, replaced with -y, was gone."""
    from pipeline import engine
    from pipeline.config import RunConfig
    from pipeline.sink import Sink

    out = tmp_path / "out.mp4"
    out.write_bytes(b"the user's file")
    control = engine.RunControl()
    control.keep_partial = keep_partial
    finish = Sink.finish
    monkeypatch.setattr(Sink, "finish", lambda self: (control.stop(signal.SIGINT), finish(self))[1])
    cfg = RunConfig(input=str(clip), output=str(out), device="cpu", quiet=True, overwrite=True)
    stats = engine.Pipeline.from_config(cfg, control=control).run()
    assert stats.frames_out == 6 and len(video_times(out)) == 6


def test_a_ctrl_c_whose_clean_up_fails_is_still_a_ctrl_c(monkeypatch, capsys, restore_signals):
    """A Ctrl-C inside argparse's intermixed parsing, before the handlers exist: its clean-up restores an
    attribute it had not saved yet, and the AttributeError came out as an internal error, exit 1."""
    def parse(argv):
        try:
            raise KeyboardInterrupt
        finally:
            raise AttributeError("'_StoreAction' object has no attribute 'save_nargs'")

    monkeypatch.setattr(cli, "_parse", parse)
    assert cli.main(["run", "in.mp4"]) == 130
    assert capsys.readouterr().err.strip() == "pipeline: interrupted"


def test_a_signal_delivered_twice_at_once_is_one_stop(monkeypatch):
    """``timeout -s INT`` sends its signal to the command, then to the command's process group: twice."""
    from pipeline import errors

    clock = iter([10.0, 10.0001, 10.05, 10.3, 11.0, 11.05])
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))  # SIGNAL_ECHO_S: 0.1
    echoes = errors.SignalEchoes()
    seen = [echoes.echo(s) for s in (signal.SIGINT, signal.SIGINT, signal.SIGINT, signal.SIGINT,
                                      signal.SIGTERM, signal.SIGINT)]
    assert seen == [False, True, True, False, False, False]


def test_timeout_s_int_stops_a_run_once_and_keeps_its_output(tmp_path, long_clip):
    import shutil

    if shutil.which("timeout") is None:
        pytest.skip("no coreutils timeout")
    out = tmp_path / "out.mp4"
    cmd = ["timeout", "--preserve-status", "-s", "INT", "2",
           *pipeline_command(long_clip, "-o", out, "--filters", SLOW_CHAIN, "--ring-size", "16")]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 130 and "again" not in proc.stderr, proc.stderr
    assert 0 < len(video_times(out)) < FRAMES and partials(tmp_path) == []


class _SlowFlush:
    """Stands for an encoder whose flush is one long C call (PyAV releases the interpreter's lock in it)."""

    def __init__(self, interrupt: bool = False, error: Exception | None = None):
        self.interrupt, self.error, self.ran_on, self.finished = interrupt, error, None, False

    def encode(self, frame):
        import threading

        assert frame is None
        self.ran_on = threading.current_thread()
        if self.interrupt:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # the API caller's Ctrl-C
            time.sleep(0.3)
        self.finished = True
        if self.error is not None:
            raise self.error
        return ["packet"]


def test_the_encoders_flush_runs_beside_the_main_thread_so_its_signal_handlers_run():
    """The flush ran on the main thread: with a slow preset, seconds in which no handler ran, so a second
    Ctrl-C (exit at once, no output) waited for the flush, which then replaced an existing -y output."""
    import threading

    from pipeline.avlib import flush_encoder

    stream = _SlowFlush()
    assert flush_encoder(stream) == ["packet"] and stream.ran_on is not threading.main_thread()
    with pytest.raises(ValueError, match="refused"):
        flush_encoder(_SlowFlush(error=ValueError("refused")))
    interrupted = _SlowFlush(interrupt=True)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own: an earlier test's may linger
    try:
        with pytest.raises(KeyboardInterrupt):
            flush_encoder(interrupted)
    finally:
        signal.signal(signal.SIGINT, before)
    assert interrupted.finished  # not closed under the flush: the Ctrl-C is raised once the flush is over


def test_a_second_signal_while_a_run_is_set_up_leaves_no_temporary_output(tmp_path):
    """Between its output's creation and its registration with the run's control (the encoder opening, the
    memory being allocated), a run was not among those a second signal drops: the process exited at once
    and left the temporary file (or a sequence's staging directory) beside the target."""
    from pipeline.control import RunControl
    from pipeline.outfile import StagedFile
    from pipeline.sequence import StagedSequence

    single, frames = StagedFile(tmp_path / "out.mkv"), StagedSequence(tmp_path / "f%03d.png")
    single.prepare()
    single.path.write_bytes(b"half")
    frames.prepare()
    (frames.dir / "f001.png").write_bytes(b"frame")
    assert partials(tmp_path)
    control = RunControl()
    control.stop(signal.SIGINT)
    assert control.discard_output()  # no run registered yet
    assert sorted(os.listdir(tmp_path)) == []
    single.discard()
    frames.discard()
