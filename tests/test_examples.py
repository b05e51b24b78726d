"""The README's Python API snippets and the examples run as written (on a GPU where there is one)."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest

from utils import ROOT, run_python


def readme_api_snippets() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Python API", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.fixture
def workdir(tmp_path) -> Path:
    """An empty directory holding samples/sample.mp4, as the repository root does."""
    (tmp_path / "samples").mkdir()
    shutil.copy(ROOT / "samples" / "sample.mp4", tmp_path / "samples" / "sample.mp4")
    return tmp_path


def test_the_readme_has_api_snippets():
    assert len(readme_api_snippets()) >= 3


@pytest.mark.parametrize("index", range(len(readme_api_snippets())))
def test_readme_api_snippet_runs(index, workdir):
    result = run_python("-c", readme_api_snippets()[index], cwd=workdir, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), "every snippet prints what it found"


def test_analytics_example(workdir):
    result = run_python(ROOT / "examples" / "analytics.py", "samples/sample.mp4", cwd=workdir, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = result.stdout.strip().splitlines()
    assert rows[0] == "index,time_s,brightness,motion" and len(rows) == 91
    assert float(rows[-1].split(",")[3]) > 0  # the clip moves


def test_custom_source_example(workdir):
    result = run_python(ROOT / "examples" / "custom_source.py", "camera.mp4", cwd=workdir, timeout=300)
    assert result.returncode == 0, result.stderr
    assert (workdir / "camera.mp4").stat().st_size > 0 and "150 frames" in result.stdout


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs PyTorch")
def test_torch_stage_example(workdir):
    result = run_python(ROOT / "examples" / "torch_stage.py", "samples/sample.mp4", "sharp.mp4", cwd=workdir,
                        timeout=300)
    assert result.returncode == 0, result.stderr
    assert "90 frames through torch" in result.stdout and (workdir / "sharp.mp4").exists()
