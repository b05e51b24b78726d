"""NVDEC: decoding into device memory, read in place by the conversion kernel (GPU machine only).

H.264 decoding is bit-exact, so the NVDEC path must give what the CPU decoder's path gives on the same
clip; the pooled path must allocate nothing per frame, and the decoder's own surface pool must stay
bounded.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from pipeline import sample as make_sample
import pipeline
from utils import decode, hdr_of, max_abs_diff, planes10, read_json, run_cli

pytestmark = pytest.mark.gpu

W, H, FRAMES = 320, 180, 36


@pytest.fixture(scope="module")
def h264(tmp_path_factory) -> Path:
    return make_sample.make_clip(tmp_path_factory.mktemp("nvdec") / "clip.mp4", width=W, height=H, frames=FRAMES,
                                 fps=30, seed=3)


@pytest.fixture(scope="module")
def hevc10(tmp_path_factory) -> Path:
    """10-bit HEVC (Main 10), BT.2020 PQ, with HDR10 metadata: NVDEC gives P010 surfaces."""
    return make_sample.make_clip(tmp_path_factory.mktemp("nvdec") / "hevc10.mkv", width=W, height=H, frames=12,
                                 fps=30, codec="libx265", pix_fmt="yuv420p10le", hdr=True, audio=False, seed=6)


@pytest.fixture(scope="module")
def odd_h264(tmp_path_factory) -> Path:
    return make_sample.make_clip(tmp_path_factory.mktemp("nvdec") / "odd.mkv", width=322, height=182, frames=6,
                                 fps=30, seed=4, audio=False)


def run(clip: Path, out: Path, *args: str) -> dict:
    stats = out.with_suffix(".json")
    proc = run_cli("run", clip, "-o", out, "-q", "--device", "cuda", "-c", "ffv1", "--stats-json", stats, *args)
    assert proc.returncode == 0, proc.stderr
    return read_json(stats)


def test_nvdec_output_matches_the_cpu_decoder(h264, tmp_path):
    cpu = run(h264, tmp_path / "cpu.mkv", "--decode", "cpu")
    gpu = run(h264, tmp_path / "nvdec.mkv", "--decode", "nvdec")
    assert cpu["decode"] == "cpu" and gpu["decode"] == "nvdec"
    a, b = decode(tmp_path / "cpu.mkv"), decode(tmp_path / "nvdec.mkv")
    assert len(a.frames) == len(b.frames) == FRAMES and a.pts == b.pts
    assert a.audio_packets == b.audio_packets > 0
    assert max(max_abs_diff(x, y) for x, y in zip(a.frames, b.frames)) <= 2


def test_nvdec_pooled_allocates_nothing_per_frame_and_the_surface_pool_stays_bounded(h264, tmp_path):
    stats = run(h264, tmp_path / "out.mkv", "--decode", "nvdec")
    m = stats["memory"]
    assert m["device_allocs"] == 1 and stats["steady_device_allocs_per_frame"] == 0
    # the output ring only (nothing is uploaded), filled as the first frames needed it: each slot once
    assert m["host_allocs"] <= 7 and m["host_bytes"] == (m["host_allocs"] + 1) * W * H * 3 // 2
    assert 0 < m["decoder_surfaces"] <= 64, m  # FFmpeg's pool: grown to what is held at once, then reused
    assert m["decoder_surface_bytes"] > 0


def test_nvdec_naive_gives_the_same_frames(h264, tmp_path):
    run(h264, tmp_path / "pool.mkv", "--decode", "nvdec")
    naive = run(h264, tmp_path / "naive.mkv", "--decode", "nvdec", "--naive-alloc")
    assert naive["memory"]["device_allocs"] >= 2 * FRAMES
    a, b = decode(tmp_path / "pool.mkv"), decode(tmp_path / "naive.mkv")
    for x, y in zip(a.frames, b.frames):
        np.testing.assert_array_equal(x, y)


def test_nvdec_odd_size_and_null_output(odd_h264, tmp_path):
    stats = tmp_path / "s.json"
    proc = run_cli("run", odd_h264, "-o", "null", "-q", "--device", "cuda", "--decode", "nvdec", "--stats-json", stats)
    assert proc.returncode == 0, proc.stderr
    data = read_json(stats)
    assert data["frames_out"] == 6 and data["size"] == [322, 182] and data["decode"] == "nvdec"


def test_a_stream_nvdec_cannot_take(tmp_path):
    clip = make_sample.make_clip(tmp_path / "ffv1.mkv", width=64, height=64, frames=3, codec="ffv1", audio=False)
    out = tmp_path / "out.mkv"
    proc = run_cli("run", clip, "-o", out, "-q", "--device", "cuda", "--decode", "nvdec")
    assert proc.returncode == 3, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "NVDEC" in proc.stderr and not out.exists()
    proc = run_cli("run", clip, "-o", out, "-q", "--device", "cuda", "--decode", "auto", "-c", "ffv1")
    assert proc.returncode == 0, proc.stderr
    assert "decoding on the CPU" in proc.stderr and len(decode(out).frames) == 3


def test_frames_api_with_nvdec(h264):
    with pipeline.frames(h264, device="cuda", decode="nvdec", frames=8) as frames:
        arrays = [f.array.get() for f in frames]
    with pipeline.frames(h264, device="cuda", decode="cpu", frames=8) as frames:
        reference = [f.array.get() for f in frames]
    assert len(arrays) == 8
    assert max(max_abs_diff(a, b) for a, b in zip(arrays, reference)) == 0


def test_nvenc_is_refused_on_a_gpu_without_it(h264, tmp_path):
    out = tmp_path / "out.mp4"
    proc = run_cli("run", h264, "-o", out, "-q", "--device", "cuda", "-c", "h264_nvenc")
    if proc.returncode == 0:
        pytest.skip("this GPU has NVENC")
    assert proc.returncode == 2 and "libx264" in proc.stderr and not out.exists()
    assert len(proc.stderr.strip().splitlines()) == 1


def test_10bit_hevc_through_nvdec_matches_the_cpu_decoder_and_keeps_the_hdr_metadata(hevc10, tmp_path):
    """10-bit HEVC decodes into P010 surfaces read in place: the same 10-bit codes as the CPU decoder's path
    within 2 (HEVC decoding is bit-exact; the two conversion kernels may round differently), nothing
    allocated per frame, and the HDR10 metadata carried to the output."""
    chain = "eq=contrast=1.1:saturation=0.8"
    gpu = run(hevc10, tmp_path / "nvdec.mkv", "--decode", "nvdec", "-vf", chain)
    assert gpu["decode"] == "nvdec" and gpu["layouts"]["input"] == "p010" and gpu["pix_fmt"] == "yuv420p10le"
    assert gpu["steady_device_allocs_per_frame"] == 0 and gpu["memory"]["decoder_surfaces"] > 0
    run(hevc10, tmp_path / "cpu.mkv", "--decode", "cpu", "-vf", chain)
    nvdec, cpu = planes10(tmp_path / "nvdec.mkv"), planes10(tmp_path / "cpu.mkv")
    assert len(nvdec) == len(cpu) == 12
    worst = max(int(np.abs(p.astype(np.int32) - q).max()) for x, y in zip(nvdec, cpu) for p, q in zip(x, y))
    assert worst <= 2
    assert max(int(p.max()) for x in nvdec for p in x) > 255  # 10-bit codes, not 8-bit ones in a 16-bit word
    auto = run(hevc10, tmp_path / "auto.mkv", "--decode", "auto", "-vf", chain)
    assert auto["decode"] == "nvdec"
    proc = run_cli("run", hevc10, "-o", tmp_path / "hdr.mkv", "-q", "--device", "cuda", "--decode", "nvdec",
                   "-c", "libx265")
    assert proc.returncode == 0, proc.stderr
    assert hdr_of(tmp_path / "hdr.mkv") == hdr_of(hevc10) is not None


def test_input_deeper_than_10_bits_is_refused_by_nvdec_and_auto_decodes_it_on_the_cpu(tmp_path):
    """HEVC Main 12, which the video engines decode, would come as 16-bit surfaces no kernel reads: exit 3 in
    one line (from the header, or else from the first surface), nothing written; --decode auto decodes it on
    the CPU (kept to 10 bits)."""
    clip = make_sample.make_clip(tmp_path / "in12.mkv", width=64, height=64, frames=3, codec="libx265",
                                 pix_fmt="yuv420p12le", audio=False)
    out = tmp_path / "nvdec.mkv"
    proc = run_cli("run", clip, "-o", out, "-q", "--device", "cuda", "--decode", "nvdec", "-c", "ffv1")
    assert proc.returncode == 3 and not out.exists(), proc.stderr
    assert re.search(r"NVDEC is not used for (12|16)-bit input .*10 bits at most", proc.stderr), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    auto = run(clip, tmp_path / "auto.mkv", "--decode", "auto")
    assert auto["decode"] == "cpu" and auto["pix_fmt"] == "yuv420p10le" and len(planes10(tmp_path / "auto.mkv")) == 3


@pytest.mark.parametrize("alloc", ["pool", "naive"])
def test_surfaces_go_back_to_the_decoder_on_the_decoding_thread(h264, alloc, monkeypatch):
    """Every surface is freed by the thread that decodes (or after decoding ended), never by the thread that
    finished the frame: FFmpeg allocates surfaces holding its pool's lock and may log meanwhile, which takes
    the GIL, so a surface freed elsewhere under the GIL could deadlock the two threads (seen with naive)."""
    import threading

    from pipeline.decode import FrameReturns

    taken, dropped = [], []
    take, drop = FrameReturns.take, FrameReturns.drop

    def counting_take(self, item):
        taken.append(threading.get_ident())
        take(self, item)

    def counting_drop(self):
        dropped.append((threading.get_ident(), len(self._held)))
        drop(self)

    monkeypatch.setattr(FrameReturns, "take", counting_take)
    monkeypatch.setattr(FrameReturns, "drop", counting_drop)
    for _ in range(4):  # the deadlock it prevents came about once in several runs
        taken.clear(), dropped.clear()
        stats = pipeline.run(h264, "null", device="cuda", decode="nvdec", alloc=alloc, in_flight=1, nvdec_sessions=1,
                             quiet=True)
        assert stats["frames_out"] == FRAMES
        assert len(taken) == FRAMES and sum(n for _, n in dropped) == FRAMES
        droppers = {t for t, n in dropped if n}
        assert not droppers & set(taken)


@pytest.fixture(scope="module")
def short_gops(tmp_path_factory) -> Path:
    """Enough GOPs for four sessions: 96 frames, a keyframe every 16, B-frames, audio."""
    return make_sample.make_clip(tmp_path_factory.mktemp("nvdec") / "gops.mp4", width=W, height=H, frames=96,
                                 fps=30, seed=7, options={"g": "16", "bf": "3"})


@pytest.mark.parametrize("open_gop", [False, True], ids=["closed", "open"])
def test_nvdec_sessions_give_the_frames_one_session_gives(tmp_path, open_gop):
    options = {"g": "16", "bf": "3", **({"x264-params": "open-gop=1"} if open_gop else {})}
    clip = make_sample.make_clip(tmp_path / "c.mp4", width=W, height=H, frames=96, fps=30, seed=8, options=options)
    one = run(clip, tmp_path / "one.mkv", "--decode", "nvdec", "--nvdec-sessions", "1")
    four = run(clip, tmp_path / "four.mkv", "--decode", "nvdec", "--nvdec-sessions", "4")
    assert one["decode_sessions"] == 1 and four["decode_sessions"] == 4
    assert four["steady_device_allocs_per_frame"] == 0 and four["memory"]["device_allocs"] == 1
    a, b = decode(tmp_path / "one.mkv"), decode(tmp_path / "four.mkv")
    assert len(a.frames) == len(b.frames) == 96 and a.pts == b.pts and a.audio_packets == b.audio_packets > 0
    for x, y in zip(a.frames, b.frames):
        np.testing.assert_array_equal(x, y)


def test_nvdec_sessions_with_a_span_naive_alloc_and_the_frames_api(short_gops, tmp_path):
    whole = run(short_gops, tmp_path / "whole.mkv", "--decode", "nvdec", "--nvdec-sessions", "1")
    cut = run(short_gops, tmp_path / "cut.mkv", "--decode", "nvdec", "-ss", "0.9", "-t", "1.5", "--naive-alloc")
    assert whole["frames_out"] == 96 and cut["frames_out"] == 45 and cut["decode_sessions"] == 4
    a, b = decode(tmp_path / "whole.mkv"), decode(tmp_path / "cut.mkv")
    for x, y in zip(a.frames[27:72], b.frames):
        np.testing.assert_array_equal(x, y)
    with pipeline.frames(short_gops, device="cuda", decode="nvdec", nvdec_sessions=3) as frames:
        many = [f.array.get() for f in frames]
    with pipeline.frames(short_gops, device="cuda", decode="nvdec", nvdec_sessions=1) as frames:
        reference = [f.array.get() for f in frames]
    assert len(many) == len(reference) == 96
    assert all(np.array_equal(x, y) for x, y in zip(many, reference))


@pytest.mark.parametrize("alloc", ["pool", "naive"])
def test_nvdec_sessions_let_surfaces_go_on_their_own_threads(short_gops, alloc, monkeypatch):
    """With several sessions every surface goes back to its pool on the thread of the session that decoded it
    (or after that session ended), however the pipeline's threads drop their references."""
    import threading

    from pipeline import gops

    released = []
    release = gops._Session._release

    def watched(self):
        before = len(self._alive)
        release(self)
        released.append((threading.current_thread().name, before - len(self._alive)))

    monkeypatch.setattr(gops._Session, "_release", watched)
    for _ in range(4):
        released.clear()
        stats = pipeline.run(short_gops, "null", device="cuda", decode="nvdec", alloc=alloc, in_flight=1,
                             nvdec_sessions=4, quiet=True)
        assert stats["frames_out"] == 96 and stats["decode_sessions"] == 4
        names = {name for name, n in released if n}
        assert names and all(name.startswith("pipeline-nvdec") for name in names)
        assert sum(n for _, n in released) >= 96 - 4 * 8  # the rest went when the sessions stopped


def test_a_command_leaves_the_sessions_decoders_to_its_exit(short_gops):
    """``pipeline run`` ends its process right after the run: the sessions' threads stop, their decoders and
    surfaces are left for the exit to free (cudaFree one by one takes a quarter of a second), and the run
    is complete all the same. Closing such a source later still works."""
    import threading

    from pipeline import engine, teardown
    from pipeline.config import RunConfig

    control = engine.RunControl()
    control.process_ends = True
    cfg = RunConfig(input=str(short_gops), output="null", device="cuda", decode="nvdec", nvdec_sessions=4, quiet=True)
    run = engine.Pipeline.from_config(cfg, control=control)
    stats = run.run()
    source = run.source
    try:
        assert stats.frames_out == 96 and stats.decode_sessions == 4
        assert teardown._LEFT_TO_EXIT[-1] is source and source.frees_slowly
        assert not [t for t in threading.enumerate() if t.name.startswith("pipeline-nvdec") and t.is_alive()]
    finally:
        teardown._LEFT_TO_EXIT.remove(source)
        source.close()
