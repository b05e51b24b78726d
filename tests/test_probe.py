"""`pipeline probe`: its figures on a real GPU, and its control flow, CLI and tables anywhere."""

from __future__ import annotations

import argparse
import ctypes
import io
import json
import subprocess
import sys
import time
import types

import pytest
from rich.console import Console
from utils import read_json

from pipeline.bench import probe, probe_report
from pipeline.errors import EXIT_GPU, GPUError

SMALL_SIZES = {"1 MiB": 1 << 20, "8 MiB": 8 << 20}


def render(result: dict) -> str:
    console = Console(file=io.StringIO(), record=True, width=140, color_system=None)
    for table in probe_report.probe_table(result):
        console.print(table)
    return console.export_text()


def check_consistent(result: dict, sizes: dict[str, int]) -> None:
    assert json.loads(json.dumps(result)) == result
    assert result["device"]["name"]
    assert result["device"]["total_memory_bytes"] > 0
    whats = {row["what"] for row in result["alloc"]}
    assert {"cudaMalloc", "cudaFree", "cudaHostAlloc", "cudaFreeHost", "pool alloc (hit)", "pool release"} <= whats
    for row in result["alloc"]:
        assert row["bytes"] == sizes[row["size_label"]]
        assert 0 < row["min_us"] <= row["median_us"] <= row["p90_us"]
    assert {(r["direction"], r["memory"]) for r in result["bandwidth"]} == {
        ("H2D", "pageable"), ("D2H", "pageable"), ("H2D", "pinned"), ("D2H", "pinned"), ("H2D+D2H", "pinned"),
        ("H2D", "write-combined"),
    }
    for row in result["bandwidth"]:
        assert row["gbps"] > 0 and row["best_gbps"] >= row["gbps"]
    assert {(r["memory"], r["size_label"]) for r in result["host_access"]} == {
        (m, label) for m in ("pageable", "pinned", "write-combined") for label in sizes}
    for row in result["host_access"]:
        assert row["cpu_write_gbps"] > 0 and row["cpu_read_gbps"] > 0


# --- on a GPU -------------------------------------------------------------------------------


@pytest.mark.gpu
def test_probe_on_gpu_gives_consistent_figures(tmp_path):
    spin_ms = 20.0
    result = probe.run_probe(repeats=3, sizes=SMALL_SIZES, spin_ms=spin_ms)
    check_consistent(result, SMALL_SIZES)

    largest = max(SMALL_SIZES, key=SMALL_SIZES.get)
    gbps = {(r["direction"], r["memory"]): r["gbps"] for r in result["bandwidth"] if r["size_label"] == largest}
    assert gbps["H2D", "pinned"] > gbps["H2D", "pageable"]

    free_sync = result["free_sync"]
    assert "error" not in free_sync, free_sync.get("error")
    assert free_sync["kernel_ms"] >= 0.5 * spin_ms
    # cudaFree of a buffer the kernel never touches still waits for the kernel on another stream.
    assert free_sync["cudaFree_busy_us"] >= 0.5 * spin_ms * 1e3
    assert free_sync["free_waits_for_kernel"] is True
    assert free_sync["cudaFree_idle_us"] < free_sync["cudaFree_busy_us"]

    assert "cudaMalloc" in render(result)


@pytest.mark.gpu
def test_probe_main_on_gpu_writes_json(tmp_path):
    out = tmp_path / "probe.json"
    args = argparse.Namespace(repeats=2, json=str(out), quiet=True)
    assert probe.main(args) == 0
    data = read_json(out)
    assert data["repeats"] == 2 and data["alloc"] and data["bandwidth"]


# --- without a GPU --------------------------------------------------------------------------


