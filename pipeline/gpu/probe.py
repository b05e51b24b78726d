"""The measurements behind `pipeline probe`: allocation costs, cudaFree's implicit synchronisation, and
host<->device bandwidth, each on the current CUDA device (see :mod:`pipeline.bench.probe` for what they show).

CuPy is passed in (or imported inside the functions), so this module imports without it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError, GPUError
from .memory import WRITE_COMBINED

MIB = 1 << 20
FRAME_1080P = 1920 * 1080 * 3 // 2  # one yuv420p frame
FRAME_4K = 3840 * 2160 * 3 // 2

DEVICE_SIZES = {
    "1 MiB": MIB,
    "1080p frame": FRAME_1080P,
    "4K frame": FRAME_4K,
    "256 MiB": 256 * MIB,
    "1 GiB": 1024 * MIB,
}
HOST_SIZES = {"1080p frame": FRAME_1080P, "4K frame": FRAME_4K}
POOL_SIZES = {"1080p frame": FRAME_1080P, "4K frame": FRAME_4K}
BANDWIDTH_SIZES = {"4K frame": FRAME_4K, "256 MiB": 256 * MIB}

# Each busy-kernel trial costs about spin_ms of wall time, so they are capped independently of --repeats.
MAX_SPIN_TRIALS = 5
# Headroom left on the device when deciding whether the largest sizes can be allocated at all.
FREE_MEMORY_MARGIN = 0.9

PoolAlloc = Callable[[int], Callable[[], None]]
"""Allocates n bytes from a pool and returns the function that gives them back."""

SPIN_KERNEL = r"""
extern "C" __global__ void pipeline_probe_spin(long long cycles)
{
    // clock64() is the SM's cycle counter: spinning on it keeps the device busy for a set time
    // without touching memory, so nothing but the kernel's duration can delay a concurrent call.
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}
"""


@dataclass(frozen=True)
class _Plan:
    """Which sizes each measurement uses."""

    device: dict[str, int]
    host: dict[str, int]
    pool: dict[str, int]
    bandwidth: dict[str, int]
    spin_bytes: int

    @classmethod
    def from_sizes(cls, sizes: dict[str, int] | None) -> _Plan:
        if sizes is None:
            return cls(DEVICE_SIZES, HOST_SIZES, POOL_SIZES, BANDWIDTH_SIZES, FRAME_4K)
        if not sizes:
            raise ConfigError("probe sizes must not be empty")
        for label, nbytes in sizes.items():
            if not isinstance(nbytes, int) or nbytes <= 0:
                raise ConfigError(f"probe size {label!r} must be a positive number of bytes, not {nbytes!r}")
        sizes = dict(sizes)
        return cls(sizes, sizes, sizes, sizes, min(sizes.values()))


# ---------------------------------------------------------------------------------------------
# GPU access


def _require_gpu():
    """Return the cupy module once a CUDA device is known to be usable."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a CUDA library that fails to load
        raise GPUError(f"pipeline probe needs a CUDA GPU: CuPy is not importable ({exc})") from exc
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver, driver too old, CUDA_VISIBLE_DEVICES empty ...
        raise GPUError(f"pipeline probe needs a CUDA GPU: {exc}") from exc
    if count < 1:
        raise GPUError("pipeline probe needs a CUDA GPU: no CUDA device found")
    return cupy


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def device_info(cupy) -> dict[str, Any]:
    """The current CUDA device, as every benchmark records it beside its figures."""
    rt = cupy.cuda.runtime
    index = cupy.cuda.Device().id
    props = rt.getDeviceProperties(index)
    name = props["name"]
    free, total = rt.memGetInfo()
    return {
        "index": int(index),
        "name": name.decode() if isinstance(name, bytes) else str(name),
        "compute_capability": f"{props['major']}.{props['minor']}",
        "total_memory_bytes": int(total),
        "free_memory_bytes": int(free),
        "l2_mib": round(int(props.get("l2CacheSize", 0)) / 2**20, 1),
        "driver_version": _cuda_version(rt.driverGetVersion()),
        "runtime_version": _cuda_version(rt.runtimeGetVersion()),
        "cupy_version": cupy.__version__,
        "cpu_cores": os.cpu_count(),
    }


