"""Building a run's parts from a config, as ``pipeline run`` does: chain, backend, source and sink.

Everything that can be refused (options, plugins, the GPU, the output path, the input) is checked before
any output file exists; a part built before a later one fails is closed again.
"""

from __future__ import annotations

import _imp
import logging
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

from .checks import as_pipeline_error, check_output, check_stats_path, special_kind
from .config import RunConfig, device_index, is_default_codec, is_url, pipe_fd
from .errors import ConfigError, GPUError, Interrupted
from .filters import fuse_pointwise, load_plugin, parse_chain
from .filters.plugins import plugin_errors_are_config_errors
from .log import log, once
from .memory.registry import strategy as find_strategy
from .startup import Phases


def make_backend(device: str, alloc: str, streams: int, decode: str = "cpu"):
    """The backend for ``device`` (auto, cuda or cpu) and allocation strategy ``alloc``; decoding with
    NVDEC needs the GPU as ``--device cuda`` does."""
    from .gpu.cuda import gpu_status

    strategy = find_strategy(alloc)
    if decode == "nvdec" and device == "cpu":
        raise ConfigError("--decode nvdec needs the GPU: it decodes into device memory (not with --device cpu)")
    if device != "cpu":
        index = device_index(device)
        ok, reason = gpu_status(index)
        if ok:
            from .gpu.backend import CudaBackend

            try:
                return CudaBackend(strategy, streams, index or 0)
            except Exception as e:  # a CUDA failure while creating streams and events: exit 5, one line
                error = as_pipeline_error(e)
                if error is e:
                    raise
                raise error from e
        if device != "auto" or decode == "nvdec":
            raise GPUError(f"--{f'device {device}' if device != 'auto' else 'decode nvdec'}: {reason}")
        once(logging.INFO, f"no usable CUDA GPU ({reason}); running on the CPU")
    if strategy.cpu is None:
        raise ConfigError(f"--alloc {alloc} needs a CUDA GPU; the CPU backend has pool and naive")
    from .cpu import CpuBackend

    return CpuBackend(strategy)


def make_chain(filters: str, plugins: tuple[str, ...] = ()) -> list:
    for plugin in plugins:
        load_plugin(plugin)
    with plugin_errors_are_config_errors():
        return fuse_pointwise(parse_chain(filters))


def decoder_for(cfg: RunConfig, backend) -> str:
    """cpu, nvdec or auto: NVDEC needs the CUDA backend (frames stay in its device memory)."""
    if backend is not None and backend.name == "cuda":
        return cfg.decode
    if cfg.decode == "nvdec":
        raise GPUError("--decode nvdec needs the CUDA backend")
    return "cpu"


def open_source(cfg: RunConfig, stop=None, signum: Callable[[], int | None] = lambda: None, backend=None,
                decoders=None, gpu_up: bool | None = None):
    """The PyAV source for ``cfg.input``, decoded on the CPU or with NVDEC (``cfg.decode``); a live one
    is opened in the background (Ctrl-C stays live). ``decoders``: see :func:`build_parts`. ``gpu_up``:
    CuPy is not being imported beside this open (it was before the run, or the backend made first imported
    it; default: it is imported now); NVDEC's stream analysis then reads headers only (see
    ``pipeline.opening.open_input``)."""
    from .source import Source, is_live_input
    from .span import Span

    gpu_up = "cupy" in sys.modules if gpu_up is None else gpu_up
    waits = waits_for_writer(cfg.input, cfg.input_format)
    live = waits or is_live_input(cfg.input, cfg.input_format)
    decode = decoder_for(cfg, backend)
    if decode == "auto" and not opens_twice(cfg):
        decode = "cpu"
    span = Span.from_seconds(cfg.start, cfg.duration, cfg.end)

    def factory(hwaccel=None) -> Any:
        if hwaccel is not None:
            backend.make_current()  # FFmpeg adopts the calling thread's CUDA context (CuPy's)
        # A paced or live input needs one session's speed only; with --strict a decode error must be pinned on
        # its packet, which a session running ahead cannot do. Anything else goes as fast as its sessions.
        sessions = cfg.nvdec_sessions if hwaccel is not None and not (live or cfg.realtime or cfg.strict) else 1
        return Source(cfg.input, strict=cfg.strict, input_format=cfg.input_format, options=cfg.input_opts,
                      timeout=cfg.timeout, live=live, hwaccel=hwaccel, span=span, decode_sessions=sessions,
                      make_current=backend.make_current if hwaccel is not None else None,
                      decoders=decoders if hwaccel is not None else None, headers_only=gpu_up,
                      first_frame_first=gpu_up)

    def opened() -> Any:
        if decode == "cpu":
            return factory()
        from .nvdec import open_decoded

        return open_decoded(factory, decode, backend.device_id)

    if not live and pipe_fd(cfg.input) is None:
        return opened()
    import threading

    from .live import open_in_background

    # A URL's open is bounded by FFmpeg's own timeout; a FIFO's open(2) and first reads are not. Nor are
    # stdin's: FFmpeg retries a read that a signal interrupted, so opened here its wait for the first bytes
    # would keep Ctrl-C and SIGTERM from the main thread.
    return open_in_background(opened, stop or threading.Event(), signum, deadline=cfg.timeout if waits else None,
                              name=cfg.input)


