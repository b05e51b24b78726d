"""`pipeline probe`: measure, on this GPU, what CUDA memory management costs.

It reproduces the figures that classic CUDA memory-management tables quote, so the pipeline's
design choices (a device pool, a pinned host ring, no cudaFree in the hot loop) can be checked
against the machine at hand rather than taken on trust:

- cudaMalloc / cudaFree, cudaHostAlloc / cudaFreeHost and a pooled allocation, per size;
- cudaFree's implicit device-wide synchronisation, shown against a busy kernel on another stream;
- host<->device bandwidth, pageable vs pinned vs write-combined pinned, and both directions at once;
- the CPU's speed writing a frame into each kind of host memory and reading it back (write-combined
  memory is for buffers the CPU only writes: the decoder's slots, read by the upload).

CuPy is imported inside the functions, so this module imports (and its tables render) without it.
The measurements live in :mod:`pipeline.gpu.probe`, the tables in :mod:`.probe_report`; this module runs
them (:func:`run_probe`) and is the command line.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..checks import check_report_path, report_on_stdout
from ..errors import ConfigError, GPUError
from ..ffmpeg_args import add_overwrite_arguments, file_name
from ..gpu.probe import (
    PoolAlloc,
    _bandwidth_for_size,
    device_info,
    _measure_allocs,
    _measure_bandwidth,
    _measure_host_access,
    _measure_free_sync,
    _Plan,
    _require_gpu,
)
from ..reportfile import save_report, write_report
from .probe_report import probe_table

# ---------------------------------------------------------------------------------------------
# Entry points


def run_probe(
    *,
    repeats: int = 20,
    sizes: dict[str, int] | None = None,
    spin_ms: float = 50.0,
    pool_alloc: PoolAlloc | None = None,
) -> dict[str, Any]:
    """Measure allocation costs, cudaFree's synchronisation and copy bandwidth on the current device.

    `sizes` (label -> bytes) replaces every default size list when given. `pool_alloc(n)` allocates n bytes
    from the pool under test and returns its release function; CuPy's MemoryPool is measured without it.
    Returns a JSON-serialisable dict; raises GPUError when no CUDA GPU is usable.
    """
    if repeats < 1:
        raise ConfigError(f"--repeats must be at least 1, not {repeats}")
    if spin_ms <= 0:
        raise ConfigError(f"spin_ms must be positive, not {spin_ms}")
    plan = _Plan.from_sizes(sizes)
    cupy = _require_gpu()
    skipped: list[str] = []
    try:
        result: dict[str, Any] = {"device": device_info(cupy), "repeats": repeats}
        result["pool"] = "cupy.cuda.MemoryPool" if pool_alloc is None else _describe(pool_alloc)
        result["alloc"] = _measure_allocs(cupy, plan, repeats, pool_alloc, skipped)
        result["free_sync"] = _free_sync_or_error(cupy, plan.spin_bytes, spin_ms, repeats)
        result["bandwidth"] = _measure_bandwidth(cupy, plan, repeats, skipped)
        result["host_access"] = _measure_host_access(cupy, plan, repeats)
    except (RuntimeError, MemoryError) as exc:  # CUDARuntimeError / CUDADriverError / OutOfMemoryError
        raise GPUError(f"pipeline probe: CUDA error: {exc}") from exc
    result["skipped"] = skipped
    return result


def _free_sync_or_error(cupy, nbytes: int, spin_ms: float, repeats: int) -> dict[str, Any]:
    # The busy kernel needs NVRTC; without it the other measurements are still worth reporting.
    try:
        return _measure_free_sync(cupy, nbytes, spin_ms, repeats)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def _describe(fn: Callable) -> str:
    owner = getattr(fn, "__self__", None)
    if owner is not None:
        return f"{type(owner).__module__}.{type(owner).__qualname__}.{fn.__name__}"
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


# ---------------------------------------------------------------------------------------------
# Command line


MAX_REPEATS = 1000  # each repeat allocates and copies every size: more would run for hours


def _positive_int(text: str) -> int:
    from ..numbers import integer

    try:
        value = integer(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 1 <= value <= MAX_REPEATS:
        raise argparse.ArgumentTypeError(f"must be 1 to {MAX_REPEATS}, not {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `pipeline probe`."""
    parser.add_argument(
        "--repeats", type=_positive_int, default=20, metavar="N",
        help="timed repeats of each measurement; the median and p90 are reported (default: %(default)s)",
    )
    parser.add_argument(
        "--json", metavar="PATH", default=None, type=file_name,
        help="also write the raw results as JSON to PATH (default: no JSON)",
    )
    add_overwrite_arguments(parser)
    parser.add_argument(
        "-q", "--quiet", action="store_true",
        help="print no tables, e.g. with --json (default: print them)",
    )


def main(args: argparse.Namespace) -> int:
    from rich.console import Console

    from ..stdio import StdoutConsole, stdout_errors

    quiet = bool(getattr(args, "quiet", False))
    overwrite = bool(getattr(args, "overwrite", False))
    if getattr(args, "json", None):
        check_report_path(args.json, "--json", [], overwrite)
    if quiet:
        result = run_probe(repeats=args.repeats)
    else:
        # The spinner on stderr, as a progress bar: stdout carries only the tables, whose write errors
        # are an output error (a full /dev/full made the spinner's last write an internal error).
        with Console(stderr=True).status("Probing CUDA memory management ..."):
            result = run_probe(repeats=args.repeats)
        with stdout_errors():  # beside --json /dev/stdout, the tables go to stderr: stdout holds the JSON alone
            console = Console(stderr=True) if report_on_stdout(getattr(args, "json", None)) else StdoutConsole()
            for table in probe_table(result):
                console.print(table)
            for line in result.get("skipped", []):
                console.print(f"skipped: {line}", style="yellow")
    if getattr(args, "json", None):
        _write_json(Path(args.json), result, exclusive=not overwrite)
    return 0


def _write_json(path: Path, result: dict, exclusive: bool = False) -> None:
    text = json.dumps(result, indent=2) + "\n"
    save_report(path, "--json", lambda p: write_report(p, text, exclusive), "probe")


def bandwidth_for_size(label: str, nbytes: int, repeats: int = 10) -> list[dict]:
    """Pinned and pageable H2D/D2H (and both at once) for one buffer size; rows as in ``run_probe``."""
    return _bandwidth_for_size(_require_gpu(), label, nbytes, repeats)
