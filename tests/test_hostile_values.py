"""Hostile values and code: NaN and infinity, plugins that fail or exit, memory the up-front check must see,
CUDA failures (against a fake CuPy: this machine has no GPU).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from utils import environment, one_error, partials, pipeline_command, run_command, run_pipeline

import pipeline
from pipeline.errors import ConfigError


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
    one_error(run_pipeline(clip, "-o", out, *args, cwd=tmp_path), 2, word)
    assert not out.exists() and partials(tmp_path) == []


@pytest.mark.parametrize("chain, word", [
    ("bilateral=sigma_s=2:sigma_r=5e-324", "sigma_r must be >= 0.001"),
    ("bilateral=sigma_r=1e-20", "sigma_r must be >= 0.001"),
    ("bilateral=sigma_s=5e-324", "sigma_s must be >= 0.1"),
    ("bilateral=sigma_s=1e-30:sigma_r=0.1", "sigma_s must be >= 0.1"),
], ids=["sigma_r-denormal", "sigma_r-tiny", "sigma_s-denormal", "sigma_s-tiny"])
def test_filter_values_too_small_to_compute_exit_2(tmp_path, clip, chain, word):
    result = run_pipeline(clip, "-o", "null", "--filters", chain, cwd=tmp_path)
    one_error(result, 2, word)
    assert "RuntimeWarning" not in result.stderr


@pytest.mark.parametrize("args, words", [
    (("--arena-headroom", "1e308"), ("arena_headroom", "from 1.0 to 4.0")),
    (("--in-flight", "100000"), ("in_flight", "from 1 to 64")),
    (("--ring-size", "100000"), ("ring_size", "from 2 to 256")),
    (("--streams", "100000"), ("streams", "from 1 to 32")),
    (("-ss", "99999999999999999999"), ("start", "to 1,000,000,000")),
    (("-to", "99999999999999999999"), ("end", "to 1,000,000,000")),
    (("-t", "99999999999999999999"), ("duration", "to 1,000,000,000")),
], ids=["arena-headroom", "in-flight", "ring-size", "streams", "start", "end", "duration"])
def test_values_past_the_largest_exit_2_naming_the_limit(tmp_path, clip, args, words):
    one_error(run_pipeline(clip, "-o", "null", *args, cwd=tmp_path), 2, *words)


def test_non_finite_toml_value_exits_2(tmp_path, clip):
    (config := tmp_path / "c.toml").write_text("arena_headroom = nan\n")
    one_error(run_pipeline(clip, "-o", tmp_path / "out.mp4", "--config", config, cwd=tmp_path), 2, "arena_headroom")


@pytest.mark.parametrize("args, word", [
    (("--frames", "-1"), "frames"), (("--frames", "1e99"), "--frames"), (("--frames", "0"), "frames"),
    (("--timeout", "nan"), "timeout"), (("--timeout", "-0"), "timeout"),
    (("--latency-budget", "-5"), "latency_budget"), (("--latency-budget", "0"), "latency_budget"),
    (("-ss", "nan"), "-ss"), (("-t", "inf"), "-t"), (("-to", "1e400"), "-to"), (("-t", "0"), "duration"),
    (("--pinned-cap-mib", "0"), "pinned_cap_mib"), (("--pinned-cap-mib", "-1"), "pinned_cap_mib"),
    (("--reconnect", "-1"), "reconnect"), (("--nvdec-sessions", "0"), "nvdec_sessions"),
    (("--nvdec-sessions", "17"), "nvdec_sessions"),
    (("--input-opt", "probesize=-5"), "--input-opt probesize=-5"),
    (("--input-opt", "analyzeduration=1e99"), "--input-opt analyzeduration"),
    (("--input-opt", "probesize=abc"), "--input-opt probesize=abc"),
], ids=lambda v: v if isinstance(v, str) else "_".join(v))
def test_values_below_their_range_or_not_numbers_exit_2(tmp_path, clip, args, word):
    one_error(run_pipeline(clip, "-o", "null", *args, cwd=tmp_path), 2, word)


def test_a_config_nested_too_deeply_exits_2(tmp_path, clip):
    (config := tmp_path / "deep.toml").write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    one_error(run_pipeline(clip, "-o", "null", "--config", config, cwd=tmp_path), 2, "deep.toml", "nested too deeply")


def test_non_finite_cube_row_exits_2(tmp_path, clip):
    rows = ["0 0 0"] * 7 + ["1e999 0 0"]  # overflows to inf; "nan" is refused as a keyword
    (cube := tmp_path / "bad.cube").write_text("LUT_3D_SIZE 2\n" + "\n".join(rows) + "\n")
    one_error(run_pipeline(clip, "-o", tmp_path / "out.mp4", "--filters", f"lut3d=file={cube.name}", cwd=tmp_path),
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


def _plugin_text(directory: Path, name: str, body: str) -> Path:
    path = directory / f"{name}.py"
    path.write_text(f"from pipeline.filters import Filter, register_filter\n\n@register_filter({name!r})\n{body}\n")
    return path


@pytest.mark.parametrize("make, word", [
    (lambda d: (d / "notes.txt").write_text("Remember: buy milk.\n") and d / "notes.txt", "SyntaxError"),
    (lambda d: write_plugin(d, "quits", top="import sys\nsys.exit(7)\n"), "sys.exit(7)"),
    (lambda d: write_plugin(d, "based", top="raise BaseException('odd')\n"), "BaseException"),
    (lambda d: write_plugin(d, "fails", top="raise ImportError('no module named magic')\n"), "ImportError"),
    # What the registry reads from the class was read at the listing or mid-run: AttributeError, exit 1.
    (lambda d: _plugin_text(d, "bare", "class G:\n    pass"), "class G is not a subclass of pipeline.filters.Filter"),
    (lambda d: _plugin_text(d, "helps", "class G(Filter):\n    help = 5"), "its help must be a str, not int"),
    (lambda d: _plugin_text(d, "letters", "class G(Filter):\n    params = 'xyz'"), "tuple of pipeline.filters.Param"),
], ids=["text-file", "sys-exit", "base-exception", "import-error", "not-a-filter", "help", "params"])
def test_a_plugin_failing_to_load_exits_2_naming_it(tmp_path, clip, make, word):
    plugin = make(tmp_path)
    result = run_pipeline(clip, "-o", tmp_path / "out.mp4", "--plugin", plugin, cwd=tmp_path)
    one_error(result, 2, plugin.name, word)
    assert not (tmp_path / "out.mp4").exists()


def test_a_plugin_raising_keyboardinterrupt_where_sigint_is_ignored_fails_to_load(tmp_path, clip):
    """No Ctrl-C can reach a process that ignores SIGINT (a batch's workers, a job started with `&`): the
    KeyboardInterrupt is the plugin's own. A batch's worker died of it with a 40-line traceback, exit 1."""
    plugin = write_plugin(tmp_path, "stops", top="raise KeyboardInterrupt\n")
    result = run_command(["sh", "-c", 'trap "" INT; exec "$@"', "sh",
                          *pipeline_command(clip, "-o", tmp_path / "out.mp4", "--plugin", plugin)], cwd=tmp_path)
    one_error(result, 2, "cannot load plugin", "stops.py: KeyboardInterrupt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stops.py"]


@pytest.mark.parametrize("kind", ["directory", "FIFO", "character device"])
def test_a_plugin_that_is_not_a_file_says_what_it_is(tmp_path, clip, kind):
    path = {"directory": tmp_path, "character device": Path("/dev/null")}.get(kind, tmp_path / "fifo")
    if kind == "FIFO":
        os.mkfifo(path)
    result = run_pipeline(clip, "-o", tmp_path / "out.mp4", "--plugin", path, cwd=tmp_path)
    one_error(result, 2, f"plugin {path}: is a {kind}; a plugin is a Python file")


def test_a_plugin_failing_while_the_chain_is_built_exits_2_naming_it(tmp_path, clip):
    plugin = write_plugin(tmp_path, "picky", init="raise ValueError('level is not to my taste')")
    result = run_pipeline(clip, "-o", tmp_path / "out.mp4", "--plugin", plugin, "--filters", "picky", cwd=tmp_path)
    one_error(result, 2, "picky.py", "not to my taste")


@pytest.mark.parametrize("cpu, word", [("raise RuntimeError('kaput')", "kaput"),
                                       ("raise SystemExit(3)", "sys.exit(3)"),
                                       # the plugin named, not only "out of host memory"
                                       ("raise MemoryError('no room')", "MemoryError: no room")],
                         ids=["raises", "exits", "memory"])
def test_a_plugin_failing_during_the_run_is_named_not_called_a_bug(tmp_path, clip, cpu, word):
    plugin = write_plugin(tmp_path, "flaky", cpu=cpu)
    out = tmp_path / "out.mp4"
    result = run_pipeline(clip, "-o", out, "--plugin", plugin, "--filters", "gblur=sigma=1,flaky", cwd=tmp_path)
    line = one_error(result, 1, "'flaky'", str(plugin.resolve()), "frame 0", word)
    assert "internal error" not in line and "bug" not in line and "while loading" not in line
    assert not out.exists() and partials(tmp_path) == []


@pytest.mark.parametrize("size, word", [("(width - 1, height)", "the chain's output would be 63x48; the output is "
                                                                "4:2:0, so its sides must be even"),
                                         ("(width / 2, height / 2)", "gave (32.0, 24.0); a filter's output size is a"),
                                         ("[width, height]", "gave [64, 48]")], ids=["odd", "float", "list"])
def test_a_plugin_giving_an_unusable_output_size_exits_2_naming_it(tmp_path, clip, size, word):
    """Its size sets every buffer after it: odd, fractional or not a pair, it is the plugin's mistake, said before
    any frame (it raised a raw ValueError or TypeError: "internal error")."""
    plugin = tmp_path / "sizer.py"
    plugin.write_text(PLUGIN_FILTER.format(name="sizer", init="pass", cpu="pass")
                      + f"\n    def output_size(self, width, height):\n        return {size}\n")
    result = run_pipeline(clip, "-o", tmp_path / "out.mp4", "--plugin", plugin, "--filters", "sizer", cwd=tmp_path)
    line = one_error(result, 2, "sizer", word)
    assert "internal error" not in line and not (tmp_path / "out.mp4").exists() and partials(tmp_path) == []


def test_odd_sizes_between_filters_are_taken(tmp_path, clip):
    """Between filters the frames are RGB planes of any size; only the output is 4:2:0."""
    plugin = tmp_path / "sizer.py"
    plugin.write_text(PLUGIN_FILTER.format(name="sizer", init="pass", cpu="dst[...] = src[:, :-1, :-1]; return")
                      + "\n    def output_size(self, width, height):\n        return width - 1, height - 1\n")
    out = tmp_path / "out.mkv"
    result = run_pipeline(clip, "-o", out, "--plugin", plugin, "--filters", "sizer,scale=w=32:h=24", "-c", "ffv1",
                          cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    import av

    with av.open(str(out)) as media:
        frame = next(media.decode(video=0))
    assert (frame.width, frame.height) == (32, 24)


def test_a_plugin_taking_a_built_in_name_fails_alone_and_the_built_ins_stay(tmp_path, clip):
    """In a fresh process (the built-ins not registered yet): the plugin's registration is what fails, naming
    the built-in it collides with; the next run in the process still has every built-in."""
    plugin = write_plugin(tmp_path, "invert")
    script = f"""
import pipeline
for attempt in range(2):
    try:
        pipeline.run({str(clip)!r}, "null", device="cpu", plugins=[{str(plugin)!r}], filters="grayscale")
    except pipeline.ConfigError as e:
        print("refused:", e)
print("then:", pipeline.run({str(clip)!r}, "null", device="cpu", filters="grayscale,invert")["frames_out"])
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and len(lines) == 3, proc.stderr
    assert all("'invert' is already registered (by pipeline.filters." in line for line in lines[:2]), lines
    assert lines[2].startswith("then:") and int(lines[2].split()[1]) > 0


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
    _return_free_heap()  # else the allocation may reuse pages earlier tests freed, resident already
    resident = _resident_bytes()
    memory = CpuBackend(strategy("pool")).memory(plan.request(cfg))
    try:
        reserved = memory.device.arena.capacity + sum(h.bytes_reserved for h in memory.hosts)
        assert reserved == needed
        # Taken now, not at first use (resident, not only reserved): the next run's check sees it gone.
        assert _resident_bytes() - resident > 0.9 * needed
    finally:
        memory.close()


def _resident_bytes() -> int:
    import os

    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _return_free_heap() -> None:
    """Give the memory the C allocator holds free back to the system (glibc's malloc_trim; elsewhere nothing)."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


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


def Device(index=0):
    return types.SimpleNamespace(id=index, compute_capability="90", use=lambda: None)


class RawKernel:  # compiles and launches nothing: the failures under test come before any frame
    def __init__(self, code, name, options=()):
        self.code, self.name = code, name

    def compile(self):
        pass

    def __call__(self, grid, block, args, shared_mem=0):
        pass


cuda = types.SimpleNamespace(runtime=runtime, Stream=Stream, Event=Event, get_elapsed_time=lambda a, b: 0.0,
                             memory=types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError), Device=Device)
'''


@pytest.fixture
def fake_cupy(tmp_path) -> Path:
    (fake := tmp_path / "fakecupy").mkdir()
    (fake / "cupy.py").write_text(FAKE_CUPY)
    return fake


def run_with_fake_cupy(fake: Path, fail: str, clip: Path, cwd: Path) -> subprocess.CompletedProcess:
    import os

    env = environment(FAKE_CUPY_FAIL=fail, CUPY_CACHE_DIR=str(cwd / "kernel_cache"),
                      PYTHONPATH=os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")] + sys.path))
    (cwd / "kernel_cache").mkdir(exist_ok=True)  # a warm kernel cache: no first-run notice before the error
    from pipeline import __version__

    (cwd / "kernel_cache" / f"pipeline-{__version__}-sm90.warm").write_text("")
    return run_pipeline(clip, "-o", cwd / "out.mp4", device="cuda", cwd=cwd, env=env)


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
    from pipeline.gpu import failures

    fake = types_module(FAKE_CUPY)
    # failures binds cupy at import, which an earlier test may already have done
    for module in (gpu_cuda, failures):
        monkeypatch.setattr(module, "cupy", lambda: fake)
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


def test_an_error_message_with_newlines_is_printed_on_one_line(tmp_path, clip):
    plugin = write_plugin(tmp_path, "chatty", cpu="raise RuntimeError('first line\\nsecond line')")
    line = one_error(run_pipeline(clip, "-o", tmp_path / "out.mp4", "--plugin", plugin, "--filters", "chatty",
                                  cwd=tmp_path), 1)
    assert "first line second line" in line


def test_an_unknown_encoder_is_refused_with_a_null_output_too(tmp_path):
    """-o null encodes nothing, but -c naming no encoder FFmpeg has is a mistake all the same (as ffmpeg says)."""
    from utils import ROOT

    proc = run_pipeline(ROOT / "samples" / "sample.mp4", "-o", "null", "-c", "nope", "--frames", "2")
    assert proc.returncode == 2 and "unknown encoder 'nope'" in proc.stderr, proc.stderr
    assert run_pipeline(ROOT / "samples" / "sample.mp4", "-o", "null", "-c", "mpeg4", "--frames", "2").returncode == 0


@pytest.mark.parametrize("where", ["input", "output"])
@pytest.mark.parametrize("name", ["pipe:2147483648", "pipe:-1", "pipe:abc", "pipe:1x", "pipe:\u0661"])
def test_a_pipe_name_that_is_no_file_descriptor_is_a_bad_option(tmp_path, clip, where, name):
    """Past any descriptor, negative, not digits or not ASCII ones: FFmpeg would take stdin or stdout, a
    file of that name is not what was meant (``./pipe:abc`` names one)."""
    args = [name, "-o", tmp_path / "out.mp4"] if where == "input" else [clip, "-o", name, "-f", "mpegts"]
    one_error(run_pipeline(*args, cwd=tmp_path), 2, "pipe:N takes a file descriptor", "./")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("option, words", [("-progress", "the pipes are pipe:1"), ("--stats-json", "not a pipe name")])
def test_a_malformed_pipe_name_is_no_report_file(tmp_path, clip, option, words):
    one_error(run_pipeline(clip, "-o", tmp_path / "out.mp4", option, "pipe:abc", cwd=tmp_path), 2, words)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("what", ["stats-from-config", "output-is-config", "output-is-plugin", "streams-stats",
                                  "batch-json-config", "batch-json-plugin"])
def test_a_file_the_run_reads_is_never_what_it_writes(tmp_path, clip, what):
    """Even with -y: the config file, a plugin or a LUT is not replaced by the run's output or statistics,
    in one run, streams side by side or a batch."""
    from utils import run_cli

    config, plugin = tmp_path / "c.toml", write_plugin(tmp_path, "keeps")
    config.write_text('stats_json = "c.toml"\n' if what == "stats-from-config" else 'filters = "hflip"\n')
    (tmp_path / "out").mkdir()
    args = {"stats-from-config": ["run", clip, "-o", "null", "--config", config],
            "output-is-config": ["run", clip, "-o", config, "-f", "matroska", "--config", config],
            "output-is-plugin": ["run", clip, "-o", plugin, "-f", "matroska", "--plugin", plugin],
            "streams-stats": ["run", clip, clip, "-o", f"{tmp_path / 'out'}/", "--config", config,
                              "--stats-json", config],
            "batch-json-config": ["batch", clip, "-o", tmp_path / "out", "--config", config, "--json", config],
            "batch-json-plugin": ["batch", clip, "-o", tmp_path / "out", "--plugin", plugin, "--json", plugin]}[what]
    before = {p: p.read_bytes() for p in (config, plugin)}
    one_error(run_cli(*args, "-y", "--device", "cpu", cwd=tmp_path, timeout=60), 2, "choose another path")
    assert {p: p.read_bytes() for p in (config, plugin)} == before


@pytest.mark.parametrize("args", [["-vf", "gblur=sigma=1_0"], ["-vf", "gblur=sigma=\uff11"], ["-ss", "\u0661"],
                                  ["--frames", "1_0"], ["--frames", "\u0663"], ["--timeout", "1_0"]],
                         ids=["underscore", "fullwidth", "arabic-indic-time", "frames-underscore",
                              "frames-arabic-indic", "timeout"])
def test_numbers_are_ascii_digits_as_every_other_video_tool_reads_them(tmp_path, clip, args):
    one_error(run_pipeline(clip, "-o", "null", *args, cwd=tmp_path), 2, args[1])


def test_ascii_numbers_still_read_as_python_reads_them():
    from pipeline.numbers import integer, number

    assert [integer(t) for t in ("7", "+7", "-7", " 42 ")] == [7, 7, -7, 42]
    assert [number(t) for t in ("1", "1.", ".5", "-2.5e-3", "1E3")] == [1.0, 1.0, 0.5, -0.0025, 1000.0]
    assert all(number(t) != number(t) for t in ("nan", "NaN"))  # let through: the range checks name them
    for bad in ("1_0", "\uff11", "0x10", "", "1e", "e3", "--1"):
        with pytest.raises(ValueError):
            number(bad)


@pytest.mark.parametrize("args", [["run", "IN", "-o", ""], ["run", "IN", ""], ["run", "IN", "-o", "null", "--config", ""],
                                  ["run", "IN", "-o", "null", "--stats-json", ""],
                                  ["run", "IN", "-o", "null", "-progress", ""], ["sample", "-o", ""],
                                  ["batch", "IN", "-o", ""], ["probe", "--json", ""], ["filters", "--plugin", ""],
                                  ["batch", "@", "-o", "null", "--device", "cpu"], ["run", "IN", "-o", "null", "-c", ""],
                                  ["run", "IN", "-o", "null", "--pix-fmt", ""], ["filters", ""],
                                  ["sample", "-o", "x.mp4", "--codec", ""], ["run", "IN", "-o", "null", "-f", ""],
                                  ["run", "IN", "-o", "null", "--input-format", ""]],
                         ids=["output", "positional", "config", "stats-json", "progress", "sample", "batch", "probe",
                              "plugin", "input-list", "codec", "pix-fmt", "filter", "sample-codec", "format",
                              "input-format"])
def test_an_empty_file_name_is_a_bad_option_not_a_default(tmp_path, clip, args):
    """``-o "$OUT"`` with OUT unset: refused, rather than writing the default name or nothing."""
    from utils import run_cli

    argv = [str(clip) if a == "IN" else a for a in args]
    one_error(run_cli(*argv, cwd=tmp_path, timeout=60), 2, "an empty name")
    assert list(tmp_path.iterdir()) == []
