#!/usr/bin/env python3
"""Time every registered filter's CUDA kernel(s) on the GPU, per frame size, against the copy bandwidth.

    python scripts/bench_filters.py                                   # 1080p and 4K, 50 iterations
    python scripts/bench_filters.py --sizes 1080p --iters 100 --filters gblur,eq
    python scripts/bench_filters.py --json out/filters.json --markdown docs/benchmarks.md

Method. One non-blocking stream; every buffer (source, outputs, scratch, state) is allocated once per
row with CuPy before any timing; the source is seeded random floats in [0, 1) (the I420 source, random
bytes). Each row is warmed up (kernels compiled, tables uploaded, temporal filters primed by a first
frame after ``bind_state``), then timed N times with a pair of CUDA events around one frame's work;
the median is reported. Before each timed frame a kernel reads a buffer of several times the L2 size,
outside the events, so every frame starts from a cold (clean) L2 cache (``--warm-l2`` turns that off).
So that the events time the GPU and not Python's launch overhead, each batch of iterations is queued
behind a short spin kernel that holds the stream until the host has issued the whole batch; a row
whose spin ended too early even after retries is flagged ``host-bound``.

Bandwidth. "min" counts the bytes a row must move at the least: read its input once, write its output
once (real in/out sizes for size-changing filters; a crop reads only the rectangle it keeps), plus
reading and writing the state of temporal filters. "impl" counts what the kernels move, assuming every
neighbourhood re-read hits the cache: two-pass filters write and read their scratch frame, unsharp's
mixing pass reads the source and the blurred frame and writes the output again, chains pay each
filter's own traffic. Small lookup tables (LUT, scale taps) are not counted. Both are divided by the
median time (GB/s, 1 GB = 1e9 bytes) and given as a percentage of a device-to-device copy of a large
buffer (``--copy-mib``, read + write counted), timed the same way.

Exit status: 0, 1 if a row failed (the others are still reported), 2 for a usage error, 5 without a
usable CUDA GPU / CuPy (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing

import numpy as np  # noqa: E402

from pipeline.errors import ConfigError  # noqa: E402
from pipeline.filters import FILTERS, parse_chain  # noqa: E402
from pipeline.filters.blur import SeparableFilter  # noqa: E402
from pipeline.filters.fuse import FusedPointwise, fuse_pointwise  # noqa: E402
from pipeline.filters.geometry import even_round  # noqa: E402
from pipeline.filters.registry import Filter  # noqa: E402
from pipeline.gpu.probe import device_info  # noqa: E402
from pipeline.video import Colour, VideoFormat  # noqa: E402

EXIT_FAILED_ROWS = 1
EXIT_USAGE = 2
EXIT_GPU = 5

DEFAULT_SIZES = "1920x1080,3840x2160"
SIZE_ALIASES = {"720p": (1280, 720), "1080p": (1920, 1080), "1440p": (2560, 1440), "2160p": (3840, 2160),
                "4k": (3840, 2160)}
LUT_FILE = ROOT / "pipeline" / "presets" / "luts" / "warm.cube"
DEFAULT_CHAIN = "gblur=sigma=1.5,eq=contrast=1.1:saturation=1.1"
FUSION_CHAIN = "eq=contrast=1.2,hue=degrees=20,vignette"
COLOUR = Colour(matrix="bt709")  # HD; the kernels' cost does not depend on the matrix

CATEGORIES = ("pointwise", "separable", "neighbourhood", "geometry", "temporal")
# Where the class alone says too little: lut3d is per pixel without a fusable expression, the geometry
# filters that keep the size (flips) or use scratch (scale) would otherwise read as something else.
EXPLICIT_CATEGORY = {
    "lut3d": "pointwise",
    "scale": "geometry",
    "crop": "geometry",
    "hflip": "geometry",
    "vflip": "geometry",
    "transpose": "geometry",
    "sobel": "neighbourhood",
    "bilateral": "neighbourhood",
}

F32 = 4


# ---------------------------------------------------------------------------------------------------
# Parameters: the defaults, and explicit settings where the defaults cannot run or say little


def _half(w: int, h: int) -> dict[str, Any]:
    return {"w": even_round(w / 2), "h": even_round(h / 2)}


# name -> f(width, height) -> [(row label, parameters)]; every other filter runs once with its defaults.
EXPLICIT_PARAMS: dict[str, Callable[[int, int], list[tuple[str, dict[str, Any]]]]] = {
    "lut3d": lambda w, h: [("lut3d", {"file": str(LUT_FILE)})],
    "scale": lambda w, h: [
        ("scale 1/2 (area)", _half(w, h)),
        ("scale 1.5x (bilinear)", {"w": even_round(1.5 * w), "h": even_round(1.5 * h)}),
    ],
    "crop": lambda w, h: [("crop 1/2", _half(w, h))],
}


def filter_settings(name: str, width: int, height: int) -> list[tuple[str, dict[str, Any]]]:
    """(label, parameters) of the rows for one registered filter at this input size."""
    explicit = EXPLICIT_PARAMS.get(name)
    return explicit(width, height) if explicit else [(name, {})]


def spec_text(name: str, params: dict[str, Any]) -> str:
    """The chain syntax of one filter, with paths shown relative to the repository."""

    def show(v: Any) -> str:
        if isinstance(v, str) and v.startswith(str(ROOT) + "/"):
            return v[len(str(ROOT)) + 1 :]
        return str(v)

    args = ":".join(f"{k}={show(v)}" for k, v in params.items())
    return f"{name}={args}" if args else name


def make_filter(name: str, params: dict[str, Any], width: int, height: int) -> Filter:
    """An instance of a registered filter, checked against the input size (as the frame plan would)."""
    try:
        f = FILTERS[name](**params)
        f.output_size(width, height)
    except ConfigError as e:
        raise ConfigError(f"bench_filters: cannot run {name!r} at {width}x{height} with {params or 'its defaults'}: "
                          f"{e} (give it settings in EXPLICIT_PARAMS in scripts/bench_filters.py)") from None
    return f


def classify(f: Filter, width: int = 64, height: int = 48) -> str:
    """pointwise / separable / neighbourhood / geometry / temporal, from the class (or the explicit table)."""
    if isinstance(f, FusedPointwise):
        return "pointwise"
    if f.name in EXPLICIT_CATEGORY:
        return EXPLICIT_CATEGORY[f.name]
    if f.state_shapes(width, height):
        return "temporal"
    if f.output_size(width, height) != (width, height):
        return "geometry"
    if hasattr(f, "pointwise_expr"):
        return "pointwise"
    if isinstance(f, SeparableFilter):
        return "separable"
    return "neighbourhood"


# ---------------------------------------------------------------------------------------------------
# Rows and their byte counts


@dataclass
class Case:
    """One row: a chain of filters run on an RGB frame, or a colour conversion."""

    label: str
    category: str
    spec: str
    filters: list[Filter] = field(default_factory=list)
    conversion: str | None = None  # "yuv_to_rgb" | "rgb_to_yuv"
    group: str = ""  # rows compared with each other ("fusion")


def rgb_bytes(width: int, height: int) -> int:
    return 3 * width * height * F32


def i420_bytes(width: int, height: int) -> int:
    return width * height * 3 // 2


def _nbytes(shapes) -> int:
    return sum(math.prod(s) * F32 for s in shapes)


def _read_bytes(f: Filter, width: int, height: int) -> int:
    """The input bytes a filter must read: the whole frame, except a crop, which reads only what it keeps."""
    if f.name == "crop":
        return rgb_bytes(*f.output_size(width, height))
    return rgb_bytes(width, height)


# Kernel passes beyond "read src, through scratch, write dst": name -> f(src bytes, dst bytes) -> bytes.
IMPL_EXTRA: dict[str, Callable[[int, int], int]] = {
    # above MAX_FUSED_RADIUS only: pipeline_unsharp_mix reads src and the blur in dst, writes dst
    "unsharp": lambda src, dst: src + 2 * dst,
}


def filter_bytes(f: Filter, width: int, height: int) -> tuple[int, int, tuple[int, int]]:
    """(minimum bytes, bytes the implementation moves, output size) of one filter on a width x height frame."""
    out = f.output_size(width, height)
    read, write = _read_bytes(f, width, height), rgb_bytes(*out)
    state = 2 * _nbytes(f.state_shapes(width, height))  # read the previous frame's, write this one's
    minimum = read + write + state
    if _fused_separable(f):
        return minimum, minimum, out  # one kernel: the halo and unsharp's second read of src hit the caches
    impl = minimum + 2 * _nbytes(f.scratch_shapes(width, height))  # each scratch frame: written, then read
    extra = IMPL_EXTRA.get(f.name)
    if extra is not None:
        impl += extra(rgb_bytes(width, height), write)
    return minimum, impl, out


def _fused_separable(f: Filter) -> bool:
    """Separable filters up to MAX_FUSED_RADIUS run as one tiled kernel that never touches scratch."""
    from pipeline.filters.blur import MAX_FUSED_RADIUS

    taps = getattr(f, "taps", None)
    return taps is not None and len(taps) // 2 <= MAX_FUSED_RADIUS


def case_bytes(case: Case, width: int, height: int) -> tuple[int, int, tuple[int, int]]:
    """(minimum bytes, implementation bytes, output size) of a row at this input size.

    A chain must at least read its input once and write its output once (plus any state); the
    implementation pays each filter's own traffic, intermediate frames included.
    """
    if case.conversion == "yuv_to_rgb":
        b = i420_bytes(width, height) + rgb_bytes(width, height)
        return b, b, (width, height)
    if case.conversion == "rgb_to_yuv":
        b = rgb_bytes(width, height) + i420_bytes(width, height)
        return b, b, (width, height)
    if not case.filters:
        raise ValueError(f"row {case.label!r} has neither filters nor a conversion")
    w, h = width, height
    minimum = _read_bytes(case.filters[0], width, height)
    impl = 0
    for f in case.filters:
        minimum += 2 * _nbytes(f.state_shapes(w, h))
        _, f_impl, (w, h) = filter_bytes(f, w, h)
        impl += f_impl
    minimum += rgb_bytes(w, h)
    return minimum, impl, (w, h)


def build_cases(width: int, height: int, names: list[str] | None = None, extras: bool = True) -> list[Case]:
    """Every row for one input size: each registered filter (``names`` to pick), then conversions and chains."""
    parse_chain("")  # registers the built-in filters
    rows = []
    for name in sorted(FILTERS) if names is None else names:
        for label, params in filter_settings(name, width, height):
            f = make_filter(name, params, width, height)
            rows.append(Case(label, classify(f), spec_text(name, params), [f]))
    if not extras:
        return rows
    rows.append(Case("yuv_to_rgb (I420 -> RGB)", "conversion", "yuv_to_rgb_cuda", conversion="yuv_to_rgb"))
    rows.append(Case("rgb_to_yuv (RGB -> I420)", "conversion", "rgb_to_yuv_cuda", conversion="rgb_to_yuv"))
    rows.append(Case(f"default chain {DEFAULT_CHAIN}", "chain", DEFAULT_CHAIN, parse_chain(DEFAULT_CHAIN)))
    fused = fuse_pointwise(parse_chain(FUSION_CHAIN))
    rows.append(Case("fused " + "+".join(f.name for f in fused[0].members), "pointwise", FUSION_CHAIN + " (fused)",
                     fused, group="fusion"))
    unfused = parse_chain(FUSION_CHAIN)
    rows.append(Case("unfused " + ",".join(f.name for f in unfused), "chain", FUSION_CHAIN, unfused, group="fusion"))
    return rows


def parse_sizes(text: str) -> list[tuple[int, int]]:
    """``1920x1080,3840x2160`` (or 720p/1080p/1440p/2160p/4k) -> [(w, h), ...]; even sizes only (4:2:0)."""
    sizes = []
    for token in (t.strip().lower() for t in text.split(",")):
        if not token:
            continue
        if token in SIZE_ALIASES:
            sizes.append(SIZE_ALIASES[token])
            continue
        w, sep, h = token.partition("x")
        if not sep or not w.isdigit() or not h.isdigit():
            raise ValueError(f"bad size {token!r}: expected WIDTHxHEIGHT, e.g. 1920x1080")
        w, h = int(w), int(h)
        if w < 4 or h < 4 or w % 2 or h % 2:
            raise ValueError(f"bad size {token!r}: width and height must be even and >= 4 (4:2:0)")
        sizes.append((w, h))
    if not sizes:
        raise ValueError("no sizes given")
    return sizes


def finish_row(case: Case, width: int, height: int, ms: list[float], copy_gbps: float) -> dict[str, Any]:
    """The reported row: median time and both bandwidths (GB/s and % of the copy bandwidth)."""
    minimum, impl, (ow, oh) = case_bytes(case, width, height)
    row = base_row(case, width, height)
    med = statistics.median(ms)
    row.update(
        ms=med, ms_min=min(ms), ms_max=max(ms), iters=len(ms), min_bytes=minimum, impl_bytes=impl,
        out=f"{ow}x{oh}",
        gbps_min=minimum / (med * 1e-3) / 1e9 if med > 0 else None,
        gbps_impl=impl / (med * 1e-3) / 1e9 if med > 0 else None,
    )
    for key in ("min", "impl"):
        gbps = row[f"gbps_{key}"]
        row[f"pct_copy_{key}"] = 100.0 * gbps / copy_gbps if gbps is not None and copy_gbps else None
    return row


def base_row(case: Case, width: int, height: int) -> dict[str, Any]:
    return {"size": f"{width}x{height}", "width": width, "height": height, "label": case.label,
            "category": case.category, "spec": case.spec, "group": case.group, "note": "", "host_bound": False,
            "error": None}


def annotate_fusion(rows: list[dict[str, Any]]) -> None:
    """Note on each fused row how much faster it ran than the unfused chain of the same size."""
    for size in {r["size"] for r in rows}:
        pair = [r for r in rows if r["size"] == size and r.get("group") == "fusion" and r.get("ms")]
        fused = [r for r in pair if r["label"].startswith("fused")]
        unfused = [r for r in pair if r["label"].startswith("unfused")]
        if fused and unfused:
            fused[0]["speedup_vs_unfused"] = unfused[0]["ms"] / fused[0]["ms"]
            fused[0]["note"] = _join(fused[0]["note"], f"{fused[0]['speedup_vs_unfused']:.2f}x vs unfused")


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


# ---------------------------------------------------------------------------------------------------
# Rendering

COLUMNS = ("filter", "class", "out", "ms/frame", "MB min", "MB impl", "GB/s min", "% copy", "GB/s impl",
           "% copy impl", "note")


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if v >= 0.1 else f"{v:.4f}"


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def row_cells(row: dict[str, Any]) -> list[str]:
    if row.get("error"):
        return [row["label"], row["category"], "-", "-", "-", "-", "-", "-", "-", "-", "error: " + row["error"]]
    note = row.get("note", "")
    if row.get("host_bound"):
        note = _join(note, "host-bound: times may include launch gaps")
    return [
        row["label"], row["category"], row["out"], _ms(row["ms"]),
        _num(row["min_bytes"] / 1e6, ".1f"), _num(row["impl_bytes"] / 1e6, ".1f"),
        _num(row["gbps_min"], ".0f"), _num(row["pct_copy_min"], ".0f"),
        _num(row["gbps_impl"], ".0f"), _num(row["pct_copy_impl"], ".0f"), note,
    ]


def header_lines(meta: dict[str, Any]) -> list[str]:
    dev = meta.get("device", {})
    copy = meta.get("copy", {})
    s = meta.get("settings", {})
    l2 = "L2 flushed before each frame" if s.get("flush_l2", True) else "L2 left warm"
    return [
        f"Filter kernels on {dev.get('name', 'unknown GPU')}, {meta.get('date', '')}",
        f"Command: `{meta.get('command', '')}`",
        f"Copy bandwidth: {copy.get('gbps', 0):.0f} GB/s (device-to-device memcpy of {copy.get('mib', 0)} MiB, "
        f"read + write counted). Median of {s.get('iters', '?')} frames after {s.get('warmup', '?')} warm-up, "
        f"CUDA events on one non-blocking stream, {l2}; CuPy {dev.get('cupy', '?')}.",
        "min: the bytes a row must move (read input once, write output once, temporal state read and written); "
        "impl: the bytes its kernels move (scratch passes, intermediate frames). 1 MB = 1e6 bytes, 1 GB/s = 1e9 B/s.",
    ]


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = header_lines(meta)
    out = [f"### {lines[0]}", "", *(f"{line}  " for line in lines[1:-1]), lines[-1], ""]
    cols = ("size", *COLUMNS)
    out.append("| " + " | ".join(cols) + " |")
    out.append("|" + "|".join("---" if c in ("size", "filter", "class", "out", "note") else "---:" for c in cols) + "|")
    for row in rows:
        out.append("| " + " | ".join(_md_cell(c) for c in [row["size"], *row_cells(row)]) + " |")
    return "\n".join(out) + "\n"


def render_rich(meta: dict[str, Any], rows: list[dict[str, Any]], console) -> None:
    from rich.table import Table

    for line in header_lines(meta):
        console.print(line, markup=False, highlight=False)
    for size in dict.fromkeys(r["size"] for r in rows):
        t = Table(title=f"{size}", title_justify="left")
        for c in COLUMNS:
            t.add_column(c, justify="left" if c in ("filter", "class", "out", "note") else "right",
                         overflow="fold")
        for row in rows:
            if row["size"] == size:
                t.add_row(*row_cells(row), style="red" if row.get("error") else None)
        console.print(t)


def write_json(meta: dict[str, Any], rows: list[dict[str, Any]], path: Path) -> None:
    path.write_text(json.dumps({**meta, "rows": rows}, indent=2) + "\n")


# ---------------------------------------------------------------------------------------------------
# GPU side (CuPy is imported only after gpu_status() said yes)

_SPIN_SRC = r"""
// Holds the stream for ns nanoseconds (global timer) so the host can queue the timed work behind it;
// max_cycles bounds it should the global timer not advance.
extern "C" __global__ void bench_filters_spin(unsigned long long ns, long long max_cycles)
{
    unsigned long long t0, t;
    long long c0 = clock64();
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns && clock64() - c0 < max_cycles);
}
"""

_FLUSH_SRC = r"""
// Reads a buffer several times the L2 size: evicts (and writes back) the previous frame's lines.
extern "C" __global__ void bench_filters_l2_flush(const float4* __restrict__ buf, unsigned long long n,
                                                  float* __restrict__ sink)
{
    float acc = 0.f;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        float4 v = buf[i];
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == -1.f) sink[0] = acc;  // never true (the buffer is zeros); keeps the loads
}
"""

CHUNK = 32  # iterations queued behind one spin (well below the launch queue's depth)
MAX_SPIN_S = 2.0


class Timer:
    """CUDA-event timing of one frame's work on one non-blocking stream, cold L2 and no launch gaps."""

    def __init__(self, cp, stream, flush_l2: bool):
        from pipeline.gpu.cuda import raw_kernel

        self.cp, self.stream = cp, stream
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        self.sm_count = int(props.get("multiProcessorCount", 0)) or 132
        l2 = int(props.get("l2CacheSize", 0)) or 64 << 20
        self.spin_kernel = raw_kernel(_SPIN_SRC, "bench_filters_spin")
        self.flush_kernel = raw_kernel(_FLUSH_SRC, "bench_filters_l2_flush")
        self.flush_buf = self.sink = None
        if flush_l2:
            with stream:
                self.flush_buf = cp.zeros(max(4 * l2, 64 << 20) // 4, dtype=cp.float32)
                self.sink = cp.zeros(1, dtype=cp.float32)
            stream.synchronize()

    def flush(self) -> None:
        if self.flush_buf is not None:
            n = self.flush_buf.size // 4
            self.flush_kernel((self.sm_count * 4,), (256,), (self.flush_buf, np.uint64(n), self.sink))

    def spin(self, seconds: float) -> None:
        # max_cycles: seconds at 4 GHz, more than any GPU clock, so only a frozen timer hits it.
        self.spin_kernel((1,), (1,), (np.uint64(int(seconds * 1e9)), np.int64(int(seconds * 4e9))))

    def _issue(self, fn, start, end) -> None:
        self.flush()
        start.record(self.stream)
        fn()
        end.record(self.stream)

    def measure(self, fn: Callable[[], None], iters: int, warmup: int) -> tuple[list[float], bool]:
        """(per-frame ms, host-bound flag) for ``fn``, which issues one frame's work on the current stream."""
        cp, stream = self.cp, self.stream
        events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(iters)]
        host_bound = False
        times: list[float] = []
        with stream:
            for _ in range(max(1, warmup)):
                self.flush()
                fn()
            stream.synchronize()
            probe = min(3, iters)  # the host's time to issue one iteration, to size the spin
            t0 = time.perf_counter()
            for start, end in events[:probe]:
                self._issue(fn, start, end)
            host_s = (time.perf_counter() - t0) / probe
            stream.synchronize()
            for first in range(0, iters, CHUNK):
                chunk = events[first : first + CHUNK]
                for attempt in range(3):
                    self.spin(min(MAX_SPIN_S, (2 * host_s * len(chunk) + 2e-4) * 4**attempt))
                    spun = cp.cuda.Event(disable_timing=True)
                    spun.record(stream)
                    t0 = time.perf_counter()
                    for start, end in chunk:
                        self._issue(fn, start, end)
                    caught_up = spun.done  # the spin ended before the last frame was queued
                    host_s = max(host_s, (time.perf_counter() - t0) / len(chunk))
                    stream.synchronize()
                    if not caught_up:
                        break
                else:
                    host_bound = True
                times += [cp.cuda.get_elapsed_time(start, end) for start, end in chunk]
        return times, host_bound


