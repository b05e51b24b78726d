"""A batch's outcome: per-file results, totals, the batch layer's overhead, the exit code and JSON."""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..reportfile import write_report
from .jobs import STATUSES, FileResult

JSON_VERSION = 1


@dataclass
class BatchReport:
    results: list[FileResult]
    started: float = field(default_factory=time.time)  # client clock; result times are relative to it
    wall_s: float = 0.0
    signum: int | None = None  # the signal that stopped the batch
    workers: list[dict[str, str]] = field(default_factory=list)  # name, address, gpu
    settings: dict[str, Any] = field(default_factory=dict)

    def finish(self) -> None:
        self.wall_s = time.time() - self.started
        measure_overhead(self.results)

    @property
    def exit_code(self) -> int:
        """The signal's code when stopped (130, 143), else the largest of the files' codes (0: all fine)."""
        if self.signum is not None:
            return 128 + self.signum
        return max((r.exit_code for r in self.results), default=0)

    def counts(self) -> dict[str, int]:
        counted = Counter(r.status for r in self.results)
        return {status: counted.get(status, 0) for status in STATUSES}

    def totals(self) -> dict[str, Any]:
        counts = self.counts()
        ran = [r for r in self.results if r.status == "done" and r.overhead_s is not None]
        run_s = sum(r.seconds for r in ran)
        overhead_s = sum(r.overhead_s for r in ran)
        minutes = self.wall_s / 60
        return {
            "files": len(self.results),
            **counts,  # per status: done, skipped, failed (on its own), interrupted, cancelled (Ctrl-C)
            "frames": sum(r.frames for r in self.results),
            "wall_s": round(self.wall_s, 3),
            "files_per_minute": round(counts["done"] / minutes, 2) if minutes > 0 else 0.0,
            "run_s": round(run_s, 4),  # as overhead_s: their ratio is overhead_fraction, short runs too
            "overhead_s": round(overhead_s, 4),
            "overhead_fraction": round(overhead_s / run_s, 5) if run_s > 0 else None,
            "overhead_fraction_max": max((r.overhead_fraction for r in ran), default=None),
            "exit_code": self.exit_code,
        }

    def to_dict(self) -> dict[str, Any]:
        return {"version": JSON_VERSION, "batch": {**self.settings, "workers": self.workers},
                "totals": self.totals(), "files": [r.to_dict() for r in self.results]}

    def write_json(self, path: str | Path, exclusive: bool = False) -> None:
        """``exclusive``: fail (FileExistsError) rather than replace a file that exists by now; a FIFO or
        a device is written into either way."""
        write_report(path, json.dumps(self.to_dict(), indent=2) + "\n", exclusive)


def measure_overhead(results: list[FileResult]) -> None:
    """Fill each processed file's gaps (seconds, on the client's clock):

    - ``start_gap_s``: from the moment the file was submitted *and* its worker was free (its previous
      task had ended) to the task starting; waiting for a busy worker is queueing, not overhead;
    - the task's own time outside the run (``task_s - seconds``: marker, set-up);
    - ``end_gap_s``: from the task's end to the client holding the result.

    ``overhead_fraction`` is their sum over the file's run time."""
    by_worker: dict[str, list[FileResult]] = defaultdict(list)
    for r in results:
        if r.started is not None and r.submitted is not None:
            by_worker[r.address].append(r)
    for runs in by_worker.values():
        runs.sort(key=lambda r: r.started)
        free_at = None
        for r in runs:
            ready = r.submitted if free_at is None else max(r.submitted, free_at)
            r.start_gap_s = round(max(0.0, r.started - ready), 5)
            r.end_gap_s = round(max(0.0, r.received - r.ended), 5) if r.received is not None else None
            inside = max(0.0, r.task_s - r.seconds)
            r.overhead_s = round(r.start_gap_s + inside + (r.end_gap_s or 0.0), 5)
            r.overhead_fraction = round(r.overhead_s / r.seconds, 5) if r.seconds > 0 else None
            free_at = r.ended


def table(report: BatchReport):
    """The results table: one row per file, in the order given."""
    from rich.table import Table
    from rich.text import Text

    from ..log import one_line, printable

    t = Table(title="batch", title_justify="left")
    for name, justify in (("input", "left"), ("output", "left"), ("frames", "right"), ("fps", "right"),
                          ("seconds", "right"), ("worker", "left"), ("exit", "right"), ("error", "left")):
        t.add_column(name, justify=justify, overflow="fold")
    for r in report.results:
        error = r.error.removeprefix(f"{r.input}: ") or ("complete output kept" if r.status == "skipped" else "")
        # Names and messages as Text: rich would read "[cuda12]" in an error, or "[x].mp4", as markup.
        # One line each, control characters escaped: an ESC in a file name would drive the terminal.
        t.add_row(Text(printable(Path(r.input).name)), Text(printable(_output_name(r))),
                  str(r.frames) if r.status == "done" else "",
                  f"{r.fps:.1f}" if r.status == "done" else "", f"{r.seconds:.2f}" if r.seconds else "",
                  Text(f"{r.worker} {r.gpu}".strip()), str(r.exit_code),
                  Text(one_line(f"{r.status}: {error}" if error else r.status)))
    return t


def _output_name(r: FileResult) -> str:
    return Path(r.output).name if r.output else "null"


def summary_line(report: BatchReport) -> str:
    t = report.totals()
    parts = [f"{t['files']} files: {t['done']} done"] + [f"{t[s]} {s}" for s in STATUSES[1:] if t[s] or s == "failed"]
    line = ", ".join(parts) + f" in {t['wall_s']:.1f} s ({t['files_per_minute']:.1f} files/min)"
    if t["overhead_fraction"] is not None:
        line += f"; batch overhead {100 * t['overhead_fraction']:.2f}% of run time"
    return line + f"; exit {report.exit_code}"
