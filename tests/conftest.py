"""Shared fixtures: devices to run one test body on, and small clips built with PyAV."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

REQUIRE_GPU = os.environ.get("PIPELINE_REQUIRE_GPU") == "1"


def gpu_available() -> bool:
    try:
        import cupy

        return cupy.is_available()
    except Exception:
        return False


def all_devices():
    """One test body on every backend: ``@pytest.mark.parametrize("device", all_devices())``."""
    return ("cpu", pytest.param("cuda", marks=pytest.mark.gpu))


def pytest_collection_modifyitems(config, items):
    if REQUIRE_GPU or gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and CuPy")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_setup(item):
    if REQUIRE_GPU and "gpu" in item.keywords and not gpu_available():
        pytest.fail("PIPELINE_REQUIRE_GPU=1 but no usable CUDA GPU / CuPy", pytrace=False)
