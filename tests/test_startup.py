"""Start-up order: with NVDEC the decoder opens (and decodes its first frame) while CuPy imports and the
backend and kernels are made; failures there report the error that says most, and close what was built."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from pipeline import build
from pipeline.config import RunConfig
from pipeline.errors import GPUError, InputError
from pipeline.gpu.driver import EarlyDevice
from pipeline.startup import Phases


class FakeSource:
    layout = "nv12"

    def __init__(self):
        self.closed = False

    def close(self):
        self.closed = True


class FakeBackend:
    name = "cuda"
    device_id = 0

    def __init__(self):
        self.closed = False

    def close(self):
        self.closed = True


@pytest.fixture
def kernels(monkeypatch):
    """The layouts kernels were prepared for."""
    prepared = []
    monkeypatch.setattr("pipeline.processor.prepare_kernels", lambda chain, a, b, stage: prepared.append(a))
    monkeypatch.setattr("pipeline.warmup.notice_if_cold", lambda: None)
    return prepared


def beside(monkeypatch, open_source, make_backend):
    monkeypatch.setattr(build, "open_source", lambda cfg, stop, signum, gpu, **_: open_source(gpu))
    monkeypatch.setattr(build, "make_backend", lambda *args: make_backend())
    cfg = RunConfig(input="in.mp4", device="cuda", decode="nvdec")
    with ThreadPoolExecutor(1) as pool:
        return build._nvdec_beside_backend(cfg, [], None, None, Phases(), pool, EarlyDevice(0))


def test_the_decoder_opens_while_the_backend_is_made_and_kernels_get_its_layout(monkeypatch, kernels):
    both = threading.Barrier(2, timeout=5)  # broken (an error) unless the two run at the same time
    source, backend = FakeSource(), FakeBackend()

    def open_source(gpu):
        assert isinstance(gpu, EarlyDevice) and gpu.device_id == 0
        both.wait()
        return source

    def make_backend():
        both.wait()
        assert kernels == []
        return backend

    assert beside(monkeypatch, open_source, make_backend) == (source, backend)
    assert kernels == ["nv12"]


def test_a_backend_that_fails_is_the_error_reported(monkeypatch, kernels):
    def open_source(gpu):
        raise InputError("in.mp4: NVDEC cannot open")

    def make_backend():
        raise GPUError("--device cuda: no usable CUDA device")

    with pytest.raises(GPUError, match="no usable CUDA device"):
        beside(monkeypatch, open_source, make_backend)
    assert kernels == []


def test_a_source_that_fails_closes_the_backend_made_meanwhile(monkeypatch, kernels):
    backend = FakeBackend()

    def open_source(gpu):
        raise InputError("in.mp4: not a video")

    with pytest.raises(InputError, match="not a video"):
        beside(monkeypatch, open_source, lambda: backend)
    assert backend.closed and kernels == []


def test_a_backend_that_fails_closes_the_source(monkeypatch, kernels):
    source = FakeSource()

    def make_backend():
        raise GPUError("creating the GPU clock's stream and events: out of memory")

    with pytest.raises(GPUError, match="out of memory"):
        beside(monkeypatch, lambda gpu: source, make_backend)
    assert source.closed


def test_a_cpu_backend_after_all_reopens_the_input_for_the_cpu_decoder(monkeypatch, kernels):
    """--device auto on a machine whose driver has a GPU that CuPy cannot use (not installed, or built for
    another CUDA): the NVDEC source opened meanwhile is closed and the input decoded on the CPU."""
    opened = []

    class CpuBackend:
        name = "cpu"

    def open_source(gpu):
        opened.append(FakeSource())
        opened[-1].gpu = gpu
        return opened[-1]

    source, backend = beside(monkeypatch, open_source, CpuBackend)
    assert backend.name == "cpu" and len(opened) == 2
    assert opened[0].closed and isinstance(opened[0].gpu, EarlyDevice) and opened[1].gpu is backend
    assert source is opened[1] and kernels == []

    class HostSource(FakeSource):
        layout = "i420"  # decoded on the CPU already (a pipe under auto): kept, never opened twice

    opened.clear()
    source, backend = beside(monkeypatch, lambda gpu: opened.append(HostSource()) or opened[-1], CpuBackend)
    assert len(opened) == 1 and source is opened[0] and not source.closed


def test_no_driver_keeps_the_backend_first_order(monkeypatch):
    from pipeline.gpu import driver

    monkeypatch.setattr(driver, "retain_primary_context", lambda index: False)
    assert build._early_gpu("cuda:1") is None and build._early_gpu("cpu") is None
    monkeypatch.setattr(driver, "retain_primary_context", lambda index: index == 1)
    gpu = build._early_gpu("cuda:1")
    assert isinstance(gpu, EarlyDevice) and gpu.device_id == 1
    assert build._early_gpu("cuda") is None  # GPU 0 is not there


@pytest.mark.parametrize("name, options, twice", [
    ("in.mp4", {}, True),
    ("https://example.com/in.mp4", {}, True),
    ("-", {}, False),
    ("pipe:0", {}, False),
    ("tcp://0.0.0.0:5000?listen=1", {}, False),
    ("tcp://0.0.0.0:5000?timeout=5&listen", {}, False),  # FFmpeg's bare listen is listen=1
    ("tcp://0.0.0.0:5000?listen=0", {}, True),
    ("srt://:9000", {"listen": "1"}, False),
    ("rtsp://camera/stream", {"listen": "0"}, True),
    ("rtmp://0.0.0.0/live/x", {"rtmp_listen": "1"}, False),
    ("rtsp://0.0.0.0:8554/x", {"rtsp_flags": "listen"}, False),
    ("srt://:9000?mode=listener", {}, False),
    ("srt://host:9000?mode=caller", {}, True),
])
def test_auto_tries_nvdec_only_where_the_input_opens_a_second_time(name, options, twice):
    assert build.opens_twice(RunConfig(input=name, input_opts=options)) is twice


def test_auto_decodes_a_pipe_on_the_cpu_without_trying_nvdec(monkeypatch):
    seen = []

    class Source:
        def __init__(self, path, *, hwaccel=None, **kwargs):
            seen.append(hwaccel)

    class Gpu(EarlyDevice):
        def make_current(self):
            pass  # no driver here

    monkeypatch.setattr("pipeline.source.Source", Source)
    build.open_source(RunConfig(input="pipe:0", decode="auto"), backend=Gpu(0))
    build.open_source(RunConfig(input="pipe:0", decode="nvdec"), backend=Gpu(0))
    assert seen[0] is None and seen[1] is not None


class NoContext(EarlyDevice):
    def make_current(self):
        pass  # FFmpeg finds no current context: on the CPU, PyAV refuses the hardware decoder at the open


def test_a_source_closed_before_its_end_is_freed_without_a_collection(tmp_path):
    """A source closed with its decode generator suspended (only probed, stopped early, the CPU fallback of
    a refused NVDEC try) is freed as its last reference goes: the generator, whose frame refers back to
    the source, is ended by close()."""
    import gc
    import weakref

    from pipeline import sample as make_sample

    clip = make_sample.make_clip(tmp_path / "c.mkv", width=64, height=48, frames=8, fps=30, seed=5, codec="ffv1")
    gc.disable()
    try:
        source = build.open_source(RunConfig(input=str(clip), decode="cpu"))
        ref = weakref.ref(source)
        source.close()
        del source
        assert ref() is None
    finally:
        gc.enable()


@pytest.mark.parametrize("gpu", [NoContext(0), EarlyDevice(0)], ids=["no-context", "driver"])
def test_a_decoder_auto_refuses_leaves_no_reference_cycle(tmp_path, gpu):
    """PyAV refuses NVDEC for a codec without it inside the container's constructor, leaving a half-made
    container in a reference cycle with its streams (and the file open), and a source NVDEC refuses at
    its first frame is left in one too; the fallback to the CPU must not leave them for a later
    collection (a batch worker would hold one per such file). With a GPU, "driver" is NVDEC's own refusal."""
    import gc

    from pipeline import sample as make_sample

    clip = make_sample.make_clip(tmp_path / "ffv1.mkv", width=64, height=48, frames=4, fps=30, seed=5, codec="ffv1")

    def once():
        source = build.open_source(RunConfig(input=str(clip), decode="auto"), backend=gpu)
        assert source.layout == "i420"
        source.close()

    once()  # caches filled
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        once()
        found = gc.collect()
        kinds = sorted({type(o).__qualname__ for o in gc.garbage})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert found == 0, kinds