def measure_copy_bandwidth(cp, stream, mib: int, iters: int = 20) -> dict[str, Any]:
    """Device-to-device memcpy of a large buffer; GB/s counting the read and the write."""
    rt = cp.cuda.runtime
    while True:
        nbytes = mib << 20
        try:
            with stream:
                a = cp.empty(nbytes, dtype=cp.uint8)
                b = cp.empty(nbytes, dtype=cp.uint8)
            break
        except cp.cuda.memory.OutOfMemoryError:
            if mib <= 64:
                raise
            mib //= 2
    events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(iters)]
    with stream:
        a.fill(1)
        for _ in range(3):
            rt.memcpyAsync(b.data.ptr, a.data.ptr, nbytes, rt.memcpyDeviceToDevice, stream.ptr)
        for start, end in events:
            start.record(stream)
            rt.memcpyAsync(b.data.ptr, a.data.ptr, nbytes, rt.memcpyDeviceToDevice, stream.ptr)
            end.record(stream)
        stream.synchronize()
    ms = statistics.median(cp.cuda.get_elapsed_time(s, e) for s, e in events)
    del a, b
    return {"mib": mib, "ms": ms, "gbps": 2 * nbytes / (ms * 1e-3) / 1e9}


def prepare(cp, case: Case, width: int, height: int, src_rgb, src_yuv) -> Callable[[], None]:
    """Allocate the row's buffers (under the current stream) and return the function issuing one frame."""
    from pipeline.convert import converter

    if case.conversion == "yuv_to_rgb":
        fmt = VideoFormat(width, height, COLOUR)
        rgb = cp.empty((3, height, width), dtype=cp.float32)
        to_rgb = converter("to_rgb", "i420", fmt, "cuda")
        return lambda: to_rgb(src_yuv, rgb)
    if case.conversion == "rgb_to_yuv":
        fmt = VideoFormat(width, height, COLOUR)
        yuv = cp.empty(fmt.nbytes, dtype=cp.uint8)
        from_rgb = converter("from_rgb", "i420", fmt, "cuda")
        return lambda: from_rgb(src_rgb, yuv)
    steps = []
    cur, w, h = src_rgb, width, height
    stateful = False
    for f in case.filters:
        scratch = [cp.empty(tuple(s), dtype=cp.float32) for s in f.scratch_shapes(w, h)]
        state = [cp.empty(tuple(s), dtype=cp.float32) for s in f.state_shapes(w, h)]
        if state:
            f.bind_state(state)
            stateful = True
        w, h = f.output_size(w, h)
        out = cp.empty((3, h, w), dtype=cp.float32)
        steps.append((f, cur, out, scratch))
        cur = out

    def run() -> None:
        for f, src, dst, scratch in steps:
            f.cuda(src, dst, scratch)

    if stateful:
        run()  # the priming frame: fills the state; the timed frames blend with it
    return run


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def run_benchmarks(args, cp, say) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    stream = cp.cuda.Stream(non_blocking=True)
    say(f"copy bandwidth: {args.copy_mib} MiB device-to-device")
    copy = measure_copy_bandwidth(cp, stream, args.copy_mib)
    timer = Timer(cp, stream, flush_l2=not args.warm_l2)
    rows: list[dict[str, Any]] = []
    for width, height in args.sizes:
        host = np.random.default_rng(args.seed)
        with stream:
            src_rgb = cp.asarray(host.random((3, height, width), dtype=np.float32))
            src_yuv = cp.asarray(host.integers(0, 256, i420_bytes(width, height), dtype=np.uint8))
        stream.synchronize()
        for case in build_cases(width, height, args.filters, extras=not args.no_extras):
            say(f"{width}x{height}: {case.label}")
            try:
                with stream:
                    fn = prepare(cp, case, width, height, src_rgb, src_yuv)
                stream.synchronize()
                ms, host_bound = timer.measure(fn, args.iters, args.warmup)
                row = finish_row(case, width, height, ms, copy["gbps"])
                row["host_bound"] = host_bound
                row["ms_samples"] = [round(v, 5) for v in ms]
            except Exception as e:  # one broken filter must not hide the others' numbers
                row = base_row(case, width, height)
                row["error"] = _first_line(e)
                try:
                    stream.synchronize()
                except Exception:
                    pass
            rows.append(row)
            fn = None
        del src_rgb, src_yuv
        cp.get_default_memory_pool().free_all_blocks()
    annotate_fusion(rows)
    meta = {"device": device_info(cp), "copy": copy}
    return meta, rows


