"""Hostile inputs and environments: values, paths, files and libraries that try to break the contract
(one line on stderr, the documented exit code, no traceback, nothing left behind).

The CLI runs as a subprocess wherever the case can be built from outside, as in test_reliability.py;
failures that cannot (a CUDA error without a GPU) run in-process with one function replaced.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from make_sample import make_clip

import pipeline
from pipeline.errors import ConfigError


def run_cli(*args, cwd: Path, timeout: float = 60, device: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pipeline", "run", *map(str, args), *(["--device", "cpu"] if device else []), "-q"]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def partials(directory: Path) -> list[Path]:
    return sorted(directory.glob(".*.partial-*"))


def one_error(result, code: int, *words: str) -> str:
    """The contract: the exit code, exactly one line, no traceback; the line names ``words``."""
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pipeline: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    return make_clip(tmp_path_factory.mktemp("hostile") / "clip.mp4", width=64, height=48, frames=6, audio=True)


# -- 9. NaN and infinity ----------------------------------------------------------------------------


@pytest.mark.parametrize("args, word", [
    (("--filters", "eq=contrast=nan"), "contrast"),
    (("--filters", "gblur=sigma=nan"), "sigma"),
    (("--filters", "tdenoise=threshold=nan"), "threshold"),
    (("--filters", "eq=brightness=-inf"), "brightness"),
    (("--arena-headroom", "nan"), "arena_headroom"),
    (("--timeout", "inf"), "timeout"),
    (("--latency-budget", "nan"), "latency_budget"),
    (("--encoder-opt", "crf=nan"), "crf"),
], ids=lambda v: v if isinstance(v, str) else "_".join(v))
def test_non_finite_numbers_exit_2(tmp_path, clip, args, word):
    out = tmp_path / "out.mp4"
    one_error(run_cli(clip, "-o", out, *args, cwd=tmp_path), 2, word)
    assert not out.exists() and partials(tmp_path) == []


def test_non_finite_toml_value_exits_2(tmp_path, clip):
    (config := tmp_path / "c.toml").write_text("arena_headroom = nan\n")
    one_error(run_cli(clip, "-o", tmp_path / "out.mp4", "--config", config, cwd=tmp_path), 2, "arena_headroom")


def test_non_finite_cube_row_exits_2(tmp_path, clip):
    rows = ["0 0 0"] * 7 + ["1e999 0 0"]  # overflows to inf; "nan" is refused as a keyword
    (cube := tmp_path / "bad.cube").write_text("LUT_3D_SIZE 2\n" + "\n".join(rows) + "\n")
    one_error(run_cli(clip, "-o", tmp_path / "out.mp4", "--filters", f"lut3d=file={cube.name}", cwd=tmp_path),
              2, "finite")


@pytest.mark.parametrize("options", [{"arena_headroom": float("nan")}, {"timeout": float("inf")},
                                     {"encoder_opts": {"crf": "nan"}}, {"filters": "hue=degrees=nan"}])
def test_non_finite_api_options_raise_config_error(tmp_path, clip, options):
    with pytest.raises(ConfigError, match="finite"):
        pipeline.run(str(clip), str(tmp_path / "out.mp4"), device="cpu", **options)
    assert not (tmp_path / "out.mp4").exists()


# -- 11. plugins -------------------------------------------------------------------------------------

PLUGIN_FILTER = '''
import numpy as np
from pipeline.filters import Filter, Param, register_filter

@register_filter("{name}")
class Broken(Filter):
    params = (Param("level", float, 0.5),)

    def __init__(self, **values):
        super().__init__(**values)
        {init}

    def cpu(self, src, dst, scratch):
        {cpu}
        np.copyto(dst, src)
'''


def write_plugin(directory: Path, name: str, *, init: str = "pass", cpu: str = "pass", top: str = "") -> Path:
    path = directory / f"{name}.py"
    path.write_text(top + PLUGIN_FILTER.format(name=name, init=init, cpu=cpu))
    return path


@pytest.mark.parametrize("make, word", [
    (lambda d: (d / "notes.txt").write_text("Remember: buy milk.\n") and d / "notes.txt", "SyntaxError"),
    (lambda d: write_plugin(d, "quits", top="import sys\nsys.exit(7)\n"), "sys.exit(7)"),
    (lambda d: write_plugin(d, "based", top="raise BaseException('odd')\n"), "BaseException"),
    (lambda d: write_plugin(d, "fails", top="raise ImportError('no module named magic')\n"), "ImportError"),
], ids=["text-file", "sys-exit", "base-exception", "import-error"])
def test_a_plugin_failing_to_load_exits_2_naming_it(tmp_path, clip, make, word):
    plugin = make(tmp_path)
    result = run_cli(clip, "-o", tmp_path / "out.mp4", "--plugin", plugin, cwd=tmp_path)
    one_error(result, 2, plugin.name, word)
    assert not (tmp_path / "out.mp4").exists()


def test_a_plugin_failing_while_the_chain_is_built_exits_2_naming_it(tmp_path, clip):
    plugin = write_plugin(tmp_path, "picky", init="raise ValueError('level is not to my taste')")
    result = run_cli(clip, "-o", tmp_path / "out.mp4", "--plugin", plugin, "--filters", "picky", cwd=tmp_path)
    one_error(result, 2, "picky.py", "not to my taste")


@pytest.mark.parametrize("cpu, word", [("raise RuntimeError('kaput')", "kaput"),
                                       ("raise SystemExit(3)", "sys.exit(3)")], ids=["raises", "exits"])
def test_a_plugin_failing_during_the_run_is_named_not_called_a_bug(tmp_path, clip, cpu, word):
    plugin = write_plugin(tmp_path, "flaky", cpu=cpu)
    out = tmp_path / "out.mp4"
    result = run_cli(clip, "-o", out, "--plugin", plugin, "--filters", "gblur=sigma=1,flaky", cwd=tmp_path)
    line = one_error(result, 1, "'flaky'", str(plugin.resolve()), "frame 0", word)
    assert "internal error" not in line and "bug" not in line
    assert not out.exists() and partials(tmp_path) == []


# -- 1. --stats-json is an output too ---------------------------------------------------------------------


@pytest.mark.parametrize("which", ["input", "output", "output-hardlink"])
def test_stats_json_never_overwrites_the_input_or_the_output(tmp_path, clip, which):
    src = tmp_path / "in.mp4"
    src.write_bytes(clip.read_bytes())
    out = tmp_path / "out.mp4"
    stats = {"input": src, "output": out, "output-hardlink": tmp_path / "link.mp4"}[which]
    if which == "output-hardlink":
        out.write_bytes(b"old output")
        stats.hardlink_to(out)
    result = run_cli(src, "-o", out, "-y", "--stats-json", stats, cwd=tmp_path)
    one_error(result, 2, "--stats-json is the", which.split("-")[0])
    assert src.read_bytes() == clip.read_bytes()
    assert partials(tmp_path) == []


def test_existing_stats_json_needs_overwrite(tmp_path, clip):
    stats = tmp_path / "s.json"
    stats.write_text("precious")
    out = tmp_path / "out.mp4"
    one_error(run_cli(clip, "-o", out, "--stats-json", stats, cwd=tmp_path), 2, "already exists", "-y")
    assert stats.read_text() == "precious" and not out.exists()
    result = run_cli(clip, "-o", out, "-y", "--stats-json", stats, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert '"frames_out"' in stats.read_text()


def test_stats_json_appearing_during_the_run_is_kept(tmp_path, clip, monkeypatch, capsys, restore_signals):
    from pipeline import cli, engine

    stats = tmp_path / "s.json"
    real_init = engine.Pipeline.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.on_frame = lambda s: stats.exists() or stats.write_text("another run's")

    monkeypatch.setattr(engine.Pipeline, "__init__", init)
    code = cli.main(["run", str(clip), "-o", str(tmp_path / "out.mp4"), "--device", "cpu", "-q",
                     "--stats-json", str(stats)])
    err = capsys.readouterr().err
    assert code == 2 and "appeared during the run" in err and len(err.strip().splitlines()) == 1
    assert stats.read_text() == "another run's"


@pytest.fixture
def restore_signals():
    """cli.main installs SIGINT/SIGTERM handlers; put pytest's back."""
    import signal

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


