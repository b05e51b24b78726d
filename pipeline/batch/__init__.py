"""Batches of files on Dask distributed: ``pipeline batch`` and :func:`run_batch`.

    from pipeline.batch import run_batch

    report = run_batch(["clips/*.mp4"], "out", filters="gblur=sigma=2", workers=2)
    print(report.exit_code, report.totals()["files_per_minute"])

``run_batch`` (``runner.py``) plans the files (``inputs.py``; ``resume.py`` skips complete outputs),
starts or joins a cluster (``cluster.py``: one worker process per GPU, pinned by its environment),
runs one task per file on long-lived workers (``worker.py``) and returns a :class:`BatchReport`
(``report.py``: per-file results, totals, the batch layer's overhead, JSON). Dask is imported only
when a batch runs (the ``batch`` extra installs it).
"""

from __future__ import annotations

from .jobs import FileResult, Job
from .report import BatchReport
from .runner import BatchSettings, StopRequest, execute, run_batch

__all__ = ["BatchReport", "BatchSettings", "FileResult", "Job", "StopRequest", "execute", "run_batch"]