@contextmanager
def _device_buffer(rt, nbytes: int) -> Iterator[int]:
    """A raw cudaMalloc buffer, outside CuPy's pool, freed on exit."""
    ptr = rt.malloc(nbytes)
    try:
        yield ptr
    finally:
        rt.deviceSynchronize()
        rt.free(ptr)


HOST_MEMORIES = ("pageable", "pinned", "write-combined")


def _host_buffer(cupy, nbytes: int, memory: str) -> np.ndarray:
    """A host buffer of exactly nbytes; a pinned one stays allocated while the array lives.

    "write-combined" is pinned memory the CPU writes past its caches (cudaHostAllocWriteCombined): the GPU
    reads it without snooping the CPU's caches, and the CPU reads it very slowly."""
    if memory == "pageable":
        array = np.empty(nbytes, dtype=np.uint8)
    else:
        # PinnedMemory is a plain cudaHostAlloc of the exact size; cupyx.empty_pinned would round it up to
        # a power of two through the pinned pool. The pointer object is what exports the buffer protocol.
        flags = WRITE_COMBINED if memory == "write-combined" else 0
        mem = cupy.cuda.PinnedMemoryPointer(cupy.cuda.PinnedMemory(nbytes, flags), 0)
        array = np.frombuffer(mem, dtype=np.uint8, count=nbytes)
    array.fill(1)  # touch every page now so that first-touch faults stay out of the timings
    return array


# ---------------------------------------------------------------------------------------------
# Statistics


def _summary_us(samples_ns: list[int]) -> dict[str, float]:
    us = np.asarray(samples_ns, dtype=np.float64) / 1e3
    return {
        "median_us": float(np.median(us)),
        "p90_us": float(np.percentile(us, 90)),
        "min_us": float(us.min()),
    }


def _gbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9 if ms > 0 else 0.0


# ---------------------------------------------------------------------------------------------
# Allocation costs


def _time_alloc_release(alloc, release, nbytes: int, repeats: int, sync) -> tuple[list[int], list[int]]:
    """Time `alloc(nbytes)` and `release(handle)` separately, each with the device idle beforehand."""
    # One untimed round first: it pays for lazy context set-up, and makes a pool's next request a hit.
    release(alloc(nbytes))
    alloc_ns, release_ns = [], []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter_ns()
        handle = alloc(nbytes)
        t1 = time.perf_counter_ns()
        sync()
        t2 = time.perf_counter_ns()
        release(handle)
        t3 = time.perf_counter_ns()
        alloc_ns.append(t1 - t0)
        release_ns.append(t3 - t2)
    return alloc_ns, release_ns


def _alloc_rows(names: tuple[str, str], alloc, release, sizes: dict[str, int], repeats: int, sync) -> list[dict]:
    rows: list[dict] = []
    for label, nbytes in sizes.items():
        alloc_ns, release_ns = _time_alloc_release(alloc, release, nbytes, repeats, sync)
        for what, samples in zip(names, (alloc_ns, release_ns), strict=True):
            row = {"what": what, "size_label": label, "bytes": nbytes, "repeats": repeats}
            rows.append({**row, **_summary_us(samples)})
    return rows


def _cupy_pool_alloc(cupy):
    """CuPy's own MemoryPool as a PoolAlloc, and the pool (to empty it afterwards)."""
    pool = cupy.cuda.MemoryPool()

    def alloc(nbytes: int) -> Callable[[], None]:
        held = [pool.malloc(nbytes)]
        return held.clear  # dropping the last MemoryPointer returns the block to the pool

    return alloc, pool