# -- 2. outputs that are not regular files -------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "device-link"])
@pytest.mark.parametrize("overwrite", [False, True], ids=["no-y", "y"])
def test_a_fifo_or_device_output_is_never_replaced(tmp_path, clip, kind, overwrite):
    import os
    import stat

    out = tmp_path / "out.mp4"
    if kind == "fifo":
        os.mkfifo(out)
    else:  # a link to /dev/null: were it replaced, the link would go, never /dev/null itself
        out.symlink_to("/dev/null")
    result = run_cli(clip, "-o", out, "--format", "mp4", *(["-y"] * overwrite), cwd=tmp_path)
    one_error(result, 4, "not a regular file")
    mode = os.stat(out).st_mode
    assert stat.S_ISFIFO(mode) if kind == "fifo" else stat.S_ISCHR(mode)
    assert partials(tmp_path) == []


# -- 3. the final rename never replaces a file that appeared during the run ---------------------------------


def test_two_runs_into_one_output_without_y_one_wins_one_exits_2(tmp_path, clip):
    out = tmp_path / "out.mp4"
    cmd = [sys.executable, "-m", "pipeline", "run", str(clip), "-o", str(out), "--device", "cpu", "-q",
           "--filters", "gblur=sigma=6,gblur=sigma=6"]
    procs = [subprocess.Popen(cmd, cwd=tmp_path, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=60), p.stderr.read()) for p in procs]
    assert sorted(code for code, _ in results) == [0, 2], results
    loser = next(err for code, err in results if code == 2)
    assert "already exists" in loser or "appeared during the run" in loser
    assert partials(tmp_path) == []


@pytest.mark.parametrize("overwrite", [False, True], ids=["no-y", "y"])
def test_an_output_appearing_during_the_run_is_kept_without_y(tmp_path, clip, monkeypatch, capsys,
                                                              restore_signals, overwrite):
    from pipeline import cli, engine

    out = tmp_path / "out.mp4"
    real_init = engine.Pipeline.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.on_frame = lambda s: out.exists() or out.write_bytes(b"the other run's")

    monkeypatch.setattr(engine.Pipeline, "__init__", init)
    code = cli.main(["run", str(clip), "-o", str(out), "--device", "cpu", "-q"] + ["-y"] * overwrite)
    err = capsys.readouterr().err
    if overwrite:
        assert code == 0, err
        assert out.read_bytes() != b"the other run's"
    else:
        assert code == 2 and "appeared during the run" in err and len(err.strip().splitlines()) == 1
        assert out.read_bytes() == b"the other run's"
    assert partials(tmp_path) == []


