"""Building a run's parts from a config, as ``pipeline run`` does: chain, backend, source and sink.

Everything that can be refused (options, plugins, the GPU, the output path, the input) is checked before
any output file exists; a part built before a later one fails is closed again.
"""

from __future__ import annotations

from typing import Any, Callable

from .checks import as_pipeline_error, check_output, check_stats_path, special_kind
from .config import RunConfig, is_url
from .errors import ConfigError, GPUError
from .filters import fuse_pointwise, load_plugin, parse_chain
from .filters.plugins import plugin_errors_are_config_errors
from .log import log
from .memory.registry import strategy as find_strategy


def make_backend(device: str, alloc: str, streams: int):
    """The backend for ``device`` (auto, cuda or cpu) and allocation strategy ``alloc``."""
    from .gpu.cuda import gpu_status

    strategy = find_strategy(alloc)
    if device in ("auto", "cuda"):
        ok, reason = gpu_status()
        if ok:
            from .gpu.backend import CudaBackend

            try:
                return CudaBackend(strategy, streams)
            except Exception as e:  # a CUDA failure while creating streams and events: exit 5, one line
                error = as_pipeline_error(e)
                if error is e:
                    raise
                raise error from e
        if device == "cuda":
            raise GPUError(f"--device cuda: {reason}")
        log.info(f"no usable CUDA GPU ({reason}); running on the CPU")
    if strategy.cpu is None:
        raise ConfigError(f"--alloc {alloc} needs a CUDA GPU; the CPU backend has pool and naive")
    from .cpu import CpuBackend

    return CpuBackend(strategy)


def make_chain(filters: str, plugins: tuple[str, ...] = ()) -> list:
    for plugin in plugins:
        load_plugin(plugin)
    with plugin_errors_are_config_errors():
        return fuse_pointwise(parse_chain(filters))


def open_source(cfg: RunConfig, stop=None, signum: Callable[[], int | None] = lambda: None):
    """The PyAV source for ``cfg.input``; a live one is opened in the background (Ctrl-C stays live)."""
    from .source import Source, is_live_input

    waits = waits_for_writer(cfg.input, cfg.input_format)
    live = waits or is_live_input(cfg.input, cfg.input_format)

    def factory() -> Any:
        return Source(cfg.input, strict=cfg.strict, input_format=cfg.input_format, options=cfg.input_opts,
                      timeout=cfg.timeout, live=live)

    if not live:
        return factory()
    import threading

    from .live import open_in_background

    # A URL's open is bounded by FFmpeg's own timeout; a FIFO's open(2) and first reads are not.
    return open_in_background(factory, stop or threading.Event(), signum, deadline=cfg.timeout if waits else None,
                              name=cfg.input)


def waits_for_writer(name: str, input_format: str | None = None) -> bool:
    """A local FIFO, character device or socket (not a capture device): its open and reads wait for a
    writer, possibly forever, so it is read as a live source (every wait bounded by --timeout)."""
    return (not is_url(name) and input_format is None
            and special_kind(name) in ("FIFO", "character device", "socket"))


def open_sink(cfg: RunConfig, target, info, audio, low_latency: bool):
    """The encoder and muxer for ``target`` (a path or a URL)."""
    from .sink import Sink

    return Sink(target, info, codec=cfg.codec, options=cfg.encoder_opts, audio=audio,
                output_format=cfg.output_format, output_opts=cfg.output_opts, timeout=cfg.timeout,
                low_latency=low_latency, overwrite=cfg.overwrite, audio_mode=cfg.audio)


def is_null_output(cfg: RunConfig) -> bool:
    """``-o null`` or ``--format null``: process every frame, write nothing (FFmpeg's ``-f null -``)."""
    return cfg.output == "null" or cfg.output_format == "null"


def build_parts(cfg: RunConfig, stage=None, control=None, source=None) -> tuple[Any, Any, list, Any]:
    """(source, sink, chain, backend) for a run of ``cfg``; ``control`` stops a live source's open.
    ``source``: one already built (frames from arrays); by default ``cfg.input`` is opened."""
    from .engine import plan_for

    chain = make_chain(cfg.filters, cfg.plugins)
    if cfg.preview:
        from .preview import check_display

        check_display()
    backend = make_backend(cfg.device, cfg.alloc, cfg.streams)
    null = is_null_output(cfg)
    target = None if null else cfg.output_target()
    if target is not None:
        check_output(cfg.input, target, cfg.overwrite)
    check_stats_path(cfg.stats_json, cfg.input, target, cfg.overwrite)
    if source is None:
        stop = control.stop_event if control is not None else None
        source = open_source(cfg, stop, (lambda: control.signum) if control is not None else (lambda: None))
    try:
        plan = plan_for(source, chain, backend, "i420", stage)
        if backend.name == "cpu":
            check_host_memory(cfg, plan)
        if null:
            from .adapters import NullSink

            sink = NullSink()
        else:
            if control is not None:
                control.before_output()
            low_latency = source.info.live or cfg.realtime
            sink = open_sink(cfg, target, source.info.with_format(plan.out_format), source.audio, low_latency)
    except BaseException:
        source.close()
        raise
    return source, sink, chain, backend


def check_host_memory(cfg: RunConfig, plan) -> None:
    """Refuse, before allocating, a run whose frames cannot fit in this machine's memory (CPU backend:
    the "device" arena is host memory too). CUDA reports its own shortfall, with sizes, at reservation."""
    needed = memory_needed(cfg, plan)
    available = available_memory()
    if available is not None and needed > available:
        f = plan.in_format
        raise GPUError(
            f"{cfg.input}: out of memory: {f.width}x{f.height} frames need {_gib(needed)} "
            f"({needed} bytes: the frame's buffers, {cfg.ring_size} ring slots each way), "
            f"{_gib(available)} is available; lower --in-flight/--ring-size or the resolution"
        )


def memory_needed(cfg: RunConfig, plan) -> int:
    """The arena and host rings the CPU run touches: the sums its memory strategy makes (which commits
    them up front), not the CUDA arena's frames in flight, which the CPU never has outstanding."""
    from .cpu import host_bytes_needed

    return host_bytes_needed(plan.request(cfg))


def available_memory() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None  # not Linux: no check, the allocation itself reports


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"
