"""What the test_hostile_*.py files share: a small clip, and the contract every failure holds (one line on
stderr, the documented exit code, no traceback, nothing left behind)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pipeline.sample import make_clip


def partials(directory: Path) -> list[Path]:
    return sorted(directory.glob(".*.partial-*"))


def one_error(result, code: int, *words: str) -> str:
    """The contract: the exit code, exactly one line, no traceback; the line names ``words``."""
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pipeline: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    return make_clip(tmp_path_factory.mktemp("hostile") / "clip.mp4", width=64, height=48, frames=6, audio=True)


@pytest.fixture
def restore_signals():
    """cli.main installs SIGINT/SIGTERM handlers; put pytest's back."""
    import signal

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)
