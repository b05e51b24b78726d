"""What the batch tests share besides their fixtures (conftest.py): the chain, the results' fields, helpers."""

from __future__ import annotations

from pathlib import Path

from pipeline.batch import BatchReport, FileResult

CHAIN = "gblur=sigma=1,eq=contrast=1.1"
FRAMES = 6
FILE_FIELDS = {"input", "output", "status", "exit_code", "error", "frames", "fps", "seconds", "worker", "gpu",
               "warm", "notices", "submitted", "started", "ended", "received", "task_s", "start_gap_s",
               "end_gap_s", "overhead_s", "overhead_fraction", "device_allocs", "pinned_allocs", "decoders_reused"}


def good(clips: Path) -> list[Path]:
    return sorted(clips.glob("clip*.mkv"))


def by_name(report: BatchReport) -> dict[str, FileResult]:
    return {Path(r.input).name: r for r in report.results}


def refused(capsys, code: int, *args: str) -> str:
    """``pipeline batch ARGS`` in this process ends before any cluster starts: ``code`` and one line."""
    from pipeline import cli

    assert cli.main(["batch", "--device", "cpu", "-q", *args]) == code
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("pipeline: error: "), err
    return err
