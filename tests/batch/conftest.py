"""The batch tests' fixtures: tiny clips, and one local Dask cluster of two worker processes (``--scheduler``
to it, as a cluster of several machines is joined) that stays up, and its workers warm, for a module."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from batch_helpers import FRAMES

from pipeline import sample as make_sample


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    """Three tiny clips and a file that is no video."""
    folder = tmp_path_factory.mktemp("batch") / "in"
    for i in range(3):
        make_sample.make_clip(folder / f"clip{i}.mkv", width=64, height=64, frames=FRAMES, codec="ffv1",
                              audio=False, seed=i)
    (folder / "bad.mkv").write_bytes(b"not a video" * 100)
    return folder


@pytest.fixture(scope="module")
def scheduler():
    """Two single-threaded worker processes, up for the whole module."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0",
                                  silence_logs=logging.ERROR) as cluster:
        yield cluster.scheduler_address
