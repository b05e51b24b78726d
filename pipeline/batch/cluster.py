"""Where a batch runs: its own local Dask cluster (one worker process per GPU, or CPU workers), or an
existing cluster reached through its scheduler's address.

Each local worker is a ``distributed.Nanny`` given its own environment, so ``CUDA_VISIBLE_DEVICES`` is
set in the worker process before anything there touches CUDA (the Nanny applies ``env`` in the new
process before the worker starts; a ``LocalCluster`` gives every worker the same environment, so it
cannot pin them). CPU workers get an empty ``CUDA_VISIBLE_DEVICES``: they never touch a GPU.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator

from ..config import check_int, device_index
from ..errors import ConfigError, GPUError


@dataclass(frozen=True)
class WorkerSpec:
    name: str
    gpu: str | None  # the CUDA_VISIBLE_DEVICES value it is pinned to; None: a CPU worker
    env: dict[str, str] = field(default_factory=dict)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system has one), at least one."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:
        return os.cpu_count() or 1


def default_cpu_workers() -> int:
    # A run is already several threads (decode, submit, encode, and the codecs' own), so one worker
    # per core would oversubscribe: half the cores, at least one.
    return max(1, usable_cores() // 2)


def check_worker_count(count: int, gpus: int, asked: str) -> None:
    """Refuse more local workers than cores (one per GPU, ``gpus`` of them, is always allowed). Each is
    a process running a whole file with threads of its own: past one per core they only slow each other
    down, and hundreds of them take minutes and gigabytes of memory just to start."""
    cores = usable_cores()
    if count > max(cores, gpus):
        raise ConfigError(f"{asked}: more workers ({count}) than the {cores} cores here; at most "
                          f"{max(cores, gpus)} (each worker runs a whole file at a time)")


def plan_workers(gpus: str | None, workers: int | None, device: str) -> list[WorkerSpec]:
    """The local workers for ``--gpus`` / ``--workers`` and ``--device``.

    ``gpus``: ``all`` or a comma-separated list of device ids as ``nvidia-smi`` shows them (an id given
    twice gets two workers on that GPU). ``workers``: that many CPU workers. Neither: one worker per
    visible GPU, or CPU workers when no GPU is visible or the device is ``cpu``."""
    if gpus is not None and workers is not None:
        raise ConfigError("--gpus and --workers exclude each other: --gpus starts one worker per GPU, "
                          "--workers N starts N CPU workers")
    if workers is not None:  # from the API any value comes; a NumPy integer is a count, as RunConfig's are
        check_int("--workers", workers.item() if type(workers).__module__ == "numpy" else workers, 1)
    if device == "cpu" and gpus is not None:
        raise ConfigError("--gpus with --device cpu: choose one")
    if (index := device_index(device)) is not None:
        # A worker sees only its own GPU: cuda:N is the worker on the Nth GPU this process may use, as
        # `pipeline run --device cuda:N` counts them.
        if gpus is not None:
            raise ConfigError(f"--device {device} with --gpus: choose one")
        visible = visible_gpus()
        if index >= len(visible):
            there = f"the GPUs are cuda:0 to cuda:{len(visible) - 1}" if visible else "none is visible"
            raise GPUError(f"--device {device}: no such GPU here; {there}")
        return gpu_workers([visible[index]])
    if workers is not None:
        if device == "cuda":
            raise ConfigError("--workers starts CPU workers; for --device cuda choose GPUs with --gpus")
        check_worker_count(workers, 0, f"--workers {workers}")
        return cpu_workers(workers)
    if device == "cpu":
        return cpu_workers(default_cpu_workers())
    ids = _chosen_gpus(gpus)
    if ids:
        check_worker_count(len(ids), len(set(ids)), f"--gpus {gpus or 'all'}")
        return gpu_workers(ids)
    if device == "cuda":
        raise GPUError("--device cuda: no GPU visible (nvidia-smi and CuPy found none)")
    return cpu_workers(default_cpu_workers())


def _chosen_gpus(gpus: str | None) -> list[str]:
    """The GPUs of ``--gpus`` (all visible ones for None or ``all``); ids as nvidia-smi numbers them, or
    UUIDs (``GPU-...``, ``MIG-...``), which CUDA_VISIBLE_DEVICES also takes."""
    if gpus is None or gpus == "all":
        ids = visible_gpus()
        if gpus == "all" and not ids:
            raise GPUError("--gpus all: no GPU visible (nvidia-smi and CuPy found none)")
        return ids
    ids = [g.strip() for g in gpus.split(",")]
    if not all(g.isdigit() or g.startswith(("GPU-", "MIG-")) for g in ids):
        raise ConfigError(f"Invalid --gpus ({gpus!r}). Supported values are 'all' or device ids, e.g. 0,1.")
    visible = visible_gpus()
    if not visible:
        raise GPUError(f"--gpus {gpus}: no GPU visible (nvidia-smi and CuPy found none)")
    known = set(visible) | (gpu_uuids() if any(not g.isdigit() for g in ids) else set())
    if missing := [g for g in dict.fromkeys(ids) if g not in known]:
        raise GPUError(f"--gpus {gpus}: no GPU {', '.join(missing)} here; the GPUs are {', '.join(visible)}")
    return ids


def cpu_workers(n: int) -> list[WorkerSpec]:
    return [WorkerSpec(f"cpu{i}", None, {"CUDA_VISIBLE_DEVICES": ""}) for i in range(n)]


def gpu_workers(ids: list[str]) -> list[WorkerSpec]:
    specs, seen = [], {}
    for gpu in ids:
        seen[gpu] = seen.get(gpu, 0) + 1
        name = f"gpu{gpu}" if seen[gpu] == 1 else f"gpu{gpu}.{seen[gpu] - 1}"
        specs.append(WorkerSpec(name, gpu, {"CUDA_VISIBLE_DEVICES": gpu}))
    return specs


def gpu_uuids() -> set[str]:
    """The GPUs' UUIDs as nvidia-smi lists them (CUDA_VISIBLE_DEVICES takes them too); none without it."""
    return set(_smi("uuid") or [])


