"""scripts/bench_filters.py: byte accounting, parameters, rendering and the CLI contract on the CPU;
the orchestration against a fake CuPy; a short real run on the GPU."""

from __future__ import annotations

import importlib.util
import sys
import types

import numpy as np
import pytest
from utils import ROOT, gpu_available, read_json, run_python

from pipeline.filters import FILTERS, parse_chain

SCRIPT = ROOT / "scripts" / "bench_filters.py"


def _load_script():
    """The script as a module (it is no package: scripts/ is not on the path)."""
    spec = importlib.util.spec_from_file_location("bench_filters", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


bf = _load_script()
parse_chain("")  # registers the built-in filters
W, H = 1920, 1080
RGB = 3 * W * H * 4


def case(label: str, w: int = W, h: int = H) -> bf.Case:
    matches = [c for c in bf.build_cases(w, h) if c.label == label]
    assert len(matches) == 1, [c.label for c in bf.build_cases(w, h)]
    return matches[0]


# --- bytes ------------------------------------------------------------------------------------------


def test_pointwise_filter_reads_once_and_writes_once():
    c = case("eq")
    assert c.category == "pointwise"
    assert bf.case_bytes(c, W, H) == (2 * RGB, 2 * RGB, (W, H))


def test_separable_filter_counts_its_scratch_pass_only_when_not_fused():
    c = case("gblur")
    assert c.category == "separable"
    # radius <= MAX_FUSED_RADIUS: one tiled kernel, src read once, dst written once
    assert bf.case_bytes(c, W, H) == (2 * RGB, 2 * RGB, (W, H))
    assert bf.case_bytes(case("unsharp"), W, H)[:2] == (2 * RGB, 2 * RGB)
    # above it: blur through scratch (4 frames), then unsharp's mix reads src and the blur and writes dst (3 more)
    (wide,) = parse_chain("unsharp=sigma=20")
    assert bf.filter_bytes(wide, W, H)[:2] == (2 * RGB, 7 * RGB)


def test_scale_rows_use_the_real_sizes():
    half, up = case("scale 1/2 (area)"), case("scale 1.5x (bilinear)")
    assert half.category == up.category == "geometry"
    assert half.spec == "scale=w=960:h=540" and up.spec == "scale=w=2880:h=1620"
    small, big = 3 * 960 * 540 * 4, 3 * 2880 * 1620 * 4
    # impl: the horizontal pass writes and the vertical pass reads a (3, H_in, W_out) frame
    assert bf.case_bytes(half, W, H) == (RGB + small, RGB + small + 2 * 3 * H * 960 * 4, (960, 540))
    assert bf.case_bytes(up, W, H) == (RGB + big, RGB + big + 2 * 3 * H * 2880 * 4, (2880, 1620))


def test_crop_reads_only_what_it_keeps():
    c = case("crop 1/2")
    assert c.spec == "crop=w=960:h=540"
    assert bf.case_bytes(c, W, H) == (2 * 3 * 960 * 540 * 4,) * 2 + ((960, 540),)


def test_temporal_row_reads_and_writes_its_state():
    for name in ("tdenoise", "motion"):
        c = case(name)
        assert c.category == "temporal"
        assert bf.case_bytes(c, W, H) == (4 * RGB, 4 * RGB, (W, H))


def test_conversions_and_chains():
    i420 = W * H * 3 // 2
    assert bf.case_bytes(case("yuv_to_rgb (I420 -> RGB)"), W, H) == (i420 + RGB, i420 + RGB, (W, H))
    assert bf.case_bytes(case("rgb_to_yuv (RGB -> I420)"), W, H) == (RGB + i420, RGB + i420, (W, H))
    assert bf.case_bytes(case(f"default chain {bf.DEFAULT_CHAIN}"), W, H) == (2 * RGB, 4 * RGB, (W, H))
    fused, unfused = case("fused eq+hue+vignette"), case("unfused eq,hue,vignette")
    assert len(fused.filters) == 1 and len(unfused.filters) == 3
    assert bf.case_bytes(fused, W, H) == (2 * RGB, 2 * RGB, (W, H))
    assert bf.case_bytes(unfused, W, H) == (2 * RGB, 6 * RGB, (W, H))


def test_finish_row_bandwidth_and_percent_of_copy():
    row = bf.finish_row(case("eq"), W, H, [0.02, 0.01, 0.03], copy_gbps=4000.0)
    assert row["ms"] == 0.02
    assert row["gbps_min"] == pytest.approx(2 * RGB / 0.02e-3 / 1e9)
    assert row["pct_copy_min"] == pytest.approx(100 * row["gbps_min"] / 4000.0)
    assert row["gbps_impl"] == row["gbps_min"]


def test_fusion_note_gives_the_speedup():
    rows = [bf.finish_row(case("fused eq+hue+vignette"), W, H, [0.01], 4000.0),
            bf.finish_row(case("unfused eq,hue,vignette"), W, H, [0.03], 4000.0)]
    bf.annotate_fusion(rows)
    assert rows[0]["speedup_vs_unfused"] == pytest.approx(3.0)
    assert "3.00x vs unfused" in rows[0]["note"]


# --- parameters -------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [(1920, 1080), (3840, 2160), (320, 180)])
def test_every_registered_filter_has_parameters_that_run(size):
    """A new filter whose defaults cannot run fails here: give it settings in EXPLICIT_PARAMS."""
    w, h = size
    cases = bf.build_cases(w, h, extras=False)
    names = {c.filters[0].name for c in cases}
    assert names == set(FILTERS)
    for c in cases:
        assert c.category in bf.CATEGORIES, c.label
        f = c.filters[0]
        out = f.output_size(w, h)
        assert out[0] > 0 and out[1] > 0
        # the chain text parses back to the same filter (what a user would type)
        if f.name != "lut3d":
            assert repr(parse_chain(c.spec)[0]) == repr(f)
    assert len({c.label for c in cases}) == len(cases)


def test_lut_path_is_resolved_from_the_script_not_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    f = case("lut3d").filters[0]
    assert f.lut.size > 1
    assert case("lut3d").spec == "lut3d=file=pipeline/presets/luts/warm.cube"


def test_a_filter_without_usable_defaults_is_named(monkeypatch):
    monkeypatch.setitem(bf.EXPLICIT_PARAMS, "lut3d", lambda w, h: [("lut3d", {})])
    with pytest.raises(ValueError, match="'lut3d'.*EXPLICIT_PARAMS"):
        bf.build_cases(W, H, ["lut3d"])


def test_parse_sizes():
    assert bf.parse_sizes("1920x1080,3840x2160") == [(1920, 1080), (3840, 2160)]
    assert bf.parse_sizes(" 4k , 320x180 ") == [(3840, 2160), (320, 180)]
    for bad in ("1920", "1920x", "1919x1080", "axb", ""):
        with pytest.raises(ValueError):
            bf.parse_sizes(bad)


# --- rendering --------------------------------------------------------------------------------------

META = {"device": {"name": "NVIDIA H200", "cupy": "14.0.0"}, "date": "2026-11-29 10:00 UTC",
        "command": "python scripts/bench_filters.py --iters 50", "copy": {"mib": 1024, "gbps": 4000.0},
        "settings": {"iters": 50, "warmup": 5, "flush_l2": True}}


def canned_rows():
    rows = [bf.finish_row(case("eq"), W, H, [0.0125], 4000.0),
            bf.finish_row(case("scale 1/2 (area)"), W, H, [0.02], 4000.0),
            bf.finish_row(case("tdenoise"), W, H, [0.03], 4000.0)]
    rows[2]["host_bound"] = True
    broken = bf.base_row(case("gblur"), W, H)
    broken["error"] = "CompileException: a | b"
    return [*rows, broken]


def test_markdown_table():
    text = bf.render_markdown(META, canned_rows())
    lines = text.splitlines()
    assert lines[0].startswith("### ") and "NVIDIA H200" in lines[0] and "2026-11-29" in lines[0]
    assert "`python scripts/bench_filters.py --iters 50`" in text
    assert "4000 GB/s" in text
    table = [line for line in lines if line.startswith("|")]
    assert len(table) == 2 + 4
    widths = {len(line.replace("\\|", "").split("|")) for line in table}
    assert len(widths) == 1  # every row has as many cells as the header
    eq = next(line for line in table if "| eq |" in line)
    # 2 frames of 1080p in 0.0125 ms: 3981 GB/s, 100% of the copy
    assert "| 0.0125 |" in eq and "| 49.8 |" in eq and "| 3981 |" in eq and "| 100 |" in eq
    assert "960x540" in next(line for line in table if "scale 1/2" in line)
    assert "host-bound" in next(line for line in table if "tdenoise" in line)
    assert "error: CompileException: a \\| b" in text


def test_rich_table_and_json(tmp_path):
    from rich.console import Console

    console = Console(record=True, width=200)
    bf.render_rich(META, canned_rows(), console)
    out = console.export_text()
    for word in ("NVIDIA H200", "1920x1080", "eq", "scale 1/2 (area)", "tdenoise", "error"):
        assert word in out
    bf.write_json(META, canned_rows(), tmp_path / "r.json")
    data = read_json(tmp_path / "r.json")
    assert data["device"]["name"] == "NVIDIA H200" and len(data["rows"]) == 4


# --- CLI --------------------------------------------------------------------------------------------


def test_without_gpu_exits_5_with_one_line(tmp_path):
    if gpu_available():
        pytest.skip("a GPU is present")
    proc = run_python(SCRIPT, "--iters", "3", "--json", tmp_path / "x.json", cwd=tmp_path)
    assert proc.returncode == 5
    assert proc.stderr.count("\n") == 1 and "needs a CUDA GPU" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "x.json").exists()