# ---------------------------------------------------------------------------------------------------
# CLI


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bench_filters.py",
        description="Time every registered filter's CUDA kernels (median per frame, GB/s, % of copy bandwidth).",
    )
    p.add_argument("--sizes", default=DEFAULT_SIZES, help=f"WxH list, or 720p/1080p/1440p/4k (default {DEFAULT_SIZES})")
    p.add_argument("--iters", type=int, default=50, help="timed frames per row; the median is reported (default 50)")
    p.add_argument("--warmup", type=int, default=5, help="untimed frames first, at least 1 (default 5)")
    p.add_argument("--filters", default=None, help="comma list of registered filters (default: all)")
    p.add_argument("--no-extras", action="store_true", help="skip the conversions, the default chain and fusion rows")
    p.add_argument("--seed", type=int, default=0, help="seed of the random source frame")
    p.add_argument("--copy-mib", type=int, default=1024, help="buffer of the copy-bandwidth reference (default 1024)")
    p.add_argument("--warm-l2", action="store_true", help="do not flush L2 before each timed frame")
    p.add_argument("--json", type=Path, help="write meta and rows as JSON here")
    p.add_argument("--markdown", type=Path, help="write a Markdown table (for docs/benchmarks.md) here")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    try:
        args.sizes = parse_sizes(args.sizes)
    except ValueError as e:
        p.error(f"--sizes: {e}")
    if args.iters < 1 or args.warmup < 0 or args.copy_mib < 1:
        p.error("--iters and --copy-mib must be >= 1, --warmup >= 0")
    if args.filters is not None:
        parse_chain("")
        args.filters = [n.strip() for n in args.filters.split(",") if n.strip()]
        unknown = [n for n in args.filters if n not in FILTERS]
        if unknown or not args.filters:
            p.error(f"--filters: unknown {', '.join(unknown) or '(empty)'}; known: {', '.join(sorted(FILTERS))}")
    return args