def opens_twice(cfg: RunConfig) -> bool:
    """Whether the input can be opened again from its start. ``--decode auto`` tries NVDEC and, where the
    GPU refuses the stream at its first frame, opens the input again for the CPU decoder: what stdin, a
    FIFO, a device or a listening socket gave the first try would be lost, so those decode on the CPU."""
    if pipe_fd(cfg.input) is not None or (not is_url(cfg.input) and special_kind(cfg.input) is not None):
        return False
    options = {**{k: v[-1] for k, v in parse_qs(urlsplit(cfg.input).query, keep_blank_values=True).items()},
               **cfg.input_opts}
    return not _listens(options)


def _listens(options: dict[str, str]) -> bool:
    """A server waiting for its sender (tcp/udp/http ``listen``, RTMP's ``rtmp_listen``, RTSP's
    ``rtsp_flags=listen``, SRT's ``mode=listener``); FFmpeg takes a bare ``?listen`` as listen=1."""
    return (options.get("listen", "0") != "0" or options.get("rtmp_listen", "0") != "0"
            or "listen" in options.get("rtsp_flags", "") or options.get("mode") == "listener")


def waits_for_writer(name: str, input_format: str | None = None) -> bool:
    """A local FIFO, character device or socket (not a capture device): its open and reads wait for a
    writer, possibly forever, so it is read as a live source (every wait bounded by --timeout)."""
    return (not is_url(name) and input_format is None
            and special_kind(name) in ("FIFO", "character device", "socket"))


# What a live or paced run encodes with unless --encoder-opt says otherwise: every frame's packet out at
# once (no look-ahead, no B-frames), the fastest preset, and a one-second GOP (g is set from the rate).
LOW_LATENCY = {"libx264": {"preset": "ultrafast", "tune": "zerolatency", "bf": "0"},
               "libx265": {"preset": "ultrafast", "tune": "zerolatency"}}


def encoder_options(cfg: RunConfig, info, low_latency: bool) -> dict[str, str]:
    if cfg.encoder_opts or not low_latency or cfg.codec not in LOW_LATENCY:
        return dict(cfg.encoder_opts)
    rate = float(info.frame_rate) if info.frame_rate else 30.0
    options = {**LOW_LATENCY[cfg.codec], "g": str(max(1, round(rate)))}
    log.debug(f"live input: low-latency encoding ({', '.join(f'{k}={v}' for k, v in options.items())}); "
             "--encoder-opt replaces it")
    return options


def for_sequence(cfg: RunConfig, target) -> RunConfig:
    """An image sequence (:mod:`pipeline.sequence`) or a single picture is encoded as its picture format
    (unless ``-c`` says otherwise) and has no audio; any other output keeps ``cfg``."""
    from .sequence import encoder_for, is_picture

    if not is_picture(target, cfg.output_format):
        return cfg
    return cfg.replace(codec=encoder_for(target, cfg.codec), audio="none")