def test_bad_sizes_are_a_usage_error():
    proc = run_python(SCRIPT, "--sizes", "1921x1080")
    assert proc.returncode == 2 and "even" in proc.stderr


# --- the GPU path against a fake CuPy (catches Python errors in code this machine cannot run) ------


def fake_cupy():
    class Stream:
        ptr = 1

        def __init__(self, non_blocking=False):
            assert non_blocking

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def synchronize(self):
            pass

    clock = iter(range(1, 10**9))

    class Event:
        def __init__(self, block=False, disable_timing=False, interprocess=False):
            self.t = None

        def record(self, stream=None):
            self.t = next(clock) * 0.01

        @property
        def done(self):
            return False

    launches = []

    class RawKernel:
        def __init__(self, source, name, options=()):
            self.name = name

        def __call__(self, grid, block, args, shared_mem=0):
            for a in args:  # CuPy turns a Python int into long long: scalars must be NumPy-typed
                assert isinstance(a, (np.ndarray, np.generic)), (self.name, a)
            launches.append(self.name)

    class Array(np.ndarray):
        @property
        def data(self):
            return types.SimpleNamespace(ptr=self.ctypes.data)

    def wrap(a):
        return np.asarray(a).view(Array)

    props = {"name": b"Fake GPU", "multiProcessorCount": 4, "l2CacheSize": 1 << 20, "major": 9, "minor": 0,
             "totalGlobalMem": 1 << 34}
    runtime = types.SimpleNamespace(
        getDeviceProperties=lambda i: props, getDeviceCount=lambda: 1, getDevice=lambda: 0, memcpyDeviceToDevice=3,
        memcpyAsync=lambda dst, src, n, kind, stream: None, driverGetVersion=lambda: 13000,
        runtimeGetVersion=lambda: 13000, memGetInfo=lambda: (1 << 33, 1 << 34), CUDARuntimeError=RuntimeError)
    cuda = types.SimpleNamespace(
        Stream=Stream, Event=Event, runtime=runtime, get_elapsed_time=lambda s, e: e.t - s.t,
        Device=lambda: types.SimpleNamespace(id=0), memory=types.SimpleNamespace(OutOfMemoryError=MemoryError),
        get_current_stream=lambda: Stream(non_blocking=True))
    cp = types.SimpleNamespace(
        __version__="fake", float32=np.float32, uint8=np.uint8, RawKernel=RawKernel, cuda=cuda,
        empty=lambda shape, dtype=np.float32: wrap(np.empty(shape, dtype)),
        zeros=lambda shape, dtype=np.float32: wrap(np.zeros(shape, dtype)),
        asarray=wrap, get_default_memory_pool=lambda: types.SimpleNamespace(free_all_blocks=lambda: None))
    return cp, launches


