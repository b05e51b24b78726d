"""Fixtures and hooks: a small clip, pytest's signal handlers kept, and the markers' skips: `slow` unless
-m names it, `gpu` without a usable GPU (failing instead when PIPELINE_REQUIRE_GPU=1)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from utils import gpu_available

from pipeline.sample import make_clip

REQUIRE_GPU = os.environ.get("PIPELINE_REQUIRE_GPU") == "1"


def pytest_collection_modifyitems(config, items):
    skip_slow_unless_selected(config, items)
    skip_gpu_without_one(items)


def skip_slow_unless_selected(config, items) -> None:
    """`slow` tests run only when -m names them (``make test`` deselects them with -m "not slow")."""
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow: select with -m slow")
    for item in items:
        if item.get_closest_marker("slow"):
            item.add_marker(skip)


def skip_gpu_without_one(items) -> None:
    """`gpu` tests skip without a usable GPU, unless PIPELINE_REQUIRE_GPU=1 makes that a failure."""
    if REQUIRE_GPU or gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and CuPy")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_setup(item):
    if REQUIRE_GPU and "gpu" in item.keywords and not gpu_available():
        pytest.fail("PIPELINE_REQUIRE_GPU=1 but no usable CUDA GPU / CuPy", pytrace=False)


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    """64x48, 6 frames, with audio; a test module that needs another clip defines its own ``clip``."""
    return make_clip(tmp_path_factory.mktemp("clip") / "clip.mp4", width=64, height=48, frames=6, audio=True)


@pytest.fixture
def restore_signals():
    """cli.main installs SIGINT/SIGTERM/SIGHUP/SIGQUIT handlers; put pytest's back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)