def check_one_picture(cfg: RunConfig, target, expected_frames: int | None) -> None:
    """A single picture takes one frame: ``--frames 1``, or an input that says it holds one. Asked for more,
    the muxer would fail at the second, mid-run."""
    from .avlib import guessed_muxer
    from .muxers import takes_video
    from .sequence import is_picture, is_sequence

    # The input's own count, not a span's estimate from the rate (-t 0.4 of variable-rate video holds more).
    said_one = expected_frames == 1 and cfg.start is None and cfg.duration is None and cfg.end is None
    if (not is_picture(target, cfg.output_format) or is_sequence(target, cfg.output_format) or cfg.frames == 1
            or (cfg.frames is None and said_one)):
        return
    # A codec the muxer refuses (-c png -o x.webp) is the first thing to fix: the sink says so, exit 2.
    if takes_video(cfg.output_format or guessed_muxer(str(target)), cfg.codec):
        raise ConfigError(f"{target}: one picture holds one frame; add --frames 1, or name a sequence "
                          f"({target.stem}_%04d{target.suffix}) for every frame")


def for_muxer(cfg: RunConfig, target) -> RunConfig:
    """The default encoder (libx264) where the output's muxer takes H.264, else the muxer's own, as ffmpeg
    picks without ``-c``: VP9 for ``.webm``, GIF for ``.gif``, raw video for ``.y4m`` and ``.yuv``. A
    ``-c libx264`` someone gave stays (the muxer then says it cannot hold it, exit 2)."""
    from .muxers import container_encoder

    found = container_encoder(str(target), cfg.output_format, cfg.codec) if is_default_codec(cfg.codec) else None
    if found is None:
        return cfg
    muxer, encoder = found
    log.info(f"{target}: encoding {encoder}, the {muxer} muxer's usual video, in place of libx264 (-c picks "
             "another)")
    return cfg.replace(codec=encoder)


def open_sink(cfg: RunConfig, target, info, audio, low_latency: bool, pix_fmt: str | None = None):
    """The encoder and muxer for ``target`` (a path or a URL); ``pix_fmt`` as :func:`output_choice` chose it."""
    from .sink import Sink

    return Sink(target, info, codec=cfg.codec, options=encoder_options(cfg, info, low_latency), audio=audio,
                output_format=cfg.output_format, output_opts=cfg.output_opts, timeout=cfg.timeout,
                low_latency=low_latency, overwrite=cfg.overwrite, audio_mode=cfg.audio,
                pix_fmt=pix_fmt or cfg.pix_fmt)


def output_choice(cfg: RunConfig, info, null: bool) -> tuple[str, str | None]:
    """(the output layout, the encoder's pixel format): where the output's bit depth is decided. ``--pix-fmt``
    if given, else the input's depth where the encoder takes it, else 8 bits with a notice; ``-o null``
    keeps the input's depth."""
    from .encoders import format_depth, output_format, video_encoder

    if null:  # nothing is encoded, but a name FFmpeg does not know is still a mistake
        if cfg.codec:
            video_encoder(cfg.codec)
        if cfg.pix_fmt:
            format_depth(cfg.pix_fmt)
        return ("i420p10" if info.format.depth > 8 else "i420"), None

    pix_fmt, layout, notice = output_format(video_encoder(cfg.codec), cfg.pix_fmt, info.format.depth)
    if notice:
        log.info(f"{info.name}: {notice}")
    return layout, pix_fmt


def is_null_output(cfg: RunConfig) -> bool:
    """``-o null`` or ``--format null``: process every frame, write nothing (FFmpeg's ``-f null -``)."""
    return cfg.output == "null" or cfg.output_format == "null"


def check_protocols(cfg: RunConfig) -> None:
    """A URL input or output whose protocol the installed FFmpeg lacks (srt:// in PyAV's wheel): exit 2 now,
    before the filters, the GPU or the input are touched."""
    from .protocols import check_protocol

    if cfg.input:
        check_protocol(cfg.input, output=False)
    if cfg.output and not is_null_output(cfg):
        check_protocol(cfg.output, output=True)


@dataclass
class Parts:
    """A run's built parts, ready for :class:`~pipeline.engine.Pipeline`."""

    source: Any
    sink: Any
    chain: list
    backend: Any
    memory: Any = None  # built during set-up, beside the encoder's open (the pipeline then owns it)
    phases: Phases = field(default_factory=Phases)