def test_orchestration_with_a_fake_cupy(monkeypatch, tmp_path, capsys):
    import pipeline.filters.geometry as geometry
    import pipeline.filters.lut as lut
    import pipeline.gpu.cuda as gpu_cuda

    cp, launches = fake_cupy()
    monkeypatch.setattr(gpu_cuda, "cupy", lambda: cp)
    monkeypatch.setattr(gpu_cuda, "gpu_status", lambda: (True, ""))
    monkeypatch.setattr(gpu_cuda, "_KERNELS", {})  # keep fake kernels out of the real cache
    monkeypatch.setattr(geometry, "cupy", lambda: cp)
    monkeypatch.setattr(lut, "cupy", lambda: cp)
    rc = bf.main(["--sizes", "64x36", "--iters", "40", "--warmup", "1", "--quiet",
                  "--json", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "sub" / "r.md")])
    assert rc == 0, capsys.readouterr().err
    data = read_json(tmp_path / "r.json")
    rows = data["rows"]
    assert {r["label"] for r in rows} == {c.label for c in bf.build_cases(64, 36)}
    assert all(r["error"] is None and r["ms"] > 0 and r["iters"] == 40 and not r["host_bound"] for r in rows)
    assert "bench_filters_spin" in launches and "bench_filters_l2_flush" in launches
    assert "pipeline_tdenoise" in launches and "pipeline_scale_h" in launches
    assert "Fake GPU" in (tmp_path / "sub" / "r.md").read_text()


# --- GPU --------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_quick_run_on_the_gpu(tmp_path):
    out = tmp_path / "filters.json"
    proc = run_python(SCRIPT, "--iters", "3", "--sizes", "320x180", "--copy-mib", "256", "--quiet", "--json", out,
                      "--markdown", tmp_path / "filters.md", timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = read_json(out)
    assert data["copy"]["gbps"] > 0
    rows = data["rows"]
    assert not [r for r in rows if r["error"]]
    per_filter = {c.filters[0].name for c in bf.build_cases(320, 180, extras=False)}
    timed = {r["spec"].split("=")[0] for r in rows if r["ms"] and r["ms"] > 0}
    assert per_filter <= timed
    assert all(r["ms"] > 0 for r in rows)
    assert "| eq |" in (tmp_path / "filters.md").read_text()
