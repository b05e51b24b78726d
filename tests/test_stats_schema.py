"""--stats-json: a versioned layout with ASCII keys, every key documented in docs/stats-schema.md."""

from __future__ import annotations

import re

from utils import ROOT, read_json

from pipeline import Pipeline
from pipeline.config import build_config
from pipeline.sample import make_clip
from pipeline.stats import SCHEMA_VERSION

DOC = ROOT / "docs" / "stats-schema.md"


def _keys(value):
    """Every key in the object, at any depth (the per-frame series are lists of numbers, not walked)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield key
            yield from _keys(inner)


def test_stats_json_is_versioned_ascii_and_documented(tmp_path):
    clip = make_clip(tmp_path / "in.mp4", width=96, height=64, frames=4, audio=False)
    stats_path = tmp_path / "stats.json"
    cfg = build_config({}, {"input": str(clip), "output": str(tmp_path / "out.mp4"), "device": "cpu",
                            "realtime": True, "latency_budget": 1000.0, "stats_json": str(stats_path)})
    Pipeline.from_config(cfg).run().write_json(stats_path)
    stats = read_json(stats_path)
    odd = sorted(k for k in _keys(stats) if not re.fullmatch(r"[a-z0-9_]+", k))
    assert not odd, f"keys that are not plain snake_case ASCII: {odd}"
    assert stats["schema_version"] == SCHEMA_VERSION == 1
    assert {"decode", "submit", "encode"} <= set(stats["queues"])  # a paced run: all three queues
    assert stats["latency_hops_ms"]["end_to_end"]["count"] == 4

    documented = set(re.findall(r"`([a-z0-9_]+)`", DOC.read_text()))
    missing = sorted(set(_keys(stats)) - documented)
    assert not missing, f"keys missing from {DOC.name}: {missing}"


def test_stats_json_of_several_inputs_is_documented(tmp_path):
    from pipeline.many import configs_for, run_many
    from pipeline.config import RunConfig

    clip = make_clip(tmp_path / "in.mp4", width=96, height=64, frames=4, audio=False)
    result = run_many(configs_for(RunConfig(device="cpu", quiet=True), [str(clip), str(clip)], "null"))
    result.write_json(tmp_path / "many.json")
    stats = read_json(tmp_path / "many.json")
    keys = set(_keys(stats))
    keys |= {k.split("_", 1)[1] for k in stats["totals"]["shared"]}  # documented as arena_<key>, pinned_<key>
    keys -= set(stats["totals"]["shared"])
    documented = set(re.findall(r"`([a-z0-9_]+)`", DOC.read_text()))
    missing = sorted(keys - documented)
    assert not missing, f"keys missing from {DOC.name}: {missing}"
    assert stats["schema_version"] == 1 and stats["totals"]["streams"] == 2


def test_per_frame_rows_are_in_frame_order_where_the_encoder_reorders(tmp_path):
    """Rows were recorded as packets came: with B-frames, index 0, 4, 2, 1, 3, ..."""
    clip = make_clip(tmp_path / "in.mp4", width=96, height=64, frames=24, audio=False)
    stats_path = tmp_path / "stats.json"
    cfg = build_config({}, {"input": str(clip), "output": str(tmp_path / "out.mp4"), "device": "cpu",
                            "stats_json": str(stats_path)})
    Pipeline.from_config(cfg).run().write_json(stats_path)
    rows = read_json(stats_path)["per_frame"]
    assert rows["index"] == list(range(24))
    assert rows["pts_s"] == sorted(rows["pts_s"]) and len(set(rows["pts_s"])) == 24
    assert rows["decoded"] == sorted(rows["decoded"])
