"""What the tests share: the CLI in a child process, what a run leaves behind, clips decoded with PyAV,
and the CPU references that pipeline output and kernels are compared with.

The reference of a whole chain re-does the pipeline's per-frame work with plain arrays (no ring, no arena,
no threads), so a mismatch with a pipeline run points at the plumbing: buffer reuse, aliasing, ordering,
timestamps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from av.sidedata.sidedata import Type

from pipeline.convert import i420_to_rgb_cpu as yuv_to_rgb_cpu
from pipeline.convert import rgb_to_i420_cpu as rgb_to_yuv_cpu
from pipeline.filters import parse_chain
from pipeline.hdr import HdrMetadata
from pipeline.video import LUMA, Colour, VideoFormat

ROOT = Path(__file__).resolve().parents[1]


# --- devices -----------------------------------------------------------------------------------------------


def gpu_available() -> bool:
    """Whether CuPy imports and sees a usable CUDA device."""
    try:
        import cupy

        return cupy.is_available()
    except Exception:
        return False


def all_devices():
    """One test body on every backend: ``@pytest.mark.parametrize("device", all_devices())``."""
    return ("cpu", pytest.param("cuda", marks=pytest.mark.gpu))


# --- child processes ---------------------------------------------------------------------------------------


def python_command(*args) -> list[str]:
    """The argv of ``python ARGS`` with this interpreter, every argument as a string."""
    return [sys.executable, *map(str, args)]


def cli_command(*args) -> list[str]:
    """The argv of ``python -m pipeline ARGS``."""
    return python_command("-m", "pipeline", *args)


def pipeline_command(*args, device: str | None = "cpu", quiet: bool = True) -> list[str]:
    """The argv of ``python -m pipeline run ARGS --device DEVICE -q``; ``device=None`` leaves the device to
    the CLI, ``quiet=False`` keeps its progress output."""
    return cli_command("run", *args, *(["--device", device] if device else []), *(["-q"] if quiet else []))


HANG_REPORT_WAIT_S = 10


def run_command(cmd: list, *, cwd: str | Path | None = None, timeout: float | None = 120,
                input: str | bytes | None = None, env: dict[str, str] | None = None,
                text: bool = True) -> subprocess.CompletedProcess:
    """``cmd`` in a fresh process with its output captured, so a crash shows as a return code and a hang
    as a failure after ``timeout`` seconds that ends with where each of its threads was: a Python child runs
    with faulthandler on and is sent SIGABRT, which makes it print every thread's stack (a hang on the GPU
    machine is then readable from one call's log)."""
    argv = [str(c) for c in cmd]
    env = {**(os.environ if env is None else env), "PYTHONFAULTHANDLER": "1"}
    with subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE if input is not None else None,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=text) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
            hung = False
        except subprocess.TimeoutExpired:
            hung = True
            proc.send_signal(signal.SIGABRT)
            try:
                out, err = proc.communicate(timeout=HANG_REPORT_WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
    if hung:
        tail = err[-6000:] if isinstance(err, str) else (err or b"")[-6000:].decode(errors="replace")
        pytest.fail(f"{' '.join(argv)} did not end in {timeout} s; its stderr ends:\n{tail}", pytrace=False)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def run_python(*args, **options) -> subprocess.CompletedProcess:
    """``python ARGS`` (a script, ``-c CODE``) in a fresh process; ``options`` as for :func:`run_command`."""
    return run_command(python_command(*args), **options)


def run_cli(*args, **options) -> subprocess.CompletedProcess:
    """``python -m pipeline ARGS`` in a fresh process; ``options`` as for :func:`run_command`."""
    return run_command(cli_command(*args), **options)


def run_pipeline(*args, device: str | None = "cpu", quiet: bool = True, timeout: float | None = 60,
                 **options) -> subprocess.CompletedProcess:
    """``python -m pipeline run ARGS --device cpu -q`` in a fresh process (see :func:`pipeline_command`)."""
    return run_command(pipeline_command(*args, device=device, quiet=quiet), timeout=timeout, **options)


def environment(**changes: str) -> dict[str, str]:
    """This process's environment with ``changes``: the ``env`` of a child that needs a few variables set."""
    return {**os.environ, **changes}


def wait_until(condition, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    """Poll ``condition`` until it holds; fail if ``proc`` ends first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"no {what} in {timeout} s"
        time.sleep(0.02)


# --- what a run leaves behind --------------------------------------------------------------------------------


def partials(directory: Path) -> list[Path]:
    """The hidden temporary outputs in ``directory`` (``.NAME.partial-PID.EXT``, or any hidden name holding
    "partial"): a finished or failed run leaves none."""
    return sorted(directory.glob(".*partial*"))


def pipeline_threads() -> list[str]:
    """The names of the pipeline's threads still alive in this process: none once a run has returned."""
    return [t.name for t in threading.enumerate() if t.name.startswith("pipeline-")]


def read_json(path: Path):
    """A JSON file: the ``--stats-json`` of a run, a report."""
    return json.loads(Path(path).read_text())


def one_error(result: subprocess.CompletedProcess, code: int, *words: str) -> str:
    """The contract of every failure: the exit code, exactly one line on stderr, no traceback; the line
    names ``words``. Returns the line."""
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pipeline: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def assert_failed(result: subprocess.CompletedProcess, code: int, out: Path, name: str | None = None) -> None:
    """:func:`one_error` (naming ``name`` if given), and no output left: neither ``out`` nor a partial file."""
    one_error(result, code, *([name] if name is not None else []))
    assert not out.exists()
    assert partials(out.parent) == []


# --- clips decoded with PyAV ---------------------------------------------------------------------------------


@dataclass
class Decoded:
    """A clip as :func:`decode` reads it."""

    frames: list[np.ndarray]  # flat I420 uint8, one per frame
    pts: list[int | None]
    time_base: Fraction | None
    width: int
    height: int
    colorspace: int
    color_range: int
    audio_packets: int


def flip_payload_bytes(src: Path, dst: Path, flips: int, seed: int) -> Path:
    """A copy of an MP4 with ``flips`` bytes of its media data inverted (clear of the headers at both ends)."""
    import random

    data = bytearray(Path(src).read_bytes())
    start, end = data.find(b"mdat") + 5000, data.find(b"moov") - 5000
    rng = random.Random(seed)
    for _ in range(flips):
        data[rng.randrange(start, end)] ^= 0xFF
    Path(dst).write_bytes(bytes(data))
    return Path(dst)


def decode(path: str | Path) -> Decoded:
    """Every video frame as a flat I420 array, plus the facts the pipeline must keep."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = list(container.decode(stream))
    assert frames, f"{path}: no video frames"
    assert all(f.format.name == "yuv420p" for f in frames)
    first = frames[0]
    return Decoded(
        frames=[f.to_ndarray().ravel() for f in frames],  # yuv420p to_ndarray is Y, U, V without padding
        pts=[f.pts for f in frames],
        time_base=first.time_base,
        width=first.width,
        height=first.height,
        colorspace=first.colorspace,
        color_range=first.color_range,
        audio_packets=count_audio_packets(path),
    )


def open_media(source):
    """A container opened for reading from a path or a file object (bytes held in memory)."""
    return av.open(source if hasattr(source, "read") else str(source))


def video_frames(source) -> list[av.VideoFrame]:
    """Every frame of the first video stream."""
    with open_media(source) as container:
        return list(container.decode(video=0))


def frame_times(frames) -> list[Fraction]:
    """The frames' timestamps in seconds."""
    return [Fraction(f.pts) * f.time_base for f in frames]


def video_times(source) -> list[Fraction]:
    """The timestamps, in seconds, of every frame of the first video stream."""
    return frame_times(video_frames(source))


def count_audio_packets(source) -> int:
    """The packets of the first audio stream (0 without one), not counting the demuxer's empty flush packets."""
    with open_media(source) as container:
        if not container.streams.audio:
            return 0
        return sum(1 for p in container.demux(container.streams.audio[0]) if p.dts is not None)


def first_frame(path: Path) -> av.VideoFrame:
    """The first decoded video frame."""
    with av.open(str(path)) as container:
        return next(container.decode(video=0))


def planes10(path: Path) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Every frame's Y, U, V samples (uint16, 0..1023)."""
    out = []
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            assert frame.format.name == "yuv420p10le", frame.format.name
            fmt = VideoFormat(frame.width, frame.height)
            out.append(fmt.planes(frame.to_ndarray().ravel()))
    return out


def hdr_of(path: Path) -> HdrMetadata | None:
    """The HDR10 metadata (mastering display, content light level) on the first frame."""
    f = first_frame(path)
    md, cl = f.side_data.get(Type.MASTERING_DISPLAY_METADATA), f.side_data.get(Type.CONTENT_LIGHT_LEVEL)
    return HdrMetadata.parse(bytes(md) if md is not None else None, bytes(cl) if cl is not None else None)


def remux(src: Path, dst: Path, options: dict | None = None) -> Path:
    """Copy every stream of ``src`` into a new container (chosen by ``dst``'s suffix), no re-encoding."""
    with av.open(str(src)) as i, av.open(str(dst), "w", options=options or {}) as o:
        streams = {s.index: o.add_stream_from_template(s) for s in i.streams}
        for packet in i.demux():
            if packet.dts is not None:
                packet.stream = streams[packet.stream.index]
                o.mux(packet)
    return dst


# --- CPU references and comparisons --------------------------------------------------------------------------


def apply_chain_cpu(i420: np.ndarray, fmt: VideoFormat, filters: str) -> np.ndarray:
    """One frame through yuv->rgb, the chain's CPU references and rgb->yuv, with fresh buffers for everything."""
    rgb = np.full((3, fmt.height, fmt.width), np.nan, np.float32)
    yuv_to_rgb_cpu(i420, fmt, rgb)
    w, h = fmt.width, fmt.height
    for f in parse_chain(filters):
        f.use_colour(fmt.colour)  # as the frame plan binds it
        scratch = [np.full(s, np.nan, np.float32) for s in f.scratch_shapes(w, h)]
        w, h = f.output_size(w, h)
        dst = np.full((3, h, w), np.nan, np.float32)
        f.cpu(rgb, dst, scratch)
        rgb = dst
    out_fmt = fmt.resized(w, h)
    out = np.zeros(out_fmt.nbytes, np.uint8)
    rgb_to_yuv_cpu(rgb, out_fmt, out)
    return out


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> int:
    """The largest difference between two arrays of code values (8 or 10 bits), in code values."""
    return int(np.abs(a.astype(np.int32) - b.astype(np.int32)).max())


def one_filter(spec: str):
    """The one filter a chain of one names: ``one_filter("gblur=sigma=2")``."""
    (f,) = parse_chain(spec)
    return f


# --- kernels on a device -------------------------------------------------------------------------------------

# 190x106: neither side a multiple of the launch blocks (32x8, and 16x8 over the 95x53 chroma grid).
KERNEL_SIZES = [(160, 96), (190, 106)]
COLOURS = [Colour(matrix=m, full_range=r) for m in ("bt601", "bt709", "bt2020") for r in (False, True)]
COLOUR_IDS = [f"{c.matrix}-{'full' if c.full_range else 'limited'}" for c in COLOURS]


def mux_noise(container, stream, count: int, seed: int = 0) -> None:
    """``count`` frames of random RGB into ``stream`` (its own size, as yuv420p), then the encoder's rest."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        rgb = rng.integers(0, 256, (stream.height, stream.width, 3), np.uint8)
        frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
        frame.pts = i
        container.mux(stream.encode(frame))
    container.mux(stream.encode(None))


def noise_rgb(w: int, h: int, seed: int = 0) -> np.ndarray:
    """Planar float RGB, uniform noise in [0, 1)."""
    return np.random.default_rng(seed).random((3, h, w), dtype=np.float32)


def smooth_rgb(w: int, h: int, seed: int = 0, low: float = 0.0, high: float = 1.0) -> np.ndarray:
    """Random but smooth: a coarse random grid upscaled with cubic interpolation, then clipped."""
    coarse = np.random.default_rng(seed).random((3, h // 8 + 2, w // 8 + 2), dtype=np.float32)
    planes = [cv2.resize(p, (w, h), interpolation=cv2.INTER_CUBIC) for p in coarse]
    return np.clip(np.stack(planes) * (high - low) + low, low, high).astype(np.float32)


def image(kind: str, w: int, h: int, seed: int = 0) -> np.ndarray:
    """``noise_rgb`` for kind "noise", else ``smooth_rgb``."""
    return noise_rgb(w, h, seed) if kind == "noise" else smooth_rgb(w, h, seed)


def sentinel_like(shape, dtype) -> np.ndarray:
    """An output buffer a kernel must overwrite: NaN for floats, 0xAB for integers."""
    return np.full(shape, np.nan if np.dtype(dtype).kind == "f" else 0xAB, dtype)


def on_device(device: str, cpu_call, cuda_call, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> list:
    """Run ``cpu_call(*inputs, *outputs)`` or its CUDA twin on copies; return the outputs as NumPy arrays.

    Outputs start as NaN / 0xAB, so a pixel a kernel forgets to write shows up as a mismatch.
    """
    if device == "cpu":
        outs = [o.copy() for o in outputs]
        cpu_call(*[i.copy() for i in inputs], *outs)
        return outs
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        d_in = [cupy.asarray(i) for i in inputs]
        d_out = [cupy.asarray(o) for o in outputs]
        cuda_call(*d_in, *d_out)
        stream.synchronize()
        result = [cupy.asnumpy(o) for o in d_out]
    stream.synchronize()
    return result


def run_filter(device: str, f, src: np.ndarray) -> np.ndarray:
    """One filter on one frame on ``device``, scratch and output starting as sentinels (see :func:`on_device`)."""
    _, h, w = src.shape
    ow, oh = f.output_size(w, h)
    scratch = [sentinel_like(s, np.float32) for s in f.scratch_shapes(w, h)]
    n = len(scratch)

    def call(method):
        return lambda s, *rest: method(s, rest[n], list(rest[:n]))

    outputs = on_device(device, call(f.cpu), call(f.cuda), [src], [*scratch, sentinel_like((3, oh, ow), np.float32)])
    return outputs[-1]


def ycbcr_matrix(colour: Colour) -> np.ndarray:
    """RGB -> (Y', Cb', Cr') in float64, built from the luma weights: Y' = Kr R + Kg G + Kb B,
    Cb' = (B - Y') / (2 - 2 Kb), Cr' = (R - Y') / (2 - 2 Kr)."""
    kr, kg, kb = LUMA[colour.matrix]
    y = np.array([kr, kg, kb])
    cb = (np.array([0, 0, 1.0]) - y) / (2 - 2 * kb)
    cr = (np.array([1.0, 0, 0]) - y) / (2 - 2 * kr)
    return np.stack([y, cb, cr])


def alloc_counter(cupy):
    """A CuPy memory hook counting allocator activity; use it as ``with hook:`` and read ``hook.count``."""

    class AllocCounter(cupy.cuda.MemoryHook):
        """Counts CuPy allocator activity: pool lookups (malloc) and real allocations (alloc)."""

        name = "pipeline_test_alloc_counter"

        def __init__(self):
            self.lock = threading.Lock()
            self.count = 0

        def alloc_preprocess(self, **kwargs):
            with self.lock:
                self.count += 1

        def malloc_preprocess(self, **kwargs):
            with self.lock:
                self.count += 1

    return AllocCounter()