def _fits(nbytes: int, free_bytes: int) -> bool:
    return nbytes <= free_bytes * FREE_MEMORY_MARGIN


def _measure_allocs(cupy, plan: _Plan, repeats: int, pool_alloc: PoolAlloc | None, skipped: list[str]) -> list[dict]:
    rt = cupy.cuda.runtime
    sync = rt.deviceSynchronize
    free_bytes = rt.memGetInfo()[0]
    device_sizes = {}
    for label, nbytes in plan.device.items():
        if _fits(nbytes, free_bytes):
            device_sizes[label] = nbytes
        else:
            skipped.append(f"cudaMalloc {label}: {nbytes} bytes do not fit in {free_bytes} free")

    rows = _alloc_rows(("cudaMalloc", "cudaFree"), rt.malloc, rt.free, device_sizes, repeats, sync)
    rows += _alloc_rows(
        ("cudaHostAlloc", "cudaFreeHost"), lambda n: rt.hostAlloc(n, 0), rt.freeHost, plan.host, repeats, sync
    )

    cupy_pool = None
    if pool_alloc is None:
        pool_alloc, cupy_pool = _cupy_pool_alloc(cupy)
    pool_sizes = {label: n for label, n in plan.pool.items() if _fits(n, free_bytes)}
    try:
        rows += _alloc_rows(("pool alloc (hit)", "pool release"), pool_alloc, _call, pool_sizes, repeats, sync)
    finally:
        if cupy_pool is not None:
            cupy_pool.free_all_blocks()
    return rows


def _call(release: Callable[[], None]) -> None:
    release()


# ---------------------------------------------------------------------------------------------
# cudaFree's implicit synchronisation


class _Spinner:
    """Launches the clock64 busy-loop on one non-blocking stream and times it with events."""

    def __init__(self, cupy):
        self.cupy = cupy
        self.kernel = cupy.RawKernel(SPIN_KERNEL, "pipeline_probe_spin")
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.start = cupy.cuda.Event()
        self.end = cupy.cuda.Event()
        self.cycles_per_ms = self._calibrate()

    def launch(self, cycles: int) -> None:
        self.start.record(self.stream)
        with self.stream:  # RawKernel launches on the current stream
            self.kernel((1,), (1,), (np.int64(cycles),))
        self.end.record(self.stream)

    def wait_ms(self) -> float:
        """Wait for the last launch; its duration on the device."""
        self.end.synchronize()
        return float(self.cupy.cuda.get_elapsed_time(self.start, self.end))

    def _calibrate(self) -> float:
        # SM clocks vary with boost and power state, so the cycle count for a wanted duration is measured
        # rather than derived from the nominal clock rate. The first launch also compiles and loads the kernel.
        self.launch(100_000)
        self.wait_ms()
        cycles = 20_000_000
        self.launch(cycles)
        ms = self.wait_ms()
        return cycles / ms if ms > 0 else 1e6

    def cycles_for(self, ms: float) -> int:
        return max(1, int(ms * self.cycles_per_ms))


def _timed_ns(fn, *args):
    t0 = time.perf_counter_ns()
    result = fn(*args)
    return time.perf_counter_ns() - t0, result


def _free_trial(rt, spinner: _Spinner | None, nbytes: int, cycles: int) -> tuple[int, float]:
    """cudaFree of a buffer allocated before the kernel started; (host ns, kernel ms or 0 when idle)."""
    ptr = rt.malloc(nbytes)
    rt.deviceSynchronize()
    if spinner is None:
        ns, _ = _timed_ns(rt.free, ptr)
        return ns, 0.0
    spinner.launch(cycles)
    ns, _ = _timed_ns(rt.free, ptr)
    return ns, spinner.wait_ms()