def test_a_fifo_opens_once_whatever_the_input_format(tmp_path):
    fifo = tmp_path / "in.h264"
    os.mkfifo(fifo)
    assert build.opens_twice(RunConfig(input=str(fifo), input_format="h264")) is False
    assert build.opens_twice(RunConfig(input="/dev/zero", input_format="rawvideo")) is False  # a device


def test_a_stop_request_during_the_open_outranks_the_backends_failure(monkeypatch, kernels):
    def open_source(gpu):
        raise KeyboardInterrupt

    def make_backend():
        raise GPUError("--device cuda: no usable CUDA device")

    with pytest.raises(KeyboardInterrupt):
        beside(monkeypatch, open_source, make_backend)


def test_a_source_opened_beside_the_backend_is_closed_when_its_kernels_fail(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    source = FakeSource()
    monkeypatch.setattr(build, "open_source", lambda cfg, stop, signum, backend, **_: source)

    def broken(*args, **kwargs):
        raise GPUError("compiling the kernels: out of memory")

    monkeypatch.setattr(build, "_backend", broken)
    with ThreadPoolExecutor(1) as pool, pytest.raises(GPUError):
        build._source_and_backend(RunConfig(input="in.mp4", decode="cpu"), [], None, None, None, Phases(), pool)
    assert source.closed


def test_a_file_opened_for_nvdec_is_analysed_from_its_headers_and_still_decodes_whole(monkeypatch, tmp_path):
    """Asked for (CuPy up before the run), the stream analysis of an MP4 or Matroska file opened for NVDEC decodes no
    frame on the CPU (its probing decoders skip them: the pixel format stays unknown until NVDEC's first
    frame); the stream's own decoder is not told to skip, so every frame comes out. Not asked for (a fresh
    process), a pipe, and a container that may show streams only in its packets are analysed as before."""
    import av

    from pipeline import sample as make_sample
    from pipeline import opening as src

    clip = make_sample.make_clip(tmp_path / "c.mp4", width=160, height=96, frames=10, fps=30, seed=2)
    ts = make_sample.make_clip(tmp_path / "c.ts", width=160, height=96, frames=10, fps=30, seed=2)
    real_open, given = av.open, []

    def open_without_the_gpu(*args, hwaccel=None, **kwargs):  # this machine has no CUDA: the CPU decoder
        given.append(kwargs.get("options"))
        return real_open(*args, **kwargs)

    monkeypatch.setattr(av, "open", open_without_the_gpu)
    src.open_input(str(clip), None, {}, None, local=True, hwaccel=object()).close()
    container = src.open_input(str(clip), None, {}, None, local=True, hwaccel=object(), headers_only=True)
    video = container.streams.video[0]
    assert given == [None, src.PROBE_HEADERS_ONLY] and video.codec_context.pix_fmt is None
    assert sum(1 for _ in container.decode(video)) == 10
    container.close()
    src.open_input(str(clip), None, {"analyzeduration": "2000000"}, None, local=True, hwaccel=object(),
                    headers_only=True).close()
    assert given[-1] == {"skip_frame": "all"}  # the user's analyzeduration is the one used
    src.open_input(str(ts), None, {}, None, local=True, hwaccel=object(), headers_only=True).close()
    with open(clip, "rb") as f:
        src.open_input(f"pipe:{f.fileno()}", None, {}, None, local=False, hwaccel=object(), headers_only=True).close()
    assert given[-2:] == [None, None]


def test_whether_cupy_was_up_is_decided_before_the_set_up_thread_imports_it(monkeypatch, kernels):
    """NVDEC's headers-only analysis is for runs where CuPy was imported before: the backend, imported
    beside the decoder's open, must not make the open believe it was."""
    import sys

    seen, source, backend = [], FakeSource(), FakeBackend()
    imported = threading.Event()

    def make_backend(*args):
        monkeypatch.setitem(sys.modules, "cupy", object())  # what the real backend's import does
        imported.set()
        return backend

    def open_source(cfg, stop, signum, gpu, decoders=None, gpu_up=None):
        assert imported.wait(5)  # the backend's import has happened by the time the decoder opens
        seen.append(gpu_up)
        return source

    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    monkeypatch.setattr(build, "open_source", open_source)
    monkeypatch.setattr(build, "make_backend", make_backend)
    monkeypatch.setattr(build, "_early_gpu", lambda device: EarlyDevice(0))
    cfg = RunConfig(input="in.mp4", device="cuda", decode="nvdec")
    with ThreadPoolExecutor(1) as pool:
        assert build._source_and_backend(cfg, [], None, None, None, Phases(), pool) == (source, backend)
    assert seen == [False]


def test_warmup_refuses_a_bad_chain_before_looking_for_the_gpu():
    """Exit 2 naming the filter, on any machine: a usage error is not a missing GPU (exit 5)."""
    from utils import run_cli

    proc = run_cli("warmup", "--filters", "gblur=sigma=1,nosuch", timeout=60)
    assert proc.returncode == 2 and "unknown filter 'nosuch'" in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1
