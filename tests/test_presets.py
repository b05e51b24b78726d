"""The shipped presets in configs/: each loads as a RunConfig and its filter chain parses; one runs end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import av
import make_sample
import pytest
from conftest import ROOT

from pipeline.config import DEFAULT_FILTERS, build_config, load_toml
from pipeline.filters import fuse_pointwise, parse_chain
from pipeline.video import VideoFormat
from pipeline.processor import FramePlan

PRESETS = sorted((ROOT / "configs").glob("*.toml"))
EXPECTED = {"default", "denoise", "sharpen", "grade", "edges", "stream720p"}


def test_every_expected_preset_is_shipped():
    assert EXPECTED <= {p.stem for p in PRESETS}


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_preset_loads_and_its_chain_parses(path, monkeypatch):
    monkeypatch.chdir(ROOT)  # preset paths (the LUT) are relative to the working directory
    cfg = build_config(load_toml(path), {"input": "in.mp4"})
    chain = parse_chain(cfg.filters)
    assert chain
    plan = FramePlan.build(VideoFormat(1920, 1080), fuse_pointwise(chain))
    assert plan.out_format.width % 2 == 0 and plan.out_format.height % 2 == 0


def test_default_preset_is_the_built_in_default():
    cfg = build_config(load_toml(ROOT / "configs" / "default.toml"), {})
    assert cfg.filters == DEFAULT_FILTERS
    assert (cfg.ring_size, cfg.streams, cfg.in_flight) == (8, 2, 4)


def test_stream720p_preset():
    cfg = build_config(load_toml(ROOT / "configs" / "stream720p.toml"), {})
    assert cfg.encoder_opts == {"preset": "veryfast", "tune": "zerolatency"}
    plan = FramePlan.build(VideoFormat(1920, 1080), parse_chain(cfg.filters))
    assert (plan.out_format.width, plan.out_format.height) == (1280, 720)


@pytest.mark.parametrize("name", ["grade", "denoise"])
def test_preset_end_to_end_on_cpu(name, tmp_path):
    clip = make_sample.make_clip(tmp_path / "in.mp4", width=128, height=72, frames=4, audio=False)
    out = tmp_path / "out.mp4"
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", clip, "-o", out, "--config", Path("configs") / f"{name}.toml",
         "--device", "cpu", "-q"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    with av.open(str(out)) as c:
        frames = list(c.decode(video=0))
    assert len(frames) == 4 and (frames[0].width, frames[0].height) == (128, 72)
