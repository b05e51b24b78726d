"""The presets shipped in the package: each loads by name from any directory and its filter chain parses;
paths in a config are relative to the config file; two run end to end."""

from __future__ import annotations

from pathlib import Path

import pytest
from utils import run_cli, video_frames

from pipeline import sample
from pipeline.config import DEFAULT_FILTERS, build_config
from pipeline.config_file import PRESETS_DIR, find_config, load_toml, preset_names
from pipeline.errors import ConfigError
from pipeline.filters import fuse_pointwise, parse_chain
from pipeline.video import VideoFormat
from pipeline.processor import FramePlan

EXPECTED = {"default", "denoise", "sharpen", "grade", "edges", "stream720p", "realtime"}
WARM_LUT = PRESETS_DIR / "luts" / "warm.cube"


def test_every_expected_preset_is_shipped():
    assert EXPECTED <= set(preset_names())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_preset_loads_by_name_from_anywhere_and_its_chain_parses(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = build_config(load_toml(name), {"input": "in.mp4"})
    chain = parse_chain(cfg.filters)
    assert chain
    plan = FramePlan.build(VideoFormat(1920, 1080), fuse_pointwise(chain))
    assert plan.out_format.width % 2 == 0 and plan.out_format.height % 2 == 0


def test_default_preset_is_the_built_in_default():
    cfg = build_config(load_toml("default"), {})
    assert cfg.filters == DEFAULT_FILTERS
    assert (cfg.ring_size, cfg.streams, cfg.in_flight) == (8, 2, 4)


def test_stream720p_preset():
    cfg = build_config(load_toml("stream720p"), {})
    assert cfg.encoder_opts == {"preset": "veryfast", "tune": "zerolatency"}
    plan = FramePlan.build(VideoFormat(1920, 1080), parse_chain(cfg.filters))
    assert (plan.out_format.width, plan.out_format.height) == (1280, 720)


def test_names_and_paths():
    assert find_config("grade") == PRESETS_DIR / "grade.toml"
    assert find_config("my.toml") == Path("my.toml")  # .toml: a path, even without a '/'
    assert find_config("configs/grade") == Path("configs/grade")  # a '/': a path
    with pytest.raises(ConfigError, match=r"unknown preset 'nope'.*denoise.*\./nope\.toml"):
        find_config("nope")


def test_lut_in_a_preset_is_found_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for given in ("grade", PRESETS_DIR / "grade.toml", str(PRESETS_DIR / "grade.toml")):
        (lut, *_) = parse_chain(load_toml(given)["filters"])
        assert Path(lut.file) == WARM_LUT and lut.lut.size == 17


def test_paths_in_a_config_are_relative_to_it(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    (conf / "luts").mkdir(parents=True)
    (conf / "luts" / "mine.cube").write_bytes(WARM_LUT.read_bytes())
    (conf / "plug.py").write_text("")
    (conf / "look.toml").write_text('filters = "hue=10,lut3d=luts/mine.cube:,eq=contrast=1.1"\n'
                                    'plugins = ["plug.py", "/abs/other.py"]\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    values = load_toml("../conf/look.toml")
    assert values["filters"] == f"hue=10,lut3d={conf / 'luts' / 'mine.cube'}:,eq=contrast=1.1"
    assert values["plugins"] == (str(conf / "plug.py"), "/abs/other.py")
    assert parse_chain(values["filters"])[1].lut.size == 17


def test_absolute_and_unknown_filter_paths_are_kept(tmp_path):
    path = tmp_path / "a.toml"
    path.write_text(f'filters = "lut3d=file={WARM_LUT},nosuch=file=x.cube"\n')
    assert load_toml(path)["filters"] == f"lut3d=file={WARM_LUT},nosuch=file=x.cube"


def test_presets_command_lists_them(tmp_path):
    result = run_cli("presets", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for name in EXPECTED:
        assert name in result.stdout
    help_text = run_cli("run", "--help", cwd=tmp_path).stdout
    assert all(name in help_text for name in EXPECTED)


def test_unknown_preset_exits_2_with_one_line(tmp_path):
    result = run_cli("run", "in.mp4", "--config", "nope", cwd=tmp_path)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "denoise" in result.stderr


@pytest.mark.parametrize("given", ["grade", "denoise", "absolute"])
def test_preset_end_to_end_on_cpu_from_another_directory(given, tmp_path):
    clip = sample.make_clip(tmp_path / "in.mp4", width=128, height=72, frames=4, audio=False)
    out = tmp_path / "out.mp4"
    config = str(PRESETS_DIR / "grade.toml") if given == "absolute" else given
    result = run_cli("run", clip, "-o", out, "--config", config, "--device", "cpu", "-q", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    frames = video_frames(out)
    assert len(frames) == 4 and (frames[0].width, frames[0].height) == (128, 72)
