"""Fixtures and hooks: the `gpu` marker skips without a usable GPU (fails instead when PIPELINE_REQUIRE_GPU=1)."""

from __future__ import annotations

import os

import pytest
from utils import gpu_available

REQUIRE_GPU = os.environ.get("PIPELINE_REQUIRE_GPU") == "1"


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