def _smi(field: str) -> list[str] | None:
    """One ``--query-gpu`` field of every GPU; None where nvidia-smi is missing or fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, f"--query-gpu={field}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [line.strip() for line in out.splitlines() if line.strip()]


def visible_gpus() -> list[str]:
    """Device ids this process may use: those in CUDA_VISIBLE_DEVICES when it is set, else the GPUs
    ``nvidia-smi`` lists, else the count CuPy sees (asked last: it starts CUDA in this process)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip() and d.strip() != "-1"]
    if (indices := _smi("index")) is not None:
        return indices
    from ..gpu.cuda import cupy, gpu_status

    ok, _ = gpu_status()
    return [str(i) for i in range(cupy().cuda.runtime.getDeviceCount())] if ok else []


CONNECT_TIMEOUT_S = 20  # to reach a --scheduler and read its greeting; then the address is refused
_HOST_PORT_SCHEMES = ("tcp", "tls", "ws", "wss")  # Dask's own; a plugin's scheme is left to connect()


def check_scheduler_address(address: str) -> None:
    """Refuse, before any work, what cannot be a scheduler's address: an unknown scheme, or for Dask's
    own schemes a missing host or port (``bogus``, ``tcp://head``) or a port out of range."""
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.registry import get_backend

    example = "e.g. tcp://head:8786 or head:8786"
    try:
        scheme, location = parse_address(address)
        get_backend(scheme)
        if scheme not in _HOST_PORT_SCHEMES:
            return
        host, port = parse_host_port(location)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"--scheduler {address}: not a scheduler address ({e}); {example}") from None
    if not host or not 0 < port < 65536:
        raise ConfigError(f"--scheduler {address}: not a scheduler address (a host and a port from 1 to "
                          f"65535 are needed); {example}")


def check_dashboard_address(address: str) -> None:
    """``PORT``, ``:PORT`` or ``HOST:PORT``, with a host this machine knows: the cluster would fail to
    start on anything else, after the workers were asked for. Without bokeh Dask serves none, saying so
    only in a log the batch keeps quiet: refused, as --preview without pygame is."""
    import importlib.util

    from distributed.comm.addressing import parse_host_port

    if importlib.util.find_spec("bokeh") is None:
        raise ConfigError(f"--dashboard {address}: Dask's dashboard needs bokeh (pip install bokeh); "
                          "or run without --dashboard")

    try:
        # An IPv6 address in brackets passes Dask's parser here, but not the one that starts the server.
        host, port = ("", -1) if "[" in address else parse_host_port(address if ":" in address
                                                                     else f":{address}")
    except ValueError:
        host, port = "", -1
    if not 0 <= port <= 65535:
        raise ConfigError(f"--dashboard {address}: not an address to serve on; e.g. :8787 or 127.0.0.1:8787")
    try:
        socket.getaddrinfo(host or None, port)
    except (OSError, UnicodeError) as e:
        reason = getattr(e, "strerror", None) or e
        raise ConfigError(f"--dashboard {address}: unknown host {host!r} ({reason})") from None