def build_parts(cfg: RunConfig, stage=None, control=None, source=None,
                wrap_backend: Callable[[Any], Any] | None = None, decoders=None) -> Parts:
    """Every part of a run of ``cfg``; ``control`` stops a live source's open. ``source``: one already
    built (frames from arrays); by default ``cfg.input`` is opened. ``wrap_backend``: given the backend
    once made, the one the run's memory comes from (several inputs, or a batch worker's files, borrow
    shared memory). ``decoders``: a :class:`~pipeline.nvdec.DecoderPool` whose NVDEC decoders the run may
    take and leave for the next (a batch worker's).

    What does not depend on each other runs side by side: the CUDA context (and the kernels' compile or
    load) beside the CPU decoder's open, and the pinned ring and arena beside the encoder's open."""
    phases = Phases()
    check_protocols(cfg)
    chain = make_chain(cfg.filters, cfg.plugins)
    if cfg.preview:
        from .preview import check_display

        check_display()
    null = is_null_output(cfg)
    target = None if null else cfg.output_target()
    if target is not None:
        check_output(cfg.input, target, cfg.overwrite, cfg.output_format)
        cfg = for_muxer(for_sequence(cfg, target), target)
        from .encoders import check_hardware_encoder

        check_hardware_encoder(cfg.codec)
    check_stats_path(cfg.stats_json, cfg.input, target, cfg.overwrite)
    with ThreadPoolExecutor(1, thread_name_prefix="pipeline-setup") as pool:
        source, backend = _source_and_backend(cfg, chain, stage, control, source, phases, pool, decoders)
        try:
            if wrap_backend is not None:
                backend = wrap_backend(backend)
            sink, memory = _sink_and_memory(cfg, chain, stage, source, backend, null, target, phases, pool, control)
        except BaseException:
            source.close()
            raise
    return Parts(source, sink, chain, backend, memory, phases)


def _source_and_backend(cfg, chain, stage, control, source, phases: Phases, pool, decoders=None):
    """The backend (context, kernels) and the source, side by side: NVDEC opens in the GPU's primary
    context through the driver while CuPy imports (:func:`_nvdec_beside_backend`)."""
    gpu_up = "cupy" in sys.modules  # before the set-up thread starts importing it
    if source is None and cfg.decode != "cpu":
        gpu = _early_gpu(cfg.device)
        if gpu is not None:
            return _nvdec_beside_backend(cfg, chain, stage, control, phases, pool, gpu, decoders, gpu_up)
        if cfg.decode == "nvdec":  # no GPU the driver knows: the backend says why (auto decodes on the CPU)
            backend = _backend(cfg, chain, stage, phases, None)
            return _open_source(cfg, control, backend, phases, decoders), backend
    future = pool.submit(_backend, cfg, chain, stage, phases, source.layout if source is not None else "i420")
    try:
        if source is None:
            source = _open_source(cfg, control, None, phases)
    except BaseException:
        _close_result(future)
        raise
    try:
        return source, future.result()
    except BaseException:
        source.close()
        raise


def _early_gpu(device: str):
    """The GPU an NVDEC source can open on before CuPy imports: its primary context through the driver
    (:mod:`pipeline.gpu.driver`); None for the CPU, or where the driver has no such GPU (the backend then
    says why, or runs on the CPU)."""
    from .gpu.driver import EarlyDevice, retain_primary_context

    if device == "cpu":
        return None
    index = device_index(device) or 0
    return EarlyDevice(index) if retain_primary_context(index) else None


def _nvdec_beside_backend(cfg: RunConfig, chain, stage, control, phases: Phases, pool, gpu, decoders=None,
                          gpu_up: bool = False):
    """NVDEC's open and first frame (the decoder in the primary context, made current through the driver)
    while CuPy imports and the backend and kernels are made: the two longest parts of a GPU run's start-up,
    side by side. The kernels wait for the source's layout. A failed backend's error is the one reported:
    it says why the GPU cannot be used, where the decoder's open would only have failed with it."""
    layout: Future = Future()
    future = pool.submit(_backend, cfg, chain, stage, phases, layout)
    try:
        source = _open_source(cfg, control, gpu, phases, decoders, gpu_up)
    except BaseException as e:
        layout.set_result(None)
        if not isinstance(e, (KeyboardInterrupt, Interrupted)):  # a stop request outranks what failed meanwhile
            _raise_failure(future)
        _close_result(future)
        raise
    layout.set_result(source.layout)
    try:
        backend = future.result()
    except BaseException:
        source.close()
        raise
    from .convert import DEVICE_LAYOUTS

    if backend.name != "cuda" and source.layout in DEVICE_LAYOUTS:
        # --device auto without a GPU CuPy can use (not installed, or built for another CUDA): NVDEC's
        # surfaces have no reader. Such a source is never a pipe (see opens_twice): it opens again.
        source.close()
        return _open_source(cfg, control, backend, phases), backend
    return source, backend


