"""The progress bar on a terminal (frames, fps, ETA); nothing when stderr is not a TTY or with -q."""

from __future__ import annotations

import contextlib

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


@contextlib.contextmanager
def progress_for(pipeline, console: Console, enabled: bool):
    if not enabled:
        yield
        return
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[fps]:>7.1f} fps"), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("processing", total=None, fps=0.0)

        def on_frame(stats):
            if stats.frames_out % 4 == 0 or stats.frames_out == pipeline.total_frames:
                import time

                elapsed = time.perf_counter() - stats.started
                bar.update(task, completed=stats.frames_out, total=pipeline.total_frames,
                           fps=stats.frames_out / elapsed if elapsed > 0 else 0.0)

        pipeline.on_frame = on_frame
        yield
