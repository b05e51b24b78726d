"""The tables of `pipeline probe`, rendered from the JSON-serialisable result of :func:`.probe.run_probe`.

Plain rich tables over a dict: this module needs no GPU and no CuPy.
"""

from __future__ import annotations

from rich.table import Table


def _fmt_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def _fmt_us(us: float) -> str:
    return f"{us:,.1f}" if us < 1000 else f"{us:,.0f}"


# Rows of one family share a table section.
_ALLOC_FAMILY = {
    "cudaMalloc": "device", "cudaFree": "device",
    "cudaHostAlloc": "host", "cudaFreeHost": "host",
    "pool alloc (hit)": "pool", "pool release": "pool",
}


def _alloc_table(result: dict) -> Table:
    device = result.get("device", {})
    table = Table(
        title=f"Allocation costs on {device.get('name', 'GPU')} (median of {result.get('repeats', '?')})",
        caption=f"pool: {result.get('pool', '?')}",
    )
    table.add_column("operation")
    table.add_column("size")
    table.add_column("bytes", justify="right")
    table.add_column("median µs", justify="right")
    table.add_column("p90 µs", justify="right")
    previous = None
    for row in result.get("alloc", []):
        family = _ALLOC_FAMILY.get(row["what"], row["what"])
        if previous is not None and family != previous:
            table.add_section()
        previous = family
        table.add_row(
            row["what"], row["size_label"], _fmt_bytes(row["bytes"]), _fmt_us(row["median_us"]), _fmt_us(row["p90_us"])
        )
    return table


def _bandwidth_table(result: dict) -> Table:
    table = Table(
        title="Host <-> device bandwidth (cudaMemcpyAsync, CUDA events)",
        caption="H2D+D2H: both directions at once on two streams, aggregate of the two",
    )
    table.add_column("direction")
    table.add_column("host memory")
    table.add_column("size")
    table.add_column("GB/s (median)", justify="right")
    table.add_column("GB/s (best)", justify="right")
    previous = None
    for row in result.get("bandwidth", []):
        if previous is not None and row["size_label"] != previous:
            table.add_section()
        previous = row["size_label"]
        table.add_row(
            row["direction"], row["memory"], f"{row['size_label']} ({_fmt_bytes(row['bytes'])})",
            f"{row['gbps']:.1f}", f"{row['best_gbps']:.1f}",
        )
    return table


def _host_access_table(result: dict) -> Table:
    table = Table(title="CPU access to host memory (np.copyto of one frame)",
                  caption="write-combined: pinned, written past the CPU's caches; for buffers the CPU only writes")
    table.add_column("host memory")
    table.add_column("size")
    table.add_column("CPU write GB/s", justify="right")
    table.add_column("CPU read GB/s", justify="right")
    for row in result.get("host_access", []):
        table.add_row(row["memory"], f"{row['size_label']} ({_fmt_bytes(row['bytes'])})",
                      f"{row['cpu_write_gbps']:.1f}", f"{row['cpu_read_gbps']:.2f}")
    return table


def free_sync_finding(free_sync: dict) -> str:
    """One sentence on whether cudaFree waited for the whole device."""
    if "error" in free_sync:
        return f"cudaFree synchronisation not measured: {free_sync['error']}"
    kernel_ms = free_sync["kernel_ms"]
    busy, idle = free_sync["cudaFree_busy_us"], free_sync["cudaFree_idle_us"]
    if free_sync["free_waits_for_kernel"]:
        verdict = f"cudaFree waited for the whole device: {busy / 1e3:.1f} ms"
    else:
        verdict = f"cudaFree did not wait for the device: {busy / 1e3:.3f} ms"
    malloc = "waited too" if free_sync["malloc_waits_for_kernel"] else "did not wait"
    return (
        f"{verdict} while an unrelated {kernel_ms:.1f} ms kernel ran on another stream "
        f"(idle device: {_fmt_us(idle)} µs); cudaMalloc during the kernel {malloc} "
        f"({_fmt_us(free_sync['cudaMalloc_busy_us'])} µs)."
    )


def _free_sync_table(result: dict) -> Table:
    free_sync = result.get("free_sync", {})
    table = Table(
        title="Implicit synchronisation: calls made while a busy kernel runs", caption=free_sync_finding(free_sync)
    )
    table.add_column("call")
    table.add_column("idle device µs", justify="right")
    table.add_column("busy device µs", justify="right")
    table.add_column("kernel ms", justify="right")
    table.add_column("waited for kernel")
    if "error" not in free_sync:
        for call, kernel_key in (("cudaFree", "kernel_ms"), ("cudaMalloc", "malloc_kernel_ms")):
            waited = free_sync["free_waits_for_kernel" if call == "cudaFree" else "malloc_waits_for_kernel"]
            table.add_row(
                f"{call} ({_fmt_bytes(free_sync['bytes'])})",
                _fmt_us(free_sync[f"{call}_idle_us"]),
                _fmt_us(free_sync[f"{call}_busy_us"]),
                f"{free_sync[kernel_key]:.1f}",
                "yes" if waited else "no",
            )
    return table


def probe_table(result: dict) -> list[Table]:
    """The tables a person reads: allocation costs, bandwidth, and the cudaFree-sync finding."""
    return [_alloc_table(result), _bandwidth_table(result), _host_access_table(result), _free_sync_table(result)]