def _malloc_trial(rt, spinner: _Spinner | None, nbytes: int, cycles: int) -> tuple[int, float]:
    """cudaMalloc issued while the kernel runs (or on an idle device); (host ns, kernel ms or 0)."""
    rt.deviceSynchronize()
    if spinner is not None:
        spinner.launch(cycles)
    ns, ptr = _timed_ns(rt.malloc, nbytes)
    kernel_ms = spinner.wait_ms() if spinner is not None else 0.0
    rt.free(ptr)
    return ns, kernel_ms


def _median(values) -> float:
    return float(np.median(np.asarray(values, dtype=np.float64)))


def _run_trials(trial, rt, spinner, nbytes: int, cycles: int, count: int) -> tuple[float, float]:
    """Median host time (us) and median kernel time (ms) over `count` trials."""
    results = [trial(rt, spinner, nbytes, cycles) for _ in range(count)]
    return _median([ns for ns, _ in results]) / 1e3, _median([ms for _, ms in results])


def _measure_free_sync(cupy, nbytes: int, spin_ms: float, repeats: int) -> dict[str, Any]:
    rt = cupy.cuda.runtime
    spinner = _Spinner(cupy)
    cycles = spinner.cycles_for(spin_ms)
    trials = max(1, min(repeats, MAX_SPIN_TRIALS))
    free_idle_us, _ = _run_trials(_free_trial, rt, None, nbytes, cycles, trials)
    free_busy_us, free_kernel_ms = _run_trials(_free_trial, rt, spinner, nbytes, cycles, trials)
    malloc_idle_us, _ = _run_trials(_malloc_trial, rt, None, nbytes, cycles, trials)
    malloc_busy_us, malloc_kernel_ms = _run_trials(_malloc_trial, rt, spinner, nbytes, cycles, trials)
    return {
        "bytes": nbytes,
        "spin_ms": float(spin_ms),
        "spin_cycles": cycles,
        "trials": trials,
        "kernel_ms": free_kernel_ms,
        "cudaFree_idle_us": free_idle_us,
        "cudaFree_busy_us": free_busy_us,
        "malloc_kernel_ms": malloc_kernel_ms,
        "cudaMalloc_idle_us": malloc_idle_us,
        "cudaMalloc_busy_us": malloc_busy_us,
        # Waiting for at least half the kernel cannot be explained by the call's own cost.
        "free_waits_for_kernel": free_busy_us >= 500.0 * free_kernel_ms,
        "malloc_waits_for_kernel": malloc_busy_us >= 500.0 * malloc_kernel_ms,
    }


# ---------------------------------------------------------------------------------------------
# Bandwidth


def _copy_ms(cupy, stream, dst: int, src: int, nbytes: int, kind: int, repeats: int) -> list[float]:
    """Device-side duration of one memcpyAsync, `repeats` times after one untimed warm-up copy."""
    rt = cupy.cuda.runtime
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for i in range(repeats + 1):
        start.record(stream)
        rt.memcpyAsync(dst, src, nbytes, kind, stream.ptr)
        end.record(stream)
        end.synchronize()
        if i:
            times.append(float(cupy.cuda.get_elapsed_time(start, end)))
    return times


def _duplex_ms(cupy, streams, buffers, nbytes: int, repeats: int) -> list[float]:
    """H2D on one stream and D2H on the other at once; time from the common start to both ends."""
    rt = cupy.cuda.runtime
    up, down = streams
    (dev_in, host_in), (dev_out, host_out) = buffers
    start, down_done, end = cupy.cuda.Event(), cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for i in range(repeats + 1):
        start.record(up)
        down.wait_event(start)
        rt.memcpyAsync(dev_in, host_in, nbytes, rt.memcpyHostToDevice, up.ptr)
        rt.memcpyAsync(host_out, dev_out, nbytes, rt.memcpyDeviceToHost, down.ptr)
        down_done.record(down)
        up.wait_event(down_done)  # so `end` marks the later of the two copies
        end.record(up)
        end.synchronize()
        if i:
            times.append(float(cupy.cuda.get_elapsed_time(start, end)))
    return times


