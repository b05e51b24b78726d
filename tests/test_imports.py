"""One owner per dependency: which modules may import PyAV and CuPy, and what ``import pipeline`` loads."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pipeline"

# PyAV: the I/O layer (decode, encode, the sample clips) and the bench's measured baselines, which time
# plain PyAV and FFmpeg on purpose.
AV_OWNERS = {"source.py", "decode.py", "gops.py", "ingest.py", "sink.py", "encoder_frames.py", "nvdec.py",
             "sample.py", "bench/peers.py", "bench/peer_plumbing.py", "bench/ffmpeg_graph.py", "avlib.py", "encoders.py",
             "audio_out.py", "muxers.py", "opening.py", "protocols.py", "seek.py"}
# CuPy: the CUDA side, the filters' kernels and the conversion stage.
CUPY_OWNERS = ("gpu/", "filters/", "convert/")


def imported_roots(path: Path) -> set[str]:
    """Top-level names of every module ``path`` imports, at module level or inside functions."""
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def modules() -> dict[str, set[str]]:
    return {p.relative_to(PACKAGE).as_posix(): imported_roots(p) for p in PACKAGE.rglob("*.py")}


def test_the_walk_sees_imports_inside_functions(tmp_path):
    sample = tmp_path / "m.py"
    sample.write_text("import os\n\ndef f():\n    import av.error\n    from cupy.cuda import runtime\n")
    assert imported_roots(sample) == {"os", "av", "cupy"}


def test_only_the_io_layer_imports_av():
    offenders = sorted(name for name, roots in modules().items() if "av" in roots and name not in AV_OWNERS)
    assert offenders == [], f"PyAV imported outside the source/sink layer: {offenders}"


def test_only_the_gpu_side_imports_cupy():
    offenders = sorted(name for name, roots in modules().items()
                       if roots & {"cupy", "cupyx"} and not name.startswith(CUPY_OWNERS))
    assert offenders == [], f"CuPy imported outside gpu/, filters/ and convert/: {offenders}"


def test_nothing_under_gpu_imports_filters():
    offenders = []
    for path in (PACKAGE / "gpu").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and "filters" in node.module.split("."):
                offenders.append(path.name)
    assert offenders == []


def test_import_pipeline_loads_no_codec_gpu_or_opencv_module():
    code = ("import sys, pipeline; pipeline.__version__; "
            "print(sorted(m for m in ('av', 'cupy', 'cv2') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_commands_first_lines_come_before_any_import_that_takes_long():
    """pipeline.launch takes Ctrl-C once it runs; what the package imports before that (logging, typing:
    tens of milliseconds on a busy machine) would end in the interpreter's traceback instead."""
    code = ("import sys; before = set(sys.modules); import pipeline.launch; "
            "print(sorted(m for m in ('logging', 'typing', 're', 'pathlib') if m in set(sys.modules) - before))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_library_logs_nothing_unless_the_application_configures_logging():
    code = ("import logging, pipeline.memory.host_ring; "
            "print([type(h).__name__ for h in logging.getLogger('pipeline').handlers])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["['NullHandler']"], out.stdout + out.stderr


def test_the_public_names_resolve_lazily():
    code = ("import sys, pipeline; assert 'pipeline.api' not in sys.modules; "
            "f = pipeline.frames; r = pipeline.run; print(f.__module__, r.__module__, "
            "issubclass(pipeline.ConfigError, ValueError), sorted(set(pipeline.__all__) - set(dir(pipeline))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["pipeline.api", "pipeline.api", "True", "[]"], out.stdout + out.stderr


def test_parsing_a_run_builds_only_its_own_options():
    # the early CUDA context starts after parsing: other commands' option modules would delay it
    code = ("import sys; from pipeline.cli import build_parser, command_of; "
            "argv = ['run', 'in.mp4', '-o', 'null', '--device', 'cpu']; "
            "args = build_parser(command_of(argv)).parse_args(argv); "
            "print(args.command, args.output, sorted(m for m in sys.modules if m.startswith(('pipeline.bench', "
            "'pipeline.batch', 'pipeline.engine', 'av', 'cupy'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["run", "null", "[]"], out.stdout + out.stderr


def test_every_command_parses_with_only_its_own_options():
    from pipeline.cli_parser import COMMANDS, build_parser, command_of

    full = build_parser()
    for name in COMMANDS:
        argv = [name, "--help"]
        assert command_of(argv) == name
        with pytest.raises(SystemExit):
            build_parser(name).parse_args(argv)
        own = build_parser(name)._subparsers._group_actions[0].choices[name]
        assert own.format_help() == full._subparsers._group_actions[0].choices[name].format_help()
    assert command_of(["--version"]) is None and command_of([]) is None and command_of(["runx"]) is None


def test_the_early_cuda_context_is_made_only_for_a_gpu_device(monkeypatch):
    import threading

    from pipeline.gpu import driver
    from pipeline.startup import create_cuda_context_early

    asked = []
    monkeypatch.setattr(driver, "retain_primary_context", lambda index: asked.append(index) or False)
    assert create_cuda_context_early("cpu") is None
    for device, index in (("auto", 0), ("cuda", 0), ("cuda:3", 3)):
        thread = create_cuda_context_early(device)
        assert isinstance(thread, threading.Thread) and thread.daemon
        thread.join(5)
        assert asked[-1] == index
    assert len(asked) == 3


def test_the_early_cuda_context_without_a_driver_does_nothing():
    import ctypes

    from pipeline.gpu.driver import retain_primary_context

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        assert retain_primary_context(0) is False
    else:
        pytest.skip("this machine has NVIDIA's driver: see the GPU test below")


class FakeDriver:
    """libcuda's calls, recording what they were given (``byref`` arguments: their objects)."""

    def __init__(self):
        self.calls = []
        for name in ("cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent"):
            setattr(self, name, self._recorder(name))

    def _recorder(self, name):
        def call(*args):
            self.calls.append((name, call.argtypes, [getattr(a, "_obj", a) for a in args]))
            if name == "cuDeviceGet":
                args[0]._obj.value = args[1]  # ordinal N is device N
            return 0

        call.argtypes = call.restype = None
        return call


@pytest.fixture
def fake_driver(monkeypatch):
    """A FakeDriver as libcuda, and no contexts retained before or after."""
    import ctypes

    from pipeline.gpu import driver as module

    fake = FakeDriver()
    monkeypatch.setattr(ctypes, "CDLL", lambda name: fake)
    monkeypatch.setattr(module, "_contexts", {})
    module._load.cache_clear()
    yield fake
    module._load.cache_clear()


def test_the_early_cuda_context_passes_the_driver_c_types(fake_driver):
    from pipeline.gpu.driver import retain_primary_context

    assert retain_primary_context(2**32 + 1) is False and fake_driver.calls == []  # would be GPU 1 as a C int
    assert retain_primary_context(3) is True
    names = [name for name, _, _ in fake_driver.calls]
    assert names == ["cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain"]
    assert all(argtypes for _, argtypes, _ in fake_driver.calls)
    assert fake_driver.calls[1][2][1] == 3 and fake_driver.calls[2][2][1] == 3


def test_a_primary_context_is_retained_once_and_made_current_in_each_thread(fake_driver):
    import threading

    from pipeline.gpu.driver import make_primary_current

    threads = [threading.Thread(target=make_primary_current, args=(1,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    names = [name for name, _, _ in fake_driver.calls]
    assert names.count("cuDevicePrimaryCtxRetain") == 1 and names.count("cuCtxSetCurrent") == 4


def test_making_a_gpu_current_without_a_driver_is_a_gpu_error(monkeypatch):
    from pipeline.errors import GPUError
    from pipeline.gpu import driver

    monkeypatch.setattr(driver, "_load", lambda: None)
    monkeypatch.setattr(driver, "_contexts", {})
    with pytest.raises(GPUError, match="GPU 2"):
        driver.make_primary_current(2)


@pytest.mark.gpu
def test_the_early_cuda_context_is_the_one_cupy_uses():
    from pipeline.gpu.cuda import cupy
    from pipeline.gpu.driver import retain_primary_context

    assert retain_primary_context(0) is True
    assert retain_primary_context(99) is False  # no such GPU
    cp = cupy()
    cp.cuda.Device(0).use()
    assert int(cp.arange(1, 5).sum()) == 10
