"""The progress bar on a terminal (frames, fps, ETA), nothing when stderr is not a TTY or with -q; and
ffmpeg's ``-progress`` report, for programs."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from .checks import check_progress_path
from .config import is_pipe_name, is_url, pipe_fd
from .errors import ConfigError, OutputError
from .log import log
from .stdio import silence


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


class ProgressReport:
    """``-progress URL``: ffmpeg's machine-readable progress, ``key=value`` lines in blocks that end with
    ``progress=continue`` (about once a second) or ``progress=end`` (once, when the run ends).

    ``out_time`` is how much video is written: from the first frame's timestamp to the end of the latest
    one (ffmpeg's ``out_time_ms`` is in microseconds too, and kept for the tools that read it)."""

    PERIOD_S = 1.0

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.frame_s = 0.0  # one frame's duration: the latest frame counts to its end
        self.size: Callable[[], int | None] = lambda: None  # bytes written so far, where they can be counted
        self.last_write = time.perf_counter()
        self.failed = False  # a write failed: the report stops there

    @classmethod
    def open(cls, url: str) -> ProgressReport:
        """The report into ``url``, checked before the run by :func:`check_progress`."""
        return cls(open_progress(url))

    def bind(self, pipeline) -> ProgressReport:
        """The run reported on: its frame rate, and its output file's size as it grows."""
        rate = pipeline.source.info.frame_rate
        self.frame_s = 1 / float(rate) if rate else 0.0
        staged = getattr(pipeline.sink, "staged", None)
        self.size = staged.written_bytes if staged is not None else (lambda: None)  # a stream's are not counted
        return self

    def update(self, stats) -> None:
        now = time.perf_counter()
        if now - self.last_write >= self.PERIOD_S:
            self.last_write = now
            self.write(stats, ended=False)

    def write(self, stats, ended: bool) -> None:
        if self.failed:
            return
        elapsed = time.perf_counter() - stats.started
        out_us = self.out_time_us(stats)
        size = self.size()
        bitrate = f"{size * 8 / out_us * 1e3:.1f}kbits/s" if size is not None and out_us > 0 else "N/A"
        lines = (f"frame={stats.frames_out}", f"fps={stats.frames_out / elapsed if elapsed > 0 else 0.0:.2f}",
                 f"bitrate={bitrate}", f"total_size={size if size is not None else 'N/A'}",
                 f"out_time_us={out_us}", f"out_time_ms={out_us}", f"out_time={clock(out_us)}",
                 "dup_frames=0", f"drop_frames={stats.dropped}",
                 f"speed={out_us / 1e6 / elapsed:.3g}x" if elapsed > 0 else "speed=N/A",
                 f"progress={'end' if ended else 'continue'}")
        try:
            self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()
        except OSError as e:  # a reader that went away must not end the run, nor make the exit flush fail
            self.failed = True
            silence(self.stream)
            if e.errno != errno.EPIPE:  # a full disk is worth a word; a reader leaving is the reader's choice
                log.warning(f"-progress: write failed ({e.strerror or e}); no more progress is written")

    def out_time_us(self, stats) -> int:
        if stats.first_pts_s is None or stats.last_pts_s is None:
            return 0
        return max(0, round((stats.last_pts_s - stats.first_pts_s + self.frame_s) * 1e6))

    def close(self) -> None:
        if self.stream not in (sys.stdout, sys.stderr):
            self.stream.close()


def clock(us: int) -> str:
    """``HH:MM:SS.micro``, as ffmpeg writes ``out_time``."""
    seconds, micro = divmod(us, 1_000_000)
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{micro:06d}"


def check_progress(url: str, writes_stdout: bool, source: str = "", output: Path | str | None = None,
                   stats_json: str | None = None, theirs: Iterable[tuple[Path, str]] = ()) -> None:
    """Refuse, before the run, a ``-progress`` target that is not a file, ``pipe:1`` or ``-`` (stdout), or
    ``pipe:2`` (stderr); stdout when it carries the video; a file that must not be truncated (the input,
    the output, the statistics, or one of ``theirs``: the config file, a plugin, a filter's LUT)."""
    fd = pipe_fd(url, 1)
    if fd is not None:
        if fd == 1 and writes_stdout:
            raise ConfigError(f"-progress {url}: stdout carries the video (-o -); use pipe:2 or a file")
        if fd not in (1, 2):
            raise ConfigError(f"-progress {url}: the pipes are pipe:1 (stdout) and pipe:2 (stderr)")
        if (sys.stdout if fd == 1 else sys.stderr) is None:  # started with it closed (>&-)
            raise ConfigError(f"-progress {url}: {'stdout' if fd == 1 else 'stderr'} is closed; give a file")
        _check_behind_pipe(fd, url, source, output, stats_json, theirs)
        return
    if is_pipe_name(url):
        raise ConfigError(f"-progress {url}: the pipes are pipe:1 (stdout) and pipe:2 (stderr)")
    if is_url(url):
        raise ConfigError(f"-progress {url}: a file, pipe:1 or pipe:2 (URLs are not written to)")
    if writes_stdout and _is_stdout(url):
        raise ConfigError(f"-progress {url}: is stdout, which carries the video (-o -); use pipe:2 or a file")
    check_progress_path(url, source, output, stats_json, theirs)


def _check_behind_pipe(fd: int, url: str, source, output, stats_json, theirs) -> None:
    """The file a descriptor was redirected to (``1<>input.mp4``) is refused as its ``/dev/fd`` name is:
    progress lines must not land in the input, the output or another file of the run."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:  # closed: the writes fail later, into nothing of the user's
        return
    if not stat.S_ISREG(mode):  # a terminal, /dev/null, a pipe: several writers harm nothing there
        return
    name = f"/dev/fd/{fd}"
    try:
        check_progress_path(name, source, output, stats_json, theirs)
    except ConfigError as e:
        raise ConfigError(str(e).replace(name, f"{url} (file descriptor {fd})", 1)) from None


def _is_stdout(path: str) -> bool:
    """``path`` is the file or pipe behind stdout (``/dev/stdout``, ``/proc/self/fd/1``, the file stdout was
    redirected to). A device is not counted: two writers into ``/dev/null`` or a terminal harm nothing."""
    try:
        mine, theirs = os.fstat(1), os.stat(path)
    except (OSError, ValueError):
        return False
    same = (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)
    return same and not stat.S_ISCHR(mine.st_mode)


def open_progress(url: str) -> TextIO:
    """``-progress``'s target, already checked (:func:`check_progress`): a file is truncated here."""
    fd = pipe_fd(url, 1)
    if fd is not None:
        return sys.stdout if fd == 1 else sys.stderr
    from .reportfile import open_report

    try:  # a FIFO no process reads is given up after a while, as for --stats-json
        return open_report(url)
    except OSError as e:
        raise OutputError(f"{url}: cannot write -progress: {e.strerror or e}") from e


@contextlib.contextmanager
def progress_report(pipeline, report: ProgressReport | None):
    """``report`` fed with every frame beside the bar (whose callback it keeps), and a last block at the end."""
    if report is None:
        yield
        return
    report.bind(pipeline)
    shown = pipeline.on_frame

    def on_frame(stats):
        if shown is not None:
            shown(stats)
        report.update(stats)

    pipeline.on_frame = on_frame
    try:
        yield
    finally:
        report.write(pipeline.stats, ended=True)
        report.close()