@pytest.mark.parametrize("renameat2", ["native", "unsupported", "absent"])
def test_rename_noreplace_refuses_an_existing_target(tmp_path, monkeypatch, renameat2):
    import ctypes
    import errno

    from pipeline import outfile

    if renameat2 == "unsupported":  # FUSE, 9p: the filesystem refuses the flag; link + unlink instead
        monkeypatch.setattr(outfile, "_RENAMEAT2", lambda *a: (ctypes.set_errno(errno.EINVAL), -1)[1])
    elif renameat2 == "absent":  # glibc older than 2.28
        monkeypatch.setattr(outfile, "_RENAMEAT2", None)
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.write_text("new")
    dst.write_text("old")
    with pytest.raises(FileExistsError):
        outfile.rename_noreplace(src, dst)
    assert (src.read_text(), dst.read_text()) == ("new", "old")
    dst.unlink()
    outfile.rename_noreplace(src, dst)
    assert dst.read_text() == "new" and not src.exists()


# -- 4. names: long ones, and ones holding ':' ---------------------------------------------------------------


@pytest.mark.parametrize("length", [240, 250, 255])
def test_output_names_up_to_the_limit_work(tmp_path, clip, length):
    out = tmp_path / ("n" * (length - 4) + ".mkv")
    result = run_cli(clip, "-o", out, "--frames", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert out.is_file() and partials(tmp_path) == []


def test_an_output_name_past_the_limit_exits_4(tmp_path, clip):
    out = tmp_path / ("n" * 252 + ".mkv")
    one_error(run_cli(clip, "-o", out, cwd=tmp_path), 4, "too long", "256 bytes")


def test_temporary_names_of_long_targets_fit_and_stay_distinct(tmp_path):
    from pipeline.outfile import name_max, temp_path_for
    from pipeline.sink import remove_stale_partials

    a = tmp_path / ("é" * 125 + "a.mp4")  # 255 bytes, two-byte characters: cut on a character boundary
    b = tmp_path / ("é" * 125 + "b.mp4")
    ta, tb = temp_path_for(a, 4194304), temp_path_for(b, 4194304)
    assert ta != tb and max(len(ta.name.encode()), len(tb.name.encode())) <= name_max(tmp_path)
    assert ta.suffix == ".mp4" and ta.name.startswith(".é")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = temp_path_for(a, int(dead.stdout))
    stale.write_bytes(b"x")
    remove_stale_partials(a)
    assert not stale.exists()


@pytest.mark.parametrize("name", ["meeting12:30.mp4", "C:\\clips\\a.mp4", "file:x.mp4", "-dash.mp4"])
def test_local_names_are_files_never_protocols(tmp_path, clip, name):
    src = tmp_path / name
    src.write_bytes(clip.read_bytes())
    out = tmp_path / ("out" + name.replace("\\", "_"))
    result = run_cli(f"./{name}" if name.startswith("-") else name, "-o", out.name, "--frames", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert out.is_file() and partials(tmp_path) == []


def test_colon_in_the_default_output_name(tmp_path, clip):
    (tmp_path / "cam1:take2.mp4").write_bytes(clip.read_bytes())
    result = run_cli("cam1:take2.mp4", "--frames", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "cam1:take2_processed.mp4").is_file()


def test_urls_stay_urls_and_devices_keep_their_names():
    from pipeline.avlib import ffmpeg_name

    assert ffmpeg_name("udp://0.0.0.0:5000", None, local=False) == "udp://0.0.0.0:5000"
    assert ffmpeg_name("/dev/video0", "v4l2", local=True) == "/dev/video0"
    assert ffmpeg_name("a:b.mp4", None, local=True) == "file:a:b.mp4"


# -- 5. set-up: files that never end or never answer, and a stop while it runs --------------------------------


@pytest.mark.parametrize("what", ["dev-zero", "fifo", "too-large", "directory"])
@pytest.mark.parametrize("option", ["lut3d", "config"])
def test_setup_files_are_regular_and_bounded(tmp_path, clip, what, option):
    import os

    path = {"dev-zero": Path("/dev/zero"), "fifo": tmp_path / "pipe.cube", "too-large": tmp_path / "huge.cube",
            "directory": tmp_path}[what]
    if what == "fifo":
        os.mkfifo(path)  # no writer: opening it for reading would wait for one forever
    elif what == "too-large":
        with open(path, "wb") as f:
            f.truncate(600 << 20)  # sparse: the size is checked before anything is read
    args = ("--filters", f"lut3d=file={path}") if option == "lut3d" else ("--config", path)
    result = run_cli(clip, "-o", tmp_path / "out.mp4", *args, cwd=tmp_path, timeout=30)
    words = {"dev-zero": "not a regular file", "fifo": "not a regular file", "too-large": "the limit is",
             "directory": "is a directory"}[what]
    one_error(result, 2, str(path), words)


@pytest.mark.parametrize("signame, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_one_signal_ends_a_set_up_step_that_takes_long(tmp_path, clip, signame, code):
    import signal
    import time

    plugin = tmp_path / "slow.py"
    plugin.write_text("import time\ntime.sleep(60)\n")  # any long step of set-up: a plugin, a huge LUT
    out = tmp_path / "out.mp4"
    cmd = [sys.executable, "-m", "pipeline", "run", str(clip), "-o", str(out), "--device", "cpu", "-q",
           "--plugin", str(plugin)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    t0 = time.monotonic()
    proc.send_signal(getattr(signal, signame))
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - t0 < 5
    assert proc.returncode == code, err
    assert err.strip() == f"pipeline: interrupted by {signame}; no output written"
    assert not out.exists() and partials(tmp_path) == []


# -- 6. a FIFO or a device as the input ---------------------------------------------------------------------


@pytest.fixture
def fifo(tmp_path) -> Path:
    import os

    os.mkfifo(path := tmp_path / "in.fifo")
    return path


@pytest.fixture(scope="module")
def ts_clip(tmp_path_factory) -> Path:
    return make_clip(tmp_path_factory.mktemp("ts") / "clip.ts", width=64, height=48, frames=30, audio=False)


def feed(fifo: Path, data: bytes, hold: float = 0.0):
    """A writer in a thread: ``data`` into the FIFO, then the write end held open ``hold`` seconds."""
    import threading
    import time

    def write():
        with open(fifo, "wb") as f:
            f.write(data)
            f.flush()
            time.sleep(hold)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def test_a_fifo_with_no_writer_ends_at_the_timeout(tmp_path, fifo):
    import time

    t0 = time.monotonic()
    result = run_cli(fifo, "-o", tmp_path / "out.mkv", "--timeout", "1", cwd=tmp_path, timeout=30)
    one_error(result, 3, "in.fifo", "--timeout")
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize("signame, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_ends_a_wait_for_a_fifo_writer(tmp_path, fifo, signame, code):
    import signal
    import time

    cmd = [sys.executable, "-m", "pipeline", "run", str(fifo), "-o", str(tmp_path / "out.mkv"), "--device", "cpu",
           "-q"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    proc.send_signal(getattr(signal, signame))
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    assert err.strip() == f"pipeline: interrupted by {signame}; no output written"
    assert partials(tmp_path) == []


def test_a_fifo_is_read_to_its_end(tmp_path, fifo, ts_clip):
    writer = feed(fifo, ts_clip.read_bytes())
    out = tmp_path / "out.mkv"
    result = run_cli(fifo, "-o", out, "--drop-policy", "block", "--filters", "", cwd=tmp_path)
    writer.join(5)
    assert result.returncode == 0, result.stderr
    import av

    with av.open(str(out)) as c:
        assert sum(1 for _ in c.decode(video=0)) == 30


def test_a_signal_during_a_stalled_fifo_keeps_the_frames_done(tmp_path, fifo, ts_clip):
    import signal
    import time

    writer = feed(fifo, ts_clip.read_bytes(), hold=30)  # then silent, the write end still open
    out = tmp_path / "out.mkv"
    cmd = [sys.executable, "-m", "pipeline", "run", str(fifo), "-o", str(out), "--device", "cpu", "-q",
           "--drop-policy", "block", "--filters", "", "--timeout", "10"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not partials(tmp_path):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(2)  # every frame written so far is through; the reader now waits in a read
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert time.monotonic() - t0 < 5
    assert "holds the" in err and len(err.strip().splitlines()) == 1
    assert out.is_file() and partials(tmp_path) == []
    del writer


# -- 7. host memory: what is touched is what is counted, and it is taken up front -----------------------------


def _plan_and_request(width: int, height: int, **settings):
    from pipeline.config import RunConfig
    from pipeline.filters import fuse_pointwise, parse_chain
    from pipeline.processor import FramePlan
    from pipeline.video import Colour, VideoFormat

    cfg = RunConfig(**settings)
    plan = FramePlan.build(VideoFormat(width, height, Colour()), fuse_pointwise(parse_chain(cfg.filters)))
    return cfg, plan


def test_the_cpu_check_counts_one_frame_of_arena_not_the_frames_in_flight():
    from pipeline.build import memory_needed

    cfg, plan = _plan_and_request(8192, 8192)
    needed = memory_needed(cfg, plan)
    rings = cfg.ring_size * 2 * plan.specs[plan.input].nbytes
    assert plan.frame_bytes < needed - rings <= 1.3 * plan.frame_bytes  # one frame, with the headroom
    assert needed < 5 * 2**30  # it was 13 GiB: in_flight x headroom frames the CPU never has outstanding


def test_the_cpu_memory_is_what_the_check_counted_and_is_taken_at_once():
    from pipeline.build import available_memory, memory_needed
    from pipeline.cpu import CpuBackend
    from pipeline.memory.registry import strategy

    cfg, plan = _plan_and_request(2048, 2048, filters="gblur=sigma=2")
    needed = memory_needed(cfg, plan)
    before = available_memory()
    if before is None or before < 4 * needed:
        pytest.skip("needs /proc/meminfo and some free memory")
    memory = CpuBackend(strategy("pool")).memory(plan.request(cfg))
    try:
        reserved = memory.device.arena.capacity + sum(h.bytes_reserved for h in memory.hosts)
        assert reserved == needed
        # Taken now, not at first use: the next run's check sees it gone.
        assert before - available_memory() > 0.7 * needed
    finally:
        memory.close()


# -- 8. CUDA failures: exit 5, one line with what was needed and what was free --------------------------------

FAKE_CUPY = '''
"""A stand-in for CuPy with one device that fails where FAIL (an environment variable) says."""
import os
import types


class CUDARuntimeError(RuntimeError):
    def __init__(self, status, message):
        self.status = status
        super().__init__(message)


class OutOfMemoryError(MemoryError):
    pass


FAIL = os.environ.get("FAKE_CUPY_FAIL", "")


def _malloc(nbytes):
    if FAIL == "malloc":
        raise CUDARuntimeError(2, "cudaErrorMemoryAllocation: out of memory")
    return 4096


runtime = types.SimpleNamespace(
    CUDARuntimeError=CUDARuntimeError, getDeviceCount=lambda: 1, getDevice=lambda: 0,
    memGetInfo=lambda: (512 << 20, 80 << 30), malloc=_malloc, free=lambda ptr: None,
    memcpyHostToDevice=1, memcpyDeviceToHost=2, memcpyAsync=lambda *a: None)


class Stream:
    def __init__(self, non_blocking=False):
        if FAIL == "stream":
            raise CUDARuntimeError(999, "cudaErrorUnknown: unknown error")
        self.ptr = 1

    def __del__(self):
        self.ptr  # CuPy's own __del__ reads what a failed __init__ never set: AttributeError

    def synchronize(self):
        pass


Stream.null = object.__new__(Stream)
Stream.null.ptr = 0


class Event:
    done = True

    def record(self, stream=None):
        pass

    def synchronize(self):
        pass


cuda = types.SimpleNamespace(runtime=runtime, Stream=Stream, Event=Event, get_elapsed_time=lambda a, b: 0.0,
                             memory=types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError))
'''


@pytest.fixture
def fake_cupy(tmp_path) -> Path:
    (fake := tmp_path / "fakecupy").mkdir()
    (fake / "cupy.py").write_text(FAKE_CUPY)
    return fake


def run_with_fake_cupy(fake: Path, fail: str, clip: Path, cwd: Path) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "FAKE_CUPY_FAIL": fail,
           "PYTHONPATH": os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")] + sys.path)}
    cmd = [sys.executable, "-m", "pipeline", "run", str(clip), "-o", str(cwd / "out.mp4"), "--device", "cuda", "-q"]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def test_a_cuda_failure_at_set_up_is_exit_5_and_half_built_objects_print_nothing(tmp_path, clip, fake_cupy):
    result = run_with_fake_cupy(fake_cupy, "stream", clip, tmp_path)
    line = one_error(result, 5, "CUDA error while creating CUDA streams", "512 MiB free of 81,920 MiB")
    assert "Exception ignored" not in result.stderr and "__del__" not in result.stderr, line
    assert partials(tmp_path) == []


def test_out_of_device_memory_for_the_arena_names_needed_and_free(tmp_path, clip, fake_cupy):
    result = run_with_fake_cupy(fake_cupy, "malloc", clip, tmp_path)
    one_error(result, 5, "out of device memory: the device arena needs", "MiB, 512 MiB free of 81,920 MiB")
    assert not (tmp_path / "out.mp4").exists() and partials(tmp_path) == []


def test_cupy_errors_mid_run_become_gpu_errors_with_the_free_memory(monkeypatch):
    from pipeline.checks import as_pipeline_error
    from pipeline.errors import GPUError
    from pipeline.gpu import cuda as gpu_cuda

    fake = types_module(FAKE_CUPY)
    monkeypatch.setattr(gpu_cuda, "cupy", lambda: fake)
    oom = fake.OutOfMemoryError("Out of memory allocating 268,435,456 bytes (allocated so far: 0 bytes).")
    error = as_pipeline_error(oom)
    assert isinstance(error, GPUError) and error.exit_code == 5
    assert "needs 256 MiB, 512 MiB free of 81,920 MiB" in str(error)
    launch = as_pipeline_error(fake.CUDARuntimeError(719, "cudaErrorLaunchFailure: unspecified launch failure"))
    assert isinstance(launch, GPUError) and "cudaErrorLaunchFailure" in str(launch) and "512 MiB free" in str(launch)
    assert as_pipeline_error(ValueError("ours")).__class__ is ValueError  # not every error is CUDA's


def types_module(source: str):
    """``source`` as a module named cupy (its classes then say they come from CuPy, as the real ones do)."""
    import types

    module = types.ModuleType("cupy")
    exec(compile(source, "cupy.py", "exec"), module.__dict__)
    return module


def test_cupy_destructor_noise_goes_to_the_debug_log(capsys):
    from pipeline.gpu.failures import quiet_half_built_objects

    fake = types_module(FAKE_CUPY)
    quiet_half_built_objects()
    half = object.__new__(fake.Stream)  # as after a failed __init__
    del half
    assert "Exception ignored" not in capsys.readouterr().err


# -- 10. options the encoder or the muxer would not use ---------------------------------------------------


@pytest.mark.parametrize("args, words", [
    (("--encoder-opt", "cfr=18"), ("libx264 encoder does not use cfr=18",)),
    (("-c", "mpeg4", "--encoder-opt", "crf=18"), ("mpeg4 encoder does not use crf=18",)),
    (("--output-opt", "movflag=+faststart"), ("mp4 muxer does not use movflag=+faststart",)),
], ids=["x264-typo", "mpeg4-has-no-crf", "muxer-typo"])
def test_options_nobody_uses_exit_2_naming_them(tmp_path, clip, args, words):
    out = tmp_path / "out.mp4"
    one_error(run_cli(clip, "-o", out, *args, cwd=tmp_path), 2, *words)
    assert not out.exists() and partials(tmp_path) == []


def test_options_that_are_used_pass(tmp_path, clip):
    out = tmp_path / "out.mp4"
    result = run_cli(clip, "-o", out, "--encoder-opt", "crf=30", "--encoder-opt", "g=12",
                     "--output-opt", "movflags=+faststart", "--output-opt", "fflags=+bitexact", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = out.read_bytes()
    assert data.find(b"moov") < data.find(b"mdat")  # faststart was applied


def test_muxer_option_lookup():
    from pipeline.avlib import unused_muxer_options

    assert unused_muxer_options("matroska", ["cluster_size_limit", "fflags", "movflags"]) == ["movflags"]
    assert unused_muxer_options("mpegts", ["mpegts_flags", "pkt_size"]) == ["pkt_size"]


# -- 19. libraries' own log lines -------------------------------------------------------------------------


def test_a_bad_preset_is_one_line_with_x264s_own_words(tmp_path, clip):
    result = run_cli(clip, "-o", tmp_path / "out.mkv", "--encoder-opt", "preset=bogus", cwd=tmp_path)
    one_error(result, 2, "invalid preset 'bogus'")


@pytest.mark.parametrize("codec", ["libx265", "libsvtav1"])
def test_encoder_banners_stay_off_stderr(tmp_path, clip, codec):
    import av

    if codec not in av.codecs_available:
        pytest.skip(f"{codec} is not in this PyAV build")
    out = tmp_path / "out.mkv"
    result = run_cli(clip, "-o", out, "-c", codec, "--frames", "3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    debug = run_cli(clip, "-o", out, "-y", "-c", codec, "--frames", "3", "--loglevel", "debug", cwd=tmp_path)
    assert debug.returncode == 0, debug.stderr
    lines = debug.stderr.splitlines()
    assert any(line.startswith("pipeline: ffmpeg: [") for line in lines)  # FFmpeg's own lines, when asked


def test_ffmpeg_lines_are_debug_lines_of_the_pipeline_logger(caplog):
    import logging

    import av

    from pipeline.avlib import route_ffmpeg_log

    route_ffmpeg_log()
    with caplog.at_level(logging.DEBUG, logger="pipeline"):
        av.logging.log(av.logging.WARNING, "demo", "a warning from FFmpeg")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.DEBUG, "ffmpeg: [demo] a warning from FFmpeg")]


def test_captured_stderr_passes_other_writers_through(capfd):
    import os

    from pipeline.avlib import captured_stderr

    with captured_stderr() as lines:
        os.write(2, b"x265 [info]: HEVC encoder version 4.2\nsomebody else's line\n")
    assert lines == ["x265 [info]: HEVC encoder version 4.2", "somebody else's line"]
    assert capfd.readouterr().err == "somebody else's line\n"


# -- 17. damage that raises nothing: truncated MKV and MPEG-TS, concealed decoder errors ----------------------


@pytest.fixture(scope="module")
def containers(tmp_path_factory):
    from helpers import remux

    d = tmp_path_factory.mktemp("containers")
    src = make_clip(d / "src.mp4", width=160, height=96, frames=30, audio=True)
    return {suffix: remux(src, d / f"clip{suffix}") for suffix in (".mkv", ".ts")}


@pytest.mark.parametrize("suffix, cut, words", [
    (".mkv", 0.6, "File ended prematurely"),
    (".ts", 0.6, "not a whole number of transport packets"),
])
def test_truncated_files_warn_in_every_container_and_fail_with_strict(tmp_path, containers, suffix, cut, words):
    data = containers[suffix].read_bytes()
    size = int(len(data) * cut)
    size -= 1 if suffix == ".ts" and size % 188 == 0 else 0  # cut inside a packet
    src = tmp_path / f"cut{suffix}"
    src.write_bytes(data[:size])
    out = tmp_path / "out.mkv"
    result = run_cli(src, "-o", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "warning" in result.stderr and "cut short" in result.stderr and words in result.stderr
    assert out.is_file()
    out.unlink()
    one_error(run_cli(src, "-o", out, "--strict", cwd=tmp_path), 3, "--strict")  # its cut frame, or the cut


def test_complete_files_get_no_warning(tmp_path, containers):
    for suffix, src in containers.items():
        result = run_cli(src, "-o", tmp_path / f"out{suffix}.mkv", cwd=tmp_path)
        assert result.returncode == 0 and result.stderr == "", (suffix, result.stderr)


@pytest.fixture(scope="module")
def concealed(tmp_path_factory):
    """A few flipped bytes in the H.264 payload: the decoder conceals them and logs, no packet fails."""
    import random

    d = tmp_path_factory.mktemp("concealed")
    data = bytearray(make_clip(d / "clean.mp4", width=320, height=180, frames=60, audio=False).read_bytes())
    start, end = data.find(b"mdat") + 5000, data.find(b"moov") - 5000
    rng = random.Random(4)
    for _ in range(5):
        data[rng.randrange(start, end)] ^= 0xFF
    (path := d / "concealed.mp4").write_bytes(bytes(data))
    return path


def test_concealed_decoder_errors_are_reported_and_fatal_with_strict(tmp_path, concealed):
    import json

    out, stats = tmp_path / "out.mp4", tmp_path / "s.json"
    result = run_cli(concealed, "-o", out, "--stats-json", stats, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "warning" in result.stderr
    assert json.loads(stats.read_text())["corrupt_frames"] > 0
    line = one_error(run_cli(concealed, "-o", tmp_path / "strict.mp4", "--strict", cwd=tmp_path), 3, "--strict")
    assert "decoder error" in line or "corrupt frame" in line


def test_strict_decodes_with_slice_threads(clip):
    from pipeline.source import Source

    for strict, expected in ((True, "SLICE"), (False, "AUTO")):
        source = Source(str(clip), strict=strict)
        try:
            assert source.video.thread_type.name == expected
        finally:
            source.close()


# -- 16. frames whose height is not a multiple of 4 ------------------------------------------------------------


def _frames(path: Path):
    import av

    with av.open(str(path)) as c:
        return list(c.decode(video=0))


@pytest.mark.parametrize("make, args, size", [
    (lambda d: make_clip(d / "2x2.mkv", width=2, height=2, frames=4, codec="ffv1", audio=False), (), (2, 2)),
    (lambda d: make_clip(d / "in.mp4", width=64, height=48, frames=4, audio=False), ("--filters", "crop=w=16:h=2"),
     (16, 2)),
], ids=["2x2-input", "crop-to-2-rows"])
def test_frames_two_rows_high_are_encoded(tmp_path, make, args, size):
    out = tmp_path / "out.mkv"
    result = run_cli(make(tmp_path), "-o", out, *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    frames = _frames(out)
    assert len(frames) == 4 and {(f.width, f.height) for f in frames} == {size}


def test_a_height_of_4n_plus_2_is_not_rescaled(tmp_path):
    import numpy as np

    src = make_clip(tmp_path / "in.mkv", width=64, height=54, frames=2, codec="ffv1", audio=False)
    out = tmp_path / "out.mkv"
    result = run_cli(src, "-o", out, "--filters", "", "-c", "ffv1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for a, b in zip(_frames(src), _frames(out)):
        ya, yb = (f.to_ndarray()[:54].astype(np.int16) for f in (a, b))  # the Y plane
        diff = np.abs(ya - yb)
        assert diff.mean() < 0.5 and diff.max() <= 4  # colour round trip only; 52 rows stretched to 54: 10, 128


# -- 15. every video encoder PyAV has either works or says why ------------------------------------------------


def _video_encoders() -> list[str]:
    import av

    names = []
    for name in sorted(av.codecs_available):
        try:
            if av.Codec(name, "w").type == "video":
                names.append(name)
        except Exception:  # a decoder only
            continue
    return names


def _encoder_params():
    from pipeline.encoders import is_hardware

    return [pytest.param(n, marks=pytest.mark.skip(reason="hardware encoder: needs its device and driver; "
                                                          "see test_hardware_encoders_exit_2_when_unavailable"))
            if is_hardware(n) else n for n in _video_encoders()]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return make_clip(tmp_path_factory.mktemp("tiny") / "tiny.mp4", width=64, height=48, frames=5, audio=False)


def _run_in_process(args, capsys) -> tuple[int, list[str]]:
    from pipeline import cli

    code = cli.main(["run", *map(str, args), "--device", "cpu", "-q"])
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("encoder", _encoder_params())
def test_every_video_encoder_works_or_exits_2_saying_why(tmp_path, tiny, encoder, capsys, restore_signals):
    """In-process (the whole list in a few seconds; every one was also run as its own process once)."""
    import av

    from pipeline.encoders import containers_for

    fits = containers_for(av.Codec(encoder, "w").name, (".mkv", ".nut", ".mov", ".avi"))
    out = tmp_path / f"out{fits[0] if fits else '.mkv'}"
    code, lines = _run_in_process([tiny, "-o", out, "-c", encoder], capsys)
    assert code in (0, 2), lines
    if code == 2:
        assert len(lines) == 1 and lines[0].startswith("pipeline: error: "), lines
        assert encoder in lines[0] or av.Codec(encoder, "w").name in lines[0], lines
        assert not out.exists()
    else:
        assert lines == []
        assert len(_frames(out)) == 5
    assert partials(tmp_path) == []


@pytest.mark.parametrize("encoder", [n for n in _video_encoders() if n.endswith(("_nvenc", "_vaapi", "_qsv",
                                     "_v4l2m2m", "_amf", "_videotoolbox", "_mediacodec", "_vulkan"))])
def test_hardware_encoders_exit_2_when_unavailable(tmp_path, tiny, encoder, capsys, restore_signals):
    from pipeline.encoders import containers_for

    suffix = (containers_for(encoder, (".mkv", ".nut", ".mov", ".avi")) or [".mkv"])[0]
    code, lines = _run_in_process([tiny, "-o", tmp_path / f"out{suffix}", "-c", encoder], capsys)
    assert code in (0, 2), lines
    if code == 2:
        assert len(lines) == 1 and encoder in lines[0] and "not available here" in lines[0], lines


def test_mpeg2_gets_a_frame_rate_it_takes_and_keeps_the_timing(tmp_path, tiny):
    out = tmp_path / "out.mkv"
    result = run_cli(tiny, "-o", out, "-c", "mpeg2video", cwd=tmp_path)  # the input's time base is 1/15360
    assert result.returncode == 0, result.stderr
    frames = _frames(out)
    assert len(frames) == 5
    times = [float(f.pts * f.time_base) for f in frames]
    assert times == pytest.approx([i / 30 for i in range(5)], abs=2e-3)


@pytest.mark.parametrize("encoder, pix_fmt", [("mjpeg", "yuvj420p"), ("prores_ks", "yuv422p10le"),
                                              ("png", "rgb24"), ("huffyuv", "yuv422p"), ("gif", None)])
def test_encoders_without_yuv420p_get_a_format_they_take(tmp_path, tiny, encoder, pix_fmt):
    import av
    import numpy as np

    from pipeline.encoders import containers_for

    out = tmp_path / f"out{containers_for(av.Codec(encoder, 'w').name, ('.mkv', '.nut', '.mov'))[0]}"
    result = run_cli(tiny, "-o", out, "-c", encoder, "--filters", "", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    with av.open(str(out)) as c:
        if pix_fmt:
            assert c.streams.video[0].codec_context.pix_fmt == pix_fmt
    a, b = (f.to_ndarray(format="rgb24").astype(int) for f in (_frames(tiny)[0], _frames(out)[0]))
    assert abs(a.mean() - b.mean()) < 4  # the picture, converted, not a green or dark one


def test_an_audio_codec_as_the_video_codec_exits_2(tmp_path, tiny):
    one_error(run_cli(tiny, "-o", tmp_path / "out.mp4", "-c", "aac", cwd=tmp_path), 2, "aac is an audio encoder")


# -- 18. what the output does not keep is said; AVI states the right rate --------------------------------------


@pytest.fixture(scope="module")
def two_streams_interlaced(tmp_path_factory) -> Path:
    """Two video streams, the first interlaced (x264 with interlaced=1: frames flagged top field first)."""
    import av
    import numpy as np

    path = tmp_path_factory.mktemp("fields") / "two.mkv"
    with av.open(str(path), "w") as c:
        first = c.add_stream("libx264", rate=25, options={"x264-params": "interlaced=1:tff=1"})
        second = c.add_stream("mpeg4", rate=25)
        for s, (w, h) in ((first, (64, 48)), (second, (32, 32))):
            s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        for i in range(5):
            for s in (first, second):
                frame = av.VideoFrame.from_ndarray(np.full((s.height, s.width, 3), 40 * i, np.uint8), format="rgb24")
                frame.pts = i
                c.mux(s.encode(frame))
        for s in (first, second):
            c.mux(s.encode(None))
    return path


def test_extra_video_streams_and_interlacing_are_said(tmp_path, two_streams_interlaced):
    result = run_cli(two_streams_interlaced, "-o", tmp_path / "out.mkv", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "2 video streams; processing #0 (h264 64x48); not in the output: #1 mpeg4 32x32" in result.stderr
    assert "interlaced video (top field first); processed and written as progressive" in result.stderr
    assert len(_frames(tmp_path / "out.mkv")) == 5


def test_avi_states_the_input_frame_rate(tmp_path, clip):
    import av

    out = tmp_path / "out.avi"
    result = run_cli(clip, "-o", out, cwd=tmp_path)  # clip: 30 fps in a 1/15360 time base
    assert result.returncode == 0, result.stderr
    with av.open(str(out)) as c:
        assert c.streams.video[0].average_rate == 30
    assert len(_frames(out)) == 6


# -- 14. audio the container cannot hold; --audio copy|encode|none ----------------------------------------------


def _audio(path: Path) -> tuple[list[str], float]:
    """The output's audio codecs and the first audio stream's duration in seconds (by its packets)."""
    import av

    with av.open(str(path)) as c:
        codecs = [s.codec_context.name for s in c.streams.audio]
        if not codecs:
            return codecs, 0.0
        packets = [p for p in c.demux(audio=0) if p.pts is not None]
        end = max(float((p.pts + p.duration) * p.time_base) for p in packets)
        return codecs, end - min(float(p.pts * p.time_base) for p in packets)


def test_aac_into_webm_is_encoded_as_opus_with_a_notice(tmp_path, clip):
    out = tmp_path / "out.webm"
    result = run_cli(clip, "-o", out, "-c", "libvpx", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"pipeline: {out}: audio stream #1 (aac) cannot go into webm; encoded as libopus"]
    codecs, seconds = _audio(out)
    assert codecs == ["opus"] and seconds == pytest.approx(_audio(clip)[1], abs=0.05)


@pytest.mark.parametrize("args, suffix, expected", [
    (("--audio", "none"), ".mp4", []),
    (("-an",), ".webm", []),
    (("--audio", "encode"), ".mp4", ["aac"]),
    (("--audio", "encode"), ".mkv", ["aac"]),  # Matroska keeps the input's codec
    (("--audio", "copy"), ".ts", ["aac"]),
], ids=["none", "an", "encode-mp4", "encode-mkv", "copy-ts"])
def test_audio_modes(tmp_path, clip, args, suffix, expected):
    out = tmp_path / f"out{suffix}"
    video = ("-c", "libvpx") if suffix == ".webm" else ()
    result = run_cli(clip, "-o", out, *video, *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    codecs, seconds = _audio(out)
    assert codecs == expected
    if expected:
        assert seconds == pytest.approx(_audio(clip)[1], abs=0.05)


def test_audio_mode_from_toml_and_a_bad_one(tmp_path, clip):
    (config := tmp_path / "c.toml").write_text('audio = "none"\n')
    out = tmp_path / "out.mp4"
    assert run_cli(clip, "-o", out, "--config", config, cwd=tmp_path).returncode == 0
    assert _audio(out)[0] == []
    one_error(run_cli(clip, "-o", tmp_path / "x.mp4", "--audio", "mute", cwd=tmp_path), 2, "--audio")