def _greeted(address: str) -> None:
    """Connect to ``address`` and read its greeting within CONNECT_TIMEOUT_S. ``Client`` bounds only the
    connection: a port that accepts and never answers (an HTTP server waiting for a request) would
    hang the batch in the handshake for good."""
    error = _greeting_error(address)
    if error is None:
        return
    if isinstance(error, TimeoutError):  # before OSError, which it is a kind of
        raise ConfigError(f"--scheduler {address}: no Dask scheduler answered within {CONNECT_TIMEOUT_S} s "
                          "(nothing listening, the host unreachable, or another kind of server)")
    if isinstance(error, OSError):  # refused, no route, or Dask's own "Timed out trying to connect"
        raise ConfigError(f"--scheduler {address}: cannot reach the scheduler: {error}")
    if isinstance(error, Exception):
        # Something else answered (its bytes read as a Dask frame: a MemoryError for exabytes), TLS
        # without its configuration (TypeError), a scheme's backend that is not installed, ...
        raise ConfigError(f"--scheduler {address}: no Dask scheduler there ({type(error).__name__}: {error})")
    raise error


def _greeting_error(address: str) -> BaseException | None:
    """What connecting to ``address`` and reading its greeting raised, if anything; on a thread with an
    event loop of its own, since the caller's thread may be running one (a notebook's)."""
    import asyncio

    from distributed.comm import connect as open_comm
    from distributed.security import Security

    async def greeting() -> None:
        comm = await open_comm(address, timeout=CONNECT_TIMEOUT_S, **Security().get_connection_args("client"))
        await comm.close()

    failure: list[BaseException] = []

    def probe() -> None:
        try:
            asyncio.run(asyncio.wait_for(greeting(), CONNECT_TIMEOUT_S))
        except BaseException as e:
            failure.append(e)

    thread = threading.Thread(target=probe, name="pipeline-batch-greeting", daemon=True)
    thread.start()
    thread.join()
    return failure[0] if failure else None


@contextlib.contextmanager
def connect(specs: list[WorkerSpec], *, scheduler: str | None = None, processes: bool = True,
            dashboard: str | None = None) -> Iterator:
    """A ``distributed.Client`` on the batch's cluster, closed (with a local cluster) on exit."""
    from distributed import Client

    if scheduler is not None:
        if not scheduler.startswith("inproc://"):  # in this process: nothing to wait for
            _greeted(scheduler)
        try:
            client = Client(scheduler, timeout=f"{CONNECT_TIMEOUT_S}s")
        except (OSError, TimeoutError) as e:
            raise ConfigError(f"--scheduler {scheduler}: cannot reach the scheduler: {e}") from e
        with client:
            yield client
        return
    cluster = local_cluster(specs, processes=processes, dashboard=dashboard)
    with cluster, Client(cluster) as client:
        yield client


def local_cluster(specs: list[WorkerSpec], *, processes: bool = True, dashboard: str | None = None):
    """A scheduler in this process and one single-threaded worker per spec, on this machine only.

    ``processes=False`` runs the workers as threads of this process (CPU only, for tests of the
    plumbing: they cannot have an environment each)."""
    from distributed import Nanny, Scheduler, SpecCluster, Worker

    if not processes and any(s.gpu is not None for s in specs):
        raise ConfigError("GPU workers need processes of their own (processes=True)")
    # Dask's own logs stay quiet (CRITICAL): a file's failure is in its result, and a worker's lost
    # heartbeat while the cluster closes is no news to the person running the batch.
    common = {"nthreads": 1, "host": "127.0.0.1", "dashboard": False, "silence_logs": logging.CRITICAL,
              # Nothing of a run is Dask data: a memory limit would only pause or kill a busy worker.
              "memory_limit": 0}
    workers = {s.name: {"cls": Nanny if processes else Worker,
                        "options": {**common, "name": s.name, **({"env": s.env} if processes else {})}}
               for s in specs}
    # allowed_failures=0: a file that crashes its worker process fails at once, instead of being
    # retried on (and crashing) the other workers.
    # The scheduler serves HTTP (health, metrics) even without a dashboard: on a free local port then.
    scheduler = {"cls": Scheduler, "options": {"host": "127.0.0.1", "allowed_failures": 0,
                                               "dashboard": dashboard is not None,
                                               "dashboard_address": dashboard or "127.0.0.1:0"}}
    with _terminal_signals_ignored_by_children():
        return SpecCluster(workers=workers, scheduler=scheduler, silence_logs=logging.CRITICAL,
                           name="pipeline-batch")