def command_line(argv: list[str]) -> str:
    return shlex.join(["python", "scripts/bench_filters.py", *argv])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)

    from pipeline.gpu.cuda import gpu_status

    with warnings.catch_warnings():  # CuPy without a driver may warn on import: keep stderr to one line
        warnings.simplefilter("ignore")
        usable, reason = gpu_status()
    if not usable:
        print(f"bench_filters: needs a CUDA GPU and CuPy: {reason}", file=sys.stderr)
        return EXIT_GPU

    for path in (args.json, args.markdown):  # fail now, not after the whole run
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                print(f"bench_filters: cannot create {path.parent}: {e}", file=sys.stderr)
                return EXIT_USAGE

    from rich.console import Console

    from pipeline.gpu.cuda import cupy

    cp = cupy()
    err = Console(stderr=True)
    say = (lambda msg: None) if args.quiet else (lambda msg: err.print(msg, style="dim", markup=False, highlight=False))
    try:
        meta, rows = run_benchmarks(args, cp, say)
    except (MemoryError, cp.cuda.runtime.CUDARuntimeError) as e:
        print(f"bench_filters: GPU error: {_first_line(e)}", file=sys.stderr)
        return EXIT_GPU
    meta = {
        **meta,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command_line(argv),
        "settings": {"sizes": [f"{w}x{h}" for w, h in args.sizes], "iters": args.iters, "warmup": args.warmup,
                     "seed": args.seed, "flush_l2": not args.warm_l2, "chunk": CHUNK},
    }
    console = Console()
    if not console.is_terminal:  # piped: do not fold the table to 80 columns
        console = Console(width=200)
    render_rich(meta, rows, console)
    if args.json:
        write_json(meta, rows, args.json)
    if args.markdown:
        args.markdown.write_text(render_markdown(meta, rows))
    failed = [r for r in rows if r.get("error")]
    if failed:
        print(f"bench_filters: {len(failed)} row(s) failed: " + "; ".join(f"{r['size']} {r['label']}" for r in failed),
              file=sys.stderr)
        return EXIT_FAILED_ROWS
    return 0


if __name__ == "__main__":
    sys.exit(main())