def _raise_failure(future: Future) -> None:
    """The background part's own error, where it failed."""
    error = future.exception()
    if error is not None:
        raise error


def _open_source(cfg: RunConfig, control, backend, phases: Phases, decoders=None, gpu_up: bool | None = None):
    stop = control.stop_event if control is not None else None
    signum = (lambda: control.signum) if control is not None else (lambda: None)
    with phases("decoder_open"):
        return open_source(cfg, stop, signum, backend, decoders=decoders, gpu_up=gpu_up)


def timed_backend(cfg: RunConfig, phases: Phases):
    """``cfg``'s backend, its set-up time named for what it made: ``--device auto`` on a machine without a
    GPU makes the CPU backend, no CUDA context."""
    t0 = time.perf_counter()
    backend = make_backend(cfg.device, cfg.alloc, cfg.streams, cfg.decode)
    phases.add("cuda_context" if backend.name == "cuda" else "backend", (time.perf_counter() - t0) * 1e3)
    return backend


def _backend(cfg: RunConfig, chain, stage, phases: Phases, in_layout: str | Future | None):
    """The backend and, given the input's layout (or a future of it: the source opening meanwhile), the
    kernels."""
    backend = timed_backend(cfg, phases)
    if isinstance(in_layout, Future):
        in_layout = in_layout.result()
    if backend.name == "cuda" and in_layout is not None:
        from .processor import prepare_kernels
        from .warmup import notice_if_cold

        notice_if_cold()
        with phases("kernels"):
            prepare_kernels(chain, in_layout, "i420", stage=stage is not None)
    return backend


def _sink_and_memory(cfg, chain, stage, source, backend, null: bool, target, phases: Phases, pool, control=None):
    """The sink, and the run's memory allocated meanwhile (cudaHostAlloc of the ring takes milliseconds
    per slot at 4K: as long as opening an encoder)."""
    from .convert import DEVICE_LAYOUTS
    from .engine import output_info, plan_for

    layout, pix_fmt = output_choice(cfg, source.info, null)
    plan = plan_for(source, chain, backend, layout, stage)
    if backend.name == "cpu":
        check_host_memory(cfg, plan)
    low_latency = source.info.live or cfg.realtime
    # A live source's ring is whole before its first frame; a file's fills as its first frames need it.
    request = plan.request(cfg, host_in=source.layout not in DEVICE_LAYOUTS, lazy_ring=not low_latency)
    future = pool.submit(_memory, backend, request, phases)
    try:
        if null:
            from .adapters import NullSink

            sink = NullSink(layout)
        else:
            check_one_picture(cfg, target, source.info.expected_frames)
            if control is not None:
                control.before_output()
            with phases("encoder_open"):
                sink = open_sink(cfg, target, output_info(source, plan), source.audio, low_latency,
                                 pix_fmt)
    except BaseException:
        _close_result(future)
        raise
    try:
        return sink, future.result()
    except BaseException:
        sink.abort()
        raise


def _memory(backend, request, phases: Phases):
    memory = backend.memory(request)
    for name, ms in memory.setup_ms.items():
        phases.add(name, ms)
    return memory


def _close_result(future) -> None:
    """A part built in the background for a run that failed meanwhile: give it back."""
    _release_leaked_import_lock()
    try:
        part = future.result()
    except BaseException:
        return
    close = getattr(part, "close", None)
    if close is not None:
        close()


def _release_leaked_import_lock() -> None:
    """A Ctrl-C (the API caller's KeyboardInterrupt) raised inside importlib between its acquire of the global
    import lock and the ``try`` that releases it leaves the lock to this thread: the set-up thread's next import
    then waits forever, and so would this thread waiting for it. Outside importlib's own code this thread
    never holds that lock, so what it holds here is such a leak."""
    while True:
        try:
            _imp.release_lock()
        except RuntimeError:  # not held by this thread
            return


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
