"""What the tests share: the CLI in a child process, clips decoded with PyAV, and the CPU reference of a
whole filter chain.

The reference re-does the pipeline's per-frame work with plain arrays (no ring, no arena, no threads), so a
mismatch with a pipeline run points at the plumbing: buffer reuse, aliasing, ordering, timestamps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from pipeline.convert import i420_to_rgb_cpu as yuv_to_rgb_cpu
from pipeline.convert import rgb_to_i420_cpu as rgb_to_yuv_cpu
from pipeline.filters import parse_chain
from pipeline.video import VideoFormat

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


def run_command(cmd: list, *, cwd: str | Path | None = None, timeout: float | None = 120,
                input: str | bytes | None = None, env: dict[str, str] | None = None,
                text: bool = True) -> subprocess.CompletedProcess:
    """``cmd`` in a fresh process with its output captured, so a crash shows as a return code and a hang
    as a ``TimeoutExpired`` after ``timeout`` seconds."""
    return subprocess.run([str(c) for c in cmd], cwd=cwd, input=input, env=env, capture_output=True, text=text,
                          timeout=timeout)


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
    frames: list[np.ndarray]  # flat I420 uint8, one per frame
    pts: list[int | None]
    time_base: Fraction | None
    width: int
    height: int
    colorspace: int
    color_range: int
    audio_packets: int


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
    """The largest difference between two arrays of 8-bit code values, in code values."""
    return int(np.abs(a.astype(np.int16) - b.astype(np.int16)).max())