# The resource tracker's interpreter takes its -W options from this one's sys.warnoptions.
TRACKER_QUIET = "ignore:resource_tracker:UserWarning"


@contextlib.contextmanager
def _quiet_tracker() -> Iterator[None]:
    """A batch that leaves at once (a second Ctrl-C) leaves the workers' semaphores to multiprocessing's
    resource tracker, which removes them, as it should, and then warned on the terminal, after the batch's
    last line, that each had "leaked". A tracker started in here has its warnings off (its clean-up runs);
    processes started later (an application's own) keep theirs."""
    before = list(sys.warnoptions)
    sys.warnoptions.append(TRACKER_QUIET)
    try:
        yield
    finally:
        sys.warnoptions[:] = before


# Signals sent to the whole process group: a terminal's Ctrl-C and its closing, `timeout` and a service
# manager's stop (SIGTERM). The batch process handles them for its workers.
LEFT_TO_THE_BATCH = (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)


@contextlib.contextmanager
def _terminal_signals_ignored_by_children() -> Iterator[None]:
    """Worker processes started in here ignore SIGINT, SIGHUP and SIGTERM: Ctrl-C on a terminal, the
    terminal closing, `timeout` and a service manager's stop signal the whole process group, and a worker
    must not die of it mid-file (its file would read as a crash, its temporary output left); the batch
    process stops its runs instead (an ignored signal stays ignored in a spawned child, and Python then leaves it
    so). Meanwhile this thread blocks them, as do the threads started in here (the cluster's event loop)
    and those started before in :func:`threads_started_deaf` (NumPy's, the progress bar's): Linux does
    not discard a signal that every thread blocks, so one that comes during these seconds waits, and
    reaches the batch's own handler once that is back and the signal unblocked."""
    if threading.current_thread() is not threading.main_thread():  # no signal handling to arrange
        yield
        return
    from multiprocessing import resource_tracker

    with threads_started_deaf():  # unblocked once the handlers are back
        previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in LEFT_TO_THE_BATCH}
        # multiprocessing's resource tracker, which the first worker's start would start: starting it
        # unblocks SIGINT in the thread that does, and that thread's later threads would take the signal
        # and drop it. Started here on a thread that ends, it ignores the terminal's signals as the workers do.
        try:
            with _quiet_tracker():
                starter = threading.Thread(target=resource_tracker.ensure_running, name="pipeline-batch-tracker")
                starter.start()
                starter.join()
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


@contextlib.contextmanager
def threads_started_deaf() -> Iterator[None]:
    """Threads started in here, by Python or by a library (NumPy's OpenBLAS pool, rich's refresh thread),
    block the terminal's signals for good: this thread blocks them meanwhile, and a new thread inherits
    that. A signal that comes while the workers start with it ignored (see
    :func:`_terminal_signals_ignored_by_children`) then waits for this thread, instead of being taken
    and discarded by one of them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, LEFT_TO_THE_BATCH)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def start_thread_pools_deaf() -> None:
    """Import NumPy (Dask imports it), whose import starts OpenBLAS's thread pool, among
    :func:`threads_started_deaf`. Only in a process that has not imported NumPy yet (``pipeline
    batch``); a no-op after."""
    if "numpy" in sys.modules:
        return
    with threads_started_deaf():
        import numpy  # noqa: F401


def survey(client, rounds: int = 3) -> tuple[dict[str, float], list[dict[str, object]]]:
    """Each worker's clock offset (its ``time.time()`` minus this process's) and its name, address and
    pinned GPU. A worker's start and end times of a file are moved onto this process's clock with the
    offset, to measure the gaps between. A worker on this machine shares its clock: offset 0. Another
    machine's is estimated as NTP does, from the round trip with the least delay (error: half of it)."""
    from .worker import worker_facts

    best: dict[str, tuple[float, float]] = {}  # address: (round trip, offset)
    for _ in range(rounds):
        t0 = time.time()
        facts = client.run(worker_facts)
        t1 = time.time()
        for address, f in facts.items():
            offset = 0.0 if f["host"] == socket.gethostname() else f["time"] - (t0 + t1) / 2
            if address not in best or t1 - t0 < best[address][0]:
                best[address] = (t1 - t0, offset)
    workers = [{"name": f["name"], "host": f["host"], "address": address,
                "cuda_visible_devices": f["cuda_visible_devices"]}
               for address, f in sorted(facts.items(), key=lambda item: item[1]["name"])]
    return {address: offset for address, (_, offset) in best.items()}, workers