def test_main_without_cupy_raises_gpu_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` fail even where CuPy is installed
    args = argparse.Namespace(repeats=3, json=None, quiet=True)
    with pytest.raises(GPUError, match="^pipeline probe needs a CUDA GPU: ") as info:
        probe.main(args)
    assert info.value.exit_code == EXIT_GPU


def test_main_without_a_device_raises_gpu_error(monkeypatch):
    def no_device():
        raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")

    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=no_device)))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    with pytest.raises(GPUError, match="needs a CUDA GPU: cudaErrorNoDevice"):
        probe.main(argparse.Namespace(repeats=3, json=None, quiet=False))


def test_module_imports_without_cupy():
    code = "import sys, pipeline.bench.probe; assert 'cupy' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=probe.__file__.rsplit("/pipeline/", 1)[0])


def test_bad_parameters_are_config_errors():
    with pytest.raises(ValueError, match="repeats"):
        probe.run_probe(repeats=0)
    with pytest.raises(ValueError, match="positive"):
        probe.run_probe(sizes={"none": 0})
    with pytest.raises(ValueError, match="spin_ms"):
        probe.run_probe(spin_ms=0)


def test_add_arguments_defaults_and_help():
    parser = argparse.ArgumentParser()
    probe.add_arguments(parser)
    args = parser.parse_args([])
    assert (args.repeats, args.json, args.quiet) == (20, None, False)
    args = parser.parse_args(["--repeats", "5", "--json", "out.json", "-q"])
    assert (args.repeats, args.json, args.quiet) == (5, "out.json", True)
    help_text = " ".join(parser.format_help().split())
    assert "(default: 20)" in help_text and help_text.count("default") >= 3
    for bad in ("0", "\u0663", "1_0", "1001"):  # other scripts' digits and 1_0 are slips; 1001 runs for hours
        with pytest.raises(SystemExit):
            parser.parse_args(["--repeats", bad])


CANNED = {
    "device": {
        "index": 0, "name": "NVIDIA H200", "compute_capability": "9.0", "total_memory_bytes": 150_000_000_000,
        "free_memory_bytes": 149_000_000_000, "driver_version": "13.0", "runtime_version": "13.0",
        "cupy_version": "14.2.0",
    },
    "repeats": 20,
    "pool": "cupy.cuda.MemoryPool",
    "alloc": [
        {"what": "cudaMalloc", "size_label": "1080p frame", "bytes": 3110400, "repeats": 20,
         "median_us": 12.5, "p90_us": 20.1, "min_us": 10.0},
        {"what": "cudaFree", "size_label": "1080p frame", "bytes": 3110400, "repeats": 20,
         "median_us": 9.0, "p90_us": 11.0, "min_us": 8.0},
        {"what": "cudaMalloc", "size_label": "1 GiB", "bytes": 1 << 30, "repeats": 20,
         "median_us": 1234.5, "p90_us": 1500.0, "min_us": 1100.0},
        {"what": "cudaHostAlloc", "size_label": "4K frame", "bytes": 12441600, "repeats": 20,
         "median_us": 2100.0, "p90_us": 2500.0, "min_us": 2000.0},
        {"what": "pool alloc (hit)", "size_label": "4K frame", "bytes": 12441600, "repeats": 20,
         "median_us": 1.2, "p90_us": 1.9, "min_us": 1.0},
    ],
    "free_sync": {
        "bytes": 12441600, "spin_ms": 50.0, "spin_cycles": 98_000_000, "trials": 5, "kernel_ms": 50.2,
        "cudaFree_idle_us": 30.0, "cudaFree_busy_us": 50_100.0, "malloc_kernel_ms": 50.1,
        "cudaMalloc_idle_us": 25.0, "cudaMalloc_busy_us": 40.0,
        "free_waits_for_kernel": True, "malloc_waits_for_kernel": False,
    },
    "bandwidth": [
        {"direction": "H2D", "memory": "pageable", "size_label": "4K frame", "bytes": 12441600, "repeats": 20,
         "median_ms": 1.1, "gbps": 11.3, "best_gbps": 12.0},
        {"direction": "H2D", "memory": "pinned", "size_label": "4K frame", "bytes": 12441600, "repeats": 20,
         "median_ms": 0.25, "gbps": 49.8, "best_gbps": 52.0},
        {"direction": "H2D+D2H", "memory": "pinned", "size_label": "256 MiB", "bytes": 1 << 28, "repeats": 20,
         "median_ms": 5.4, "gbps": 99.4, "best_gbps": 101.0},
    ],
    "skipped": [],
}


def test_probe_table_renders_canned_result():
    text = render(CANNED)
    for expected in ("NVIDIA H200", "cudaMalloc", "1080p frame", "1.00 GiB", "cudaHostAlloc", "pool alloc (hit)",
                     "pageable", "pinned", "H2D+D2H", "49.8", "GB/s"):
        assert expected in text, expected
    assert "cudaFree waited for the whole device: 50.1 ms" in text
    assert "cudaMalloc during the kernel did not wait" in text


def test_probe_table_reports_an_unmeasured_free_sync():
    result = dict(CANNED, free_sync={"error": "CompileException: nvrtc missing"})
    assert "not measured: CompileException: nvrtc missing" in render(result)


def test_main_prints_tables_and_writes_json(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(probe, "run_probe", lambda repeats: dict(CANNED, repeats=repeats))
    out = tmp_path / "probe.json"
    assert probe.main(argparse.Namespace(repeats=7, json=str(out), quiet=False)) == 0
    assert "Allocation costs on NVIDIA H200 (median of 7)" in capsys.readouterr().out
    assert read_json(out) == dict(CANNED, repeats=7)

    assert probe.main(argparse.Namespace(repeats=7, json=None, quiet=True)) == 0
    assert capsys.readouterr().out == ""


def test_tables_that_cannot_be_written_are_an_output_error_and_the_spinner_is_on_stderr(monkeypatch):
    """On a full stdout the spinner's last write raised OSError there: an internal error, which also hid
    the GPU error of a machine without one."""
    from pipeline.errors import OutputError

    monkeypatch.setattr(probe, "run_probe", lambda repeats: dict(CANNED, repeats=repeats))
    with open("/dev/full", "w") as full:
        monkeypatch.setattr(sys, "stdout", full)
        with pytest.raises(OutputError, match="stdout: write failed: No space left on device"):
            probe.main(argparse.Namespace(repeats=7, json=None, quiet=False))


# --- the measurement logic, against a stand-in for CuPy --------------------------------------


class FakeDevice:
    """Just enough of cupy.cuda for run_probe: one "kernel" at a time, a clock of 1e6 cycles per ms, and a
    cudaFree / cudaFreeHost / cudaDeviceSynchronize that wait for it, as CUDA's do."""

    memcpyHostToDevice, memcpyDeviceToHost = 1, 2

    def __init__(self):
        self.busy_until = 0.0
        self.buffers: dict[int, object] = {}

    # runtime
    def getDeviceCount(self):
        return 1

    def getDeviceProperties(self, index):
        return {"name": b"Fake GPU", "major": 9, "minor": 0}

    def memGetInfo(self):
        return 8 << 30, 16 << 30

    def driverGetVersion(self):
        return 13000

    runtimeGetVersion = driverGetVersion

    def deviceSynchronize(self):
        self.wait_until(self.busy_until)

    def wait_until(self, t):
        while time.perf_counter() < t:
            time.sleep(max(0.0, t - time.perf_counter()))

    def malloc(self, nbytes):
        buf = ctypes.create_string_buffer(nbytes)
        self.buffers[ctypes.addressof(buf)] = buf
        return ctypes.addressof(buf)

    def free(self, ptr):
        self.deviceSynchronize()
        del self.buffers[ptr]

    def hostAlloc(self, nbytes, flags):
        return self.malloc(nbytes)

    freeHost = free

    def memcpyAsync(self, dst, src, nbytes, kind, stream):
        ctypes.memmove(dst, src, nbytes)

    def spin(self, cycles):
        self.busy_until = max(time.perf_counter(), self.busy_until) + cycles / 1e9

    def module(self):
        device = self

        class Event:
            t = 0.0

            def record(self, stream=None):
                self.t = max(time.perf_counter(), device.busy_until)

            def synchronize(self):
                device.wait_until(self.t)

        class Stream:
            ptr = 0

            def __init__(self, non_blocking=False):
                assert non_blocking, "every probe stream must be non-blocking"

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def wait_event(self, event):
                pass

        class PinnedMemory:
            def __init__(self, nbytes, flags=0):
                assert flags in (0, 4), flags  # default, or cudaHostAllocWriteCombined
                self.buf = bytearray(nbytes)

        class MemoryPool:
            def malloc(self, nbytes):
                return object()

            def free_all_blocks(self):
                pass

        def raw_kernel(code, name):
            assert "clock64()" in code
            return lambda grid, block, args: device.spin(int(args[0]))

        cuda = types.SimpleNamespace(
            runtime=self, Device=lambda: types.SimpleNamespace(id=0), Event=Event, Stream=Stream,
            PinnedMemory=PinnedMemory, PinnedMemoryPointer=lambda mem, offset: memoryview(mem.buf)[offset:],
            MemoryPool=MemoryPool, get_elapsed_time=lambda a, b: (b.t - a.t) * 1e3,
        )
        return types.SimpleNamespace(__version__="0.0-fake", cuda=cuda, RawKernel=raw_kernel)


def test_run_probe_logic_against_a_fake_device(monkeypatch):
    fake = FakeDevice()
    monkeypatch.setitem(sys.modules, "cupy", fake.module())
    sizes = {"4 KiB": 4096, "64 KiB": 65536}
    released = []

    def pool_alloc(nbytes):
        return lambda: released.append(nbytes)

    result = probe.run_probe(repeats=3, sizes=sizes, spin_ms=5.0, pool_alloc=pool_alloc)
    check_consistent(result, sizes)
    assert result["device"]["name"] == "Fake GPU" and result["device"]["driver_version"] == "13.0"
    assert "pool_alloc" in result["pool"]
    assert released.count(4096) == 4  # one warm-up, then `repeats` timed rounds

    free_sync = result["free_sync"]
    assert free_sync["bytes"] == 4096 and free_sync["trials"] == 3
    assert free_sync["kernel_ms"] == pytest.approx(5.0, rel=0.5)
    assert free_sync["cudaFree_busy_us"] >= 2500.0 and free_sync["free_waits_for_kernel"] is True
    assert free_sync["malloc_waits_for_kernel"] is False
    assert "cudaFree waited for the whole device" in render(result)
    assert not fake.buffers, "every buffer the probe allocated was freed"