def _bandwidth_row(direction: str, memory: str, label: str, nbytes: int, times_ms: list[float], moved: int) -> dict:
    median_ms = _median(times_ms)
    return {
        "direction": direction,
        "memory": memory,
        "size_label": label,
        "bytes": nbytes,
        "repeats": len(times_ms),
        "median_ms": median_ms,
        "gbps": _gbps(moved, median_ms),
        "best_gbps": _gbps(moved, min(times_ms)),
    }


def _bandwidth_for_size(cupy, label: str, nbytes: int, repeats: int) -> list[dict]:
    rt = cupy.cuda.runtime
    h2d, d2h = rt.memcpyHostToDevice, rt.memcpyDeviceToHost
    up, down = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
    rows = []
    with _device_buffer(rt, nbytes) as dev_a, _device_buffer(rt, nbytes) as dev_b:
        for memory in HOST_MEMORIES:
            host_a, host_b = _host_buffer(cupy, nbytes, memory), _host_buffer(cupy, nbytes, memory)
            pa, pb = host_a.ctypes.data, host_b.ctypes.data
            times = _copy_ms(cupy, up, dev_a, pa, nbytes, h2d, repeats)
            rows.append(_bandwidth_row("H2D", memory, label, nbytes, times, nbytes))
            if memory == "write-combined":  # for upload-only buffers: the CPU would read a download slowly
                del host_a, host_b
                continue
            times = _copy_ms(cupy, up, pb, dev_b, nbytes, d2h, repeats)
            rows.append(_bandwidth_row("D2H", memory, label, nbytes, times, nbytes))
            if memory == "pinned":  # pageable copies are synchronous for the host, so they cannot overlap
                times = _duplex_ms(cupy, (up, down), ((dev_a, pa), (dev_b, pb)), nbytes, repeats)
                rows.append(_bandwidth_row("H2D+D2H", memory, label, nbytes, times, 2 * nbytes))
            rt.deviceSynchronize()  # no copy may still read the host buffers when they are released
            del host_a, host_b
    return rows


def _cpu_copy_gbps(dst: np.ndarray, src: np.ndarray, repeats: int) -> float:
    """The CPU's speed copying src into dst (np.copyto, as the decoder fills a slot), median of repeats."""
    np.copyto(dst, src)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t0)
    return dst.nbytes / _median(times) / 1e9


def _host_access_for_size(cupy, label: str, nbytes: int, repeats: int) -> list[dict]:
    """How fast the CPU writes a frame into each kind of host buffer, and reads one back."""
    frame = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)  # pageable, cached, not zeros
    back = np.empty_like(frame)
    rows = []
    for memory in HOST_MEMORIES:
        buffer = _host_buffer(cupy, nbytes, memory)
        write = _cpu_copy_gbps(buffer, frame, repeats)
        read = _cpu_copy_gbps(back, buffer, repeats)
        if not np.array_equal(back, frame):
            raise GPUError(f"pipeline probe: {memory} host memory did not read back what was written")
        rows.append({"memory": memory, "size_label": label, "bytes": nbytes, "repeats": repeats,
                     "cpu_write_gbps": write, "cpu_read_gbps": read})
        del buffer
    return rows


def _measure_host_access(cupy, plan: _Plan, repeats: int) -> list[dict]:
    rows = []
    for label, nbytes in plan.host.items():
        rows += _host_access_for_size(cupy, label, nbytes, repeats)
    return rows


def _measure_bandwidth(cupy, plan: _Plan, repeats: int, skipped: list[str]) -> list[dict]:
    free_bytes = cupy.cuda.runtime.memGetInfo()[0]
    rows = []
    for label, nbytes in plan.bandwidth.items():
        if not _fits(2 * nbytes, free_bytes):
            skipped.append(f"bandwidth {label}: 2 x {nbytes} bytes do not fit in {free_bytes} free")
            continue
        rows += _bandwidth_for_size(cupy, label, nbytes, repeats)
    return rows
