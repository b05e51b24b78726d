"""Hostile files and names: outputs that would destroy something (the input, a device, a file another run
wrote meanwhile), names FFmpeg would misread or the filesystem refuse, set-up files that never end, FIFOs.

Each case holds the contract: one line on stderr, the documented exit code, no traceback, nothing left
behind. The CLI runs as a subprocess wherever the case can be built from outside (test_reliability.py's
style); a file appearing mid-run is made in-process, from the engine's per-frame hook.
"""

from __future__ import annotations

import contextlib
import os
import json
import subprocess
import time
from pathlib import Path

import pytest
from utils import one_error, partials, pipeline_command, run_pipeline, run_python, video_frames, wait_until
from pipeline.sample import make_clip


# -- 1. --stats-json is an output too ---------------------------------------------------------------------


@pytest.mark.parametrize("which", ["input", "output", "output-hardlink"])
def test_stats_json_never_overwrites_the_input_or_the_output(tmp_path, clip, which):
    src = tmp_path / "in.mp4"
    src.write_bytes(clip.read_bytes())
    out = tmp_path / "out.mp4"
    stats = {"input": src, "output": out, "output-hardlink": tmp_path / "link.mp4"}[which]
    if which == "output-hardlink":
        out.write_bytes(b"old output")
        stats.hardlink_to(out)
    result = run_pipeline(src, "-o", out, "-y", "--stats-json", stats, cwd=tmp_path)
    one_error(result, 2, "--stats-json is the", which.split("-")[0])
    assert src.read_bytes() == clip.read_bytes()
    assert partials(tmp_path) == []


def test_existing_stats_json_needs_overwrite(tmp_path, clip):
    stats = tmp_path / "s.json"
    stats.write_text("precious")
    out = tmp_path / "out.mp4"
    one_error(run_pipeline(clip, "-o", out, "--stats-json", stats, cwd=tmp_path), 2, "already exists", "-y")
    assert stats.read_text() == "precious" and not out.exists()
    result = run_pipeline(clip, "-o", out, "-y", "--stats-json", stats, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert '"frames_out"' in stats.read_text()


def test_stats_json_appearing_during_the_run_is_kept(tmp_path, clip, monkeypatch, capsys, restore_signals):
    from pipeline import cli, engine

    stats = tmp_path / "s.json"
    real_init = engine.Pipeline.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.on_frame = lambda s: stats.exists() or stats.write_text("another run's")

    monkeypatch.setattr(engine.Pipeline, "__init__", init)
    code = cli.main(["run", str(clip), "-o", str(tmp_path / "out.mp4"), "--device", "cpu", "-q",
                     "--stats-json", str(stats)])
    err = capsys.readouterr().err
    assert code == 2 and "appeared during the run" in err and len(err.strip().splitlines()) == 1
    assert stats.read_text() == "another run's"


# -- 2. outputs that are not regular files -------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "device-link"])
@pytest.mark.parametrize("overwrite", [False, True], ids=["no-y", "y"])
def test_a_fifo_or_device_output_is_never_replaced(tmp_path, clip, kind, overwrite):
    import os
    import stat

    out = tmp_path / "out.mp4"
    if kind == "fifo":
        os.mkfifo(out)
    else:  # a link to /dev/null: were it replaced, the link would go, never /dev/null itself
        out.symlink_to("/dev/null")
    result = run_pipeline(clip, "-o", out, "--format", "mp4", *(["-y"] * overwrite), cwd=tmp_path)
    one_error(result, 4, "not a regular file", "-o - -f FMT writes into a pipe")
    mode = os.stat(out).st_mode
    assert stat.S_ISFIFO(mode) if kind == "fifo" else stat.S_ISCHR(mode)
    assert partials(tmp_path) == []


@pytest.mark.parametrize("chain", [1, 2], ids=["link", "link-to-link"])
def test_a_link_output_replaces_the_file_it_points_to_and_stays_a_link(tmp_path, clip, chain):
    """As ffmpeg writes through a link: the temporary file goes beside the file linked to, and is renamed
    onto it, not onto the link."""
    real = tmp_path / "real" / "target.mp4"
    real.parent.mkdir()
    real.write_bytes(b"old output")
    out = tmp_path / "out.mp4"
    out.symlink_to(Path("real") / "target.mp4")  # relative, as ln -s makes them
    if chain == 2:
        (tmp_path / "chain.mp4").symlink_to("out.mp4")
        out = tmp_path / "chain.mp4"
    one_error(run_pipeline(clip, "-o", out, cwd=tmp_path), 2, "already exists")
    assert real.read_bytes() == b"old output"
    result = run_pipeline(clip, "-o", out, "-y", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert out.is_symlink() and (tmp_path / "out.mp4").is_symlink()
    assert len(video_frames(real)) == len(video_frames(clip))
    assert partials(tmp_path) == partials(real.parent) == []


def test_a_dangling_link_output_creates_the_file_it_names(tmp_path, clip):
    out = tmp_path / "out.mp4"
    out.symlink_to("made.mp4")
    result = run_pipeline(clip, "-o", out, cwd=tmp_path)  # nothing exists yet: no -y needed
    assert result.returncode == 0, result.stderr
    assert out.is_symlink() and len(video_frames(tmp_path / "made.mp4")) == len(video_frames(clip))
    (tmp_path / "gone.mp4").symlink_to(Path("missing") / "x.mp4")
    one_error(run_pipeline(clip, "-o", tmp_path / "gone.mp4", "-y", cwd=tmp_path), 4, "does not exist", "link")
    assert (tmp_path / "gone.mp4").is_symlink() and partials(tmp_path) == []


def test_a_link_loop_output_exits_4_and_stays(tmp_path, clip):
    (tmp_path / "a.mp4").symlink_to("b.mp4")
    (tmp_path / "b.mp4").symlink_to("a.mp4")
    one_error(run_pipeline(clip, "-o", tmp_path / "a.mp4", "-y", cwd=tmp_path), 4, "cannot be followed")
    assert (tmp_path / "a.mp4").is_symlink() and partials(tmp_path) == []


@pytest.mark.parametrize("name, fmt", [("out.m3u8", None), ("OUT.MPD", None), ("seg%03d.ts", "segment"),
                                       ("out.ts", "hls"), ("out.mkv", "tee"), ("-", "hls"), ("pipe:1", "dash"),
                                       ("out.mkv", "HLS"), ("-", "Dash")])  # FFmpeg's names in any case
def test_a_muxer_that_writes_several_files_is_refused_before_any_is_written(tmp_path, clip, name, fmt):
    """The output is written under a temporary name and renamed whole; a playlist's segments never would be
    (they were left as hidden temporary files, and ``segment`` lost its output at the rename)."""
    before = sorted(p.name for p in tmp_path.iterdir())
    args = ("-f", fmt) if fmt else ()
    output = name if name in ("-", "pipe:1") else tmp_path / name  # a pipe carries one stream
    one_error(run_pipeline(clip, "-o", output, *args, "-y", cwd=tmp_path), 2, "writes several files")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("name, fmt", [("out.mkv", "fifo"), ("-", "fifo"), ("udp://127.0.0.1:9", "fifo"),
                                       ("out.mkv", "FIFO")])
def test_the_fifo_muxer_is_refused_in_its_own_words(tmp_path, clip, name, fmt):
    """It takes any stream (it forwards to another muxer): it was refused as 'cannot hold libx264 video'."""
    output = name if "." not in name or "://" in name else tmp_path / name
    one_error(run_pipeline(clip, "-o", output, "-f", fmt, cwd=tmp_path), 2, "fifo muxer (a queue in front",
              "-f matroska")
    assert list(tmp_path.iterdir()) == []


# -- 3. the final rename never replaces a file that appeared during the run ---------------------------------


def test_two_runs_into_one_output_without_y_one_wins_one_exits_2(tmp_path, clip):
    out = tmp_path / "out.mp4"
    cmd = pipeline_command(clip, "-o", out, "--filters", "gblur=sigma=6,gblur=sigma=6")
    procs = [subprocess.Popen(cmd, cwd=tmp_path, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=60), p.stderr.read()) for p in procs]
    assert sorted(code for code, _ in results) == [0, 2], results
    loser = next(err for code, err in results if code == 2)
    assert "already exists" in loser or "appeared during the run" in loser
    assert partials(tmp_path) == []


@pytest.mark.parametrize("overwrite", [False, True], ids=["no-y", "y"])
def test_an_output_appearing_during_the_run_is_kept_without_y(tmp_path, clip, monkeypatch, capsys,
                                                              restore_signals, overwrite):
    from pipeline import cli, engine

    out = tmp_path / "out.mp4"
    real_init = engine.Pipeline.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.on_frame = lambda s: out.exists() or out.write_bytes(b"the other run's")

    monkeypatch.setattr(engine.Pipeline, "__init__", init)
    code = cli.main(["run", str(clip), "-o", str(out), "--device", "cpu", "-q"] + ["-y"] * overwrite)
    err = capsys.readouterr().err
    if overwrite:
        assert code == 0, err
        assert out.read_bytes() != b"the other run's"
    else:
        assert code == 2 and "appeared during the run" in err and len(err.strip().splitlines()) == 1
        assert out.read_bytes() == b"the other run's"
    assert partials(tmp_path) == []


@pytest.mark.parametrize("then", ["finished", "refused"])
def test_an_output_directory_moved_during_the_run_gets_the_output_there(tmp_path, clip, monkeypatch, capsys,
                                                                       restore_signals, then):
    """As ffmpeg's output file moves with its directory, the finished output lands in the moved directory
    under its name, with a warning saying where; a run that fails there leaves no temporary file in it."""
    from pipeline import cli, engine

    first, moved = tmp_path / "first", tmp_path / "moved"
    first.mkdir()
    real_init = engine.Pipeline.__init__

    def move_once(stats):
        if first.exists():
            first.rename(moved)
            if then == "refused":  # another run writes the name there meanwhile
                (moved / "out.mp4").write_bytes(b"the other run's")

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.on_frame = move_once

    monkeypatch.setattr(engine.Pipeline, "__init__", init)
    code = cli.main(["run", str(clip), "-o", str(first / "out.mp4"), "--device", "cpu", "-q"])
    err = capsys.readouterr().err
    assert not first.exists() and partials(moved) == []
    if then == "finished":
        assert code == 0, err
        assert f"its directory was moved during the run; the output was written in it, now {moved / 'out.mp4'}" in err
        assert len(video_frames(moved / "out.mp4")) == len(video_frames(clip))
    else:
        assert code == 2 and "appeared during the run" in err and len(err.strip().splitlines()) == 1, err
        assert (moved / "out.mp4").read_bytes() == b"the other run's"


def test_no_run_keeps_its_output_directory_open(tmp_path, clip, monkeypatch):
    """The directory held for the output is let go however the run ends: finished, refused at the final
    rename, failed in a stage, refused by the encoder at its open, failed making its temporary file (an
    application's runs must not gather descriptors)."""
    import os

    import pipeline
    from pipeline import outfile
    from pipeline.errors import PipelineError

    def held() -> int:
        return sum(1 for fd in os.listdir("/proc/self/fd") if _points_to(fd, tmp_path))

    def stage(frame):
        raise RuntimeError("a stage that fails")

    def late(frame):  # the target appears during the run: the final rename refuses to replace it
        late_target.touch()

    out, late_target = tmp_path / "out.mp4", tmp_path / "late.mp4"
    pipeline.run(clip, out, device="cpu")
    with pytest.raises(PipelineError, match="exists"):  # refused before the run
        pipeline.run(clip, out, device="cpu")
    with pytest.raises(PipelineError, match="appeared during the run"):
        pipeline.run(clip, late_target, device="cpu", stage=late)
    for extra, said in (({"stage": stage}, "a stage that fails"), ({"encoder_opts": {"crf": "nope"}}, "crf")):
        with pytest.raises(PipelineError, match=said):
            pipeline.run(clip, tmp_path / "other.mp4", device="cpu", **extra)
    assert held() == 0 and partials(tmp_path) == []
    monkeypatch.setattr(outfile, "create_like", _raise_enospc)  # the temporary file cannot be made
    with pytest.raises(PipelineError, match="No space left"):
        pipeline.run(clip, tmp_path / "full.mp4", device="cpu")
    assert held() == 0 and partials(tmp_path) == []


def _raise_enospc(*args):
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")


def _points_to(fd: str, directory: Path) -> bool:
    import os

    try:
        return os.readlink(f"/proc/self/fd/{fd}") == str(directory)
    except OSError:
        return False


@pytest.mark.parametrize("mode", [0o664, 0o600, 0o755])
def test_a_replaced_output_keeps_its_permissions(tmp_path, clip, mode):
    """-y replaces the file by a rename: the new one takes the old one's permissions, as ffmpeg's rewrite in
    place keeps them."""
    out = tmp_path / "out.mp4"
    out.write_bytes(b"old output")
    out.chmod(mode)
    result = run_pipeline(clip, "-o", out, "-y", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert out.stat().st_mode & 0o777 == mode and len(video_frames(out)) == len(video_frames(clip))


@pytest.mark.parametrize("names", ["paths", "in a directory"])
@pytest.mark.parametrize("renameat2", ["native", "unsupported", "absent", "no links"])
def test_rename_noreplace_refuses_an_existing_target(tmp_path, monkeypatch, renameat2, names):
    import ctypes
    import errno
    import os

    from pipeline import outfile

    if renameat2 != "native":  # FUSE, 9p: the filesystem refuses the flag; link + unlink instead
        monkeypatch.setattr(outfile, "_RENAMEAT2", lambda *a: (ctypes.set_errno(errno.EINVAL), -1)[1])
    if renameat2 == "absent":  # glibc older than 2.28
        monkeypatch.setattr(outfile, "_RENAMEAT2", None)
    if renameat2 == "no links":  # FAT: the name is claimed, then replaced
        monkeypatch.setattr(os, "link", lambda *a, **k: (_ for _ in ()).throw(OSError(errno.EPERM, "no links")))
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.write_text("new")
    dst.write_text("old")
    held = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY) if names == "in a directory" else None
    given = (src, dst) if held is None else ("src", "dst")
    try:
        with pytest.raises(FileExistsError):
            outfile.rename_noreplace(*given, dir_fd=held)
        assert (src.read_text(), dst.read_text()) == ("new", "old")
        dst.unlink()
        outfile.rename_noreplace(*given, dir_fd=held)
    finally:
        if held is not None:
            os.close(held)
    assert dst.read_text() == "new" and not src.exists()


# -- 4. names: long ones, and ones holding ':' ---------------------------------------------------------------


@pytest.mark.parametrize("length", [240, 250, 255])
def test_output_names_up_to_the_limit_work(tmp_path, clip, length):
    out = tmp_path / ("n" * (length - 4) + ".mkv")
    result = run_pipeline(clip, "-o", out, "--frames", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert out.is_file() and partials(tmp_path) == []


def test_an_output_name_past_the_limit_exits_4(tmp_path, clip):
    out = tmp_path / ("n" * 252 + ".mkv")
    one_error(run_pipeline(clip, "-o", out, cwd=tmp_path), 4, "too long", "256 bytes")


def test_temporary_names_of_long_targets_fit_and_stay_distinct(tmp_path):
    from pipeline.outfile import name_max, temp_path_for
    from pipeline.outfile import remove_stale_partials

    a = tmp_path / ("é" * 125 + "a.mp4")  # 255 bytes, two-byte characters: cut on a character boundary
    b = tmp_path / ("é" * 125 + "b.mp4")
    ta, tb = temp_path_for(a, 4194304), temp_path_for(b, 4194304)
    assert ta != tb and max(len(ta.name.encode()), len(tb.name.encode())) <= name_max(tmp_path)
    assert ta.suffix == ".mp4" and ta.name.startswith(".é")
    dead = run_python("-c", "import os; print(os.getpid())")
    stale = temp_path_for(a, int(dead.stdout))
    stale.write_bytes(b"x")
    remove_stale_partials(a)
    assert not stale.exists()


@pytest.mark.parametrize("name", ["meeting12:30.mp4", "C:\\clips\\a.mp4", "file:x.mp4", "-dash.mp4"])
def test_local_names_are_files_never_protocols(tmp_path, clip, name):
    src = tmp_path / name
    src.write_bytes(clip.read_bytes())
    out = tmp_path / ("out" + name.replace("\\", "_"))
    # ./ as in FFmpeg: a leading '-' reads as an option, and file:x.mp4 as its file protocol's x.mp4
    given = f"./{name}" if name.startswith(("-", "file:")) else name
    result = run_pipeline(given, "-o", out.name, "--frames", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert out.is_file() and partials(tmp_path) == []


def test_colon_in_the_default_output_name(tmp_path, clip):
    (tmp_path / "cam1:take2.mp4").write_bytes(clip.read_bytes())
    result = run_pipeline("cam1:take2.mp4", "--frames", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "cam1:take2_processed.mp4").is_file()


def test_urls_stay_urls_and_devices_keep_their_names():
    from pipeline.avlib import ffmpeg_name

    assert ffmpeg_name("udp://0.0.0.0:5000", None, local=False) == "udp://0.0.0.0:5000"
    assert ffmpeg_name("/dev/video0", "v4l2", local=True) == "/dev/video0"
    assert ffmpeg_name("a:b.mp4", None, local=True) == "file:a:b.mp4"


# -- 5. set-up: files that never end or never answer, and a stop while it runs --------------------------------


@pytest.mark.parametrize("what", ["dev-zero", "fifo", "too-large", "directory"])
@pytest.mark.parametrize("option", ["lut3d", "config"])
def test_setup_files_are_regular_and_bounded(tmp_path, clip, what, option):
    import os

    path = {"dev-zero": Path("/dev/zero"), "fifo": tmp_path / "pipe.cube", "too-large": tmp_path / "huge.cube",
            "directory": tmp_path}[what]
    if what == "fifo":
        os.mkfifo(path)  # no writer: opening it for reading would wait for one forever
    elif what == "too-large":
        with open(path, "wb") as f:
            f.truncate(600 << 20)  # sparse: the size is checked before anything is read
    args = ("--filters", f"lut3d=file={path}") if option == "lut3d" else ("--config", path)
    result = run_pipeline(clip, "-o", tmp_path / "out.mp4", *args, cwd=tmp_path, timeout=30)
    words = {"dev-zero": "not a regular file", "fifo": "not a regular file", "too-large": "the limit is",
             "directory": "is a directory"}[what]
    one_error(result, 2, str(path), words)


@pytest.mark.parametrize("signame, code", [("SIGINT", 130), ("SIGTERM", 143), ("SIGHUP", 129)])
def test_one_signal_ends_a_set_up_step_that_takes_long(tmp_path, clip, signame, code):
    import signal
    import time

    plugin = tmp_path / "slow.py"
    plugin.write_text("import time\ntime.sleep(60)\n")  # any long step of set-up: a plugin, a huge LUT
    out = tmp_path / "out.mp4"
    cmd = pipeline_command(clip, "-o", out, "--plugin", plugin)
    proc = subprocess.Popen(cmd, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    t0 = time.monotonic()
    proc.send_signal(getattr(signal, signame))
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - t0 < 5
    assert proc.returncode == code, err
    assert err.strip() == f"pipeline: interrupted by {signame}; no output written"
    assert not out.exists() and partials(tmp_path) == []


# -- 6. a FIFO or a device as the input ---------------------------------------------------------------------


@pytest.fixture
def fifo(tmp_path) -> Path:
    import os

    os.mkfifo(path := tmp_path / "in.fifo")
    return path


@pytest.fixture(scope="module")
def ts_clip(tmp_path_factory) -> Path:
    return make_clip(tmp_path_factory.mktemp("ts") / "clip.ts", width=64, height=48, frames=30, audio=False)


def feed(fifo: Path, data: bytes, hold: float = 0.0):
    """A writer in a thread: ``data`` into the FIFO, then the write end held open ``hold`` seconds."""
    import threading
    import time

    def write():
        with open(fifo, "wb") as f:
            f.write(data)
            f.flush()
            time.sleep(hold)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def test_a_fifo_with_no_writer_ends_at_the_timeout(tmp_path, fifo):
    import time

    t0 = time.monotonic()
    result = run_pipeline(fifo, "-o", tmp_path / "out.mkv", "--timeout", "1", cwd=tmp_path, timeout=30)
    one_error(result, 3, "in.fifo", "--timeout")
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize("signame, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_ends_a_wait_for_a_fifo_writer(tmp_path, fifo, signame, code):
    import signal
    import time

    cmd = pipeline_command(fifo, "-o", tmp_path / "out.mkv")
    proc = subprocess.Popen(cmd, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    proc.send_signal(getattr(signal, signame))
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    assert err.strip() == f"pipeline: interrupted by {signame}; no output written"
    assert partials(tmp_path) == []


def test_a_fifo_is_read_to_its_end(tmp_path, fifo, ts_clip):
    writer = feed(fifo, ts_clip.read_bytes())
    out = tmp_path / "out.mkv"
    result = run_pipeline(fifo, "-o", out, "--drop-policy", "block", "--filters", "", cwd=tmp_path)
    writer.join(5)
    assert result.returncode == 0, result.stderr
    assert len(video_frames(out)) == 30


def test_a_signal_during_a_stalled_fifo_keeps_the_frames_done(tmp_path, fifo, ts_clip):
    import signal
    import time

    writer = feed(fifo, ts_clip.read_bytes(), hold=30)  # then silent, the write end still open
    out = tmp_path / "out.mkv"
    cmd = pipeline_command(fifo, "-o", out, "--drop-policy", "block", "--filters", "", "--timeout", "10")
    proc = subprocess.Popen(cmd, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: partials(tmp_path), proc, "partial file", timeout=30)
    time.sleep(2)  # every frame written so far is through; the reader now waits in a read
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert time.monotonic() - t0 < 5
    assert "holds the" in err and len(err.strip().splitlines()) == 1
    assert out.is_file() and partials(tmp_path) == []
    del writer


# -- 7. stdout and stderr that cannot be written ------------------------------------------------------------


def _stdout_into(where: str):
    """``(stdout, preexec_fn)`` for a child whose stdout is a full device, a pipe nobody reads (its reader
    closed) or closed outright (``>&-``); the caller closes ``stdout``."""
    import os

    if where == "full":
        return os.open("/dev/full", os.O_WRONLY), None
    reader, writer = os.pipe()
    os.close(reader)
    return writer, (lambda: os.close(1)) if where == "closed" else None


@pytest.mark.parametrize("where", ["full", "no-reader", "closed"])
@pytest.mark.parametrize("buffered", [False, True], ids=["unbuffered", "buffered"])
@pytest.mark.parametrize("command", [("filters",), ("filters", "--json"), ("filters", "gblur"), ("presets",),
                                     ("run",), ("--help",), ("run", "--help"), ("--version",)],
                         ids=["filters", "filters-json", "one-filter", "presets", "run", "help", "run-help", "version"])
def test_a_stdout_that_cannot_be_written_is_exit_4_in_one_line(tmp_path, clip, command, buffered, where):
    """As coreutils and ffmpeg end on a write error; it was an internal error (exit 1). Python's own flush
    at exit must not fail again either ("Exception ignored", exit 120)."""
    import os

    from utils import cli_command, environment

    runs = command == ("run",)
    if runs:  # not quiet: the summary goes to stdout
        command = ("run", clip, "-o", tmp_path / "out.mp4", "--device", "cpu")
    env = environment(PYTHONUNBUFFERED="" if buffered else "1")
    stdout, preexec = _stdout_into(where)
    try:
        result = subprocess.run(cli_command(*command), stdout=stdout, stderr=subprocess.PIPE, text=True, env=env,
                                preexec_fn=preexec, cwd=tmp_path, timeout=60)
    finally:
        os.close(stdout)
    one_error(result, 4, "stdout: write failed")
    if runs:  # the summary could not be shown; the output is whole
        assert "the run itself is complete" in result.stderr
        assert len(video_frames(tmp_path / "out.mp4")) == len(video_frames(clip))


@pytest.mark.parametrize("buffered", [False, True], ids=["unbuffered", "buffered"])
def test_progress_into_a_reader_that_left_ends_the_run_as_usual(tmp_path, clip, buffered):
    """The report's write errors never ended the run, but its text stayed buffered: Python's flush at exit
    failed ("Exception ignored", exit 120)."""
    import os

    from utils import environment

    stdout, _ = _stdout_into("no-reader")
    try:
        result = subprocess.run(pipeline_command(clip, "-o", tmp_path / "out.mp4", "-progress", "pipe:1"),
                                stdout=stdout, stderr=subprocess.PIPE, text=True, cwd=tmp_path, timeout=60,
                                env=environment(PYTHONUNBUFFERED="" if buffered else "1"))
    finally:
        os.close(stdout)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert len(video_frames(tmp_path / "out.mp4")) == len(video_frames(clip))


def test_a_closed_stderr_is_never_given_to_a_file_the_run_opens(tmp_path):
    """With fd 2 closed, the first file opened took its number, and what the codecs print to stderr
    themselves would have gone into it. It is held on /dev/null (read-only: still unusable); around the
    encoder's open it points for a moment at the file that captures the encoder's banner."""
    import os

    clip = make_clip(tmp_path / "in.mp4", width=320, height=240, frames=120, audio=False)
    out = tmp_path / "out.mp4"
    cmd = pipeline_command(clip, "-o", out, "--filters", "gblur=sigma=8,gblur=sigma=8")
    proc = subprocess.Popen(cmd, cwd=tmp_path, preexec_fn=lambda: os.close(2))
    wait_until(lambda: partials(tmp_path), proc, "the temporary output")
    seen = set()
    while proc.poll() is None:  # every file fd 2 leads to while the run writes
        with contextlib.suppress(OSError):
            seen.add(os.readlink(f"/proc/{proc.pid}/fd/2"))
        time.sleep(0.002)
    assert proc.wait(timeout=60) == 0
    assert "/dev/null" in seen and not [name for name in seen if name.startswith(str(tmp_path))], seen
    missing = subprocess.run(pipeline_command(tmp_path / "missing.mp4", "-o", out, "-y"), cwd=tmp_path, timeout=60,
                             preexec_fn=lambda: os.close(2))
    assert missing.returncode == 3  # the exit code holds without a stderr to say why


@pytest.mark.parametrize("how", ["output", "stats", "progress", "output-url"])
def test_a_file_url_input_is_the_input_for_every_check(tmp_path, clip, how):
    """file:///path is read by FFmpeg's file protocol: it is the input, and no output, statistics or
    progress file may replace it (they did, with exit 0)."""
    src = tmp_path / "in.mp4"
    src.write_bytes(clip.read_bytes())
    url = src.resolve().as_uri()
    args = {"output": (url, "-o", "in.mp4", "-y"), "stats": (url, "-o", "o.mp4", "--stats-json", "in.mp4", "-y"),
            "progress": (url, "-o", "o.mp4", "-progress", "in.mp4"),
            "output-url": ("in.mp4", "-o", url, "-y")}[how]
    one_error(run_pipeline(*args, cwd=tmp_path), 2, "is the input")
    assert src.read_bytes() == clip.read_bytes()


def test_a_file_url_output_is_written_as_its_file_is(tmp_path, clip):
    """-o file:///path takes its muxer from its extension and replaces a file only with -y, as -o /path does
    (it asked for -f, and with one it replaced the file, exit 0)."""
    src, out = tmp_path / "in.mp4", tmp_path / "a b.mp4"
    src.write_bytes(clip.read_bytes())
    out.write_bytes(b"kept")
    one_error(run_pipeline(src.name, "-o", out.as_uri(), "--frames", "2", cwd=tmp_path), 2, "already exists")
    assert out.read_bytes() == b"kept"
    result = run_pipeline(src.name, "-o", out.as_uri(), "--frames", "2", "-y", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(video_frames(out)) == 2 and partials(tmp_path) == []


@pytest.mark.parametrize("url, words", [
    ("file:///tmp/a%00b.mp4", "NUL character"), ("file:///tmp/take#1.mp4", "ambiguous"),
    ("file:///tmp/a.mp4?", "ambiguous"), ("file://", "names no file"),
])
@pytest.mark.parametrize("side", ["input", "output"])
def test_file_urls_that_name_no_one_file_are_refused(tmp_path, clip, url, words, side):
    """#1.mp4 was dropped as a fragment (another file written, or read) and %00 was an internal error, exit 1."""
    args = (url, "-o", "out.mp4") if side == "input" else (clip, "-o", url)
    one_error(run_pipeline(*args, cwd=tmp_path), 2, words)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("url, words", [
    ("file://{dir}/in.mp4", "a file URL names a file of this machine"),  # FFmpeg: //{dir}/in.mp4, the input
    ("file://otherhost/{dir}/in.mp4", "a file URL names a file of this machine"),
    ("file://[/x.mp4", "not a valid URL"), ("file:///{dir}/x%00.json", "NUL character"),
])
@pytest.mark.parametrize("option", ["-o", "--stats-json", "-progress", "--config"])
def test_file_urls_of_another_host_or_malformed_are_refused_for_every_file(tmp_path, clip, url, words, option):
    """file://HOST/path skipped every output check, and FFmpeg opened it as //HOST/path: `-o file://tmp/x/in.mp4
    -f mp4` replaced the input without -y (and a config or plugin likewise). A bad IPv6 host and %00 in a
    report's name were internal errors (exit 1)."""
    src = tmp_path / "in.mp4"
    src.write_bytes(clip.read_bytes())
    name = url.format(dir=str(tmp_path).lstrip("/"))
    args = ("-o", name, "-f", "mp4") if option == "-o" else ("-o", "out.mp4", option, name)
    one_error(run_pipeline(src.name, *args, "-y", cwd=tmp_path), 2, words)
    assert src.read_bytes() == clip.read_bytes() and sorted(p.name for p in tmp_path.iterdir()) == ["in.mp4"]


@pytest.mark.parametrize("option", ["--stats-json", "-progress"])
def test_a_report_name_ending_with_a_slash_never_replaces_that_file(tmp_path, clip, option):
    """s.json/ (or its file URL) replaced s.json: Path() drops the slash."""
    report = tmp_path / "s.json"
    report.write_bytes(b"kept")
    for name in (f"{report}/", f"{report.as_uri()}/"):
        one_error(run_pipeline(clip, "-o", tmp_path / "o.mp4", option, name, "-y", cwd=tmp_path), 4, "ends with /")
    assert report.read_bytes() == b"kept" and not (tmp_path / "o.mp4").exists()


def test_file_url_names_keep_their_bytes_their_case_and_their_trailing_slash(tmp_path, clip):
    """%ff is the byte 0xff (it was U+FFFD: another file), localhost is any case (LOCALHOST was a URL), and
    file:///x/a.mp4/ names a directory (it replaced a.mp4)."""
    src = tmp_path / os.fsdecode(b"\xff.mp4")
    src.write_bytes(clip.read_bytes())
    url = f"FILE://LOCALHOST{tmp_path}/%FF.mp4"
    result = run_pipeline(url, "-o", f"file://localhost{tmp_path}/%FF_out.mp4", "--frames", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(video_frames(tmp_path / os.fsdecode(b"\xff_out.mp4"))) == 2
    kept = tmp_path / "kept.mp4"
    kept.write_bytes(b"kept")
    result = run_pipeline(src, "-o", f"{kept.as_uri()}/", "-y", cwd=tmp_path)
    assert result.returncode == 4 and kept.read_bytes() == b"kept", result.stderr


def test_ffmpegs_file_protocol_names_its_path_as_it_stands(tmp_path, clip):
    """`file:12:30.mp4` is what FFmpeg's users write for a name holding ':' (it was looked for as a file named
    "file:12:30.mp4": no such file); the rest is the path, no %XX decoded, for every file option."""
    src = tmp_path / "12:30 %41.mp4"
    src.write_bytes(clip.read_bytes())
    result = run_pipeline(f"file:{src.name}", "-o", "file:out:1.mp4", "--frames", "2", "--stats-json",
                          "file:s:1.json", "-progress", "file:p:1.txt", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(video_frames(tmp_path / "out:1.mp4")) == 2
    assert json.loads((tmp_path / "s:1.json").read_text())["frames_out"] == 2
    assert "progress=end" in (tmp_path / "p:1.txt").read_text()
    one_error(run_pipeline(src.name, "-o", f"file:{src.name}", "-y", cwd=tmp_path), 2, "is the input")
    one_error(run_pipeline(src.name, "-o", "file:", cwd=tmp_path), 2, "names no file")
    assert src.read_bytes() == clip.read_bytes()


def test_a_path_object_names_its_file_even_one_called_file_colon(tmp_path, clip, monkeypatch):
    """Path("file:x.mp4") is the file so named (the str "file:x.mp4" is FFmpeg's protocol, x.mp4): a Path
    cannot keep a leading ./, and a config rebuilt with replace() must not read it as the protocol again."""
    import pipeline

    monkeypatch.chdir(tmp_path)
    (tmp_path / "file:x.mp4").write_bytes(clip.read_bytes())
    pipeline.run(Path("file:x.mp4"), Path("file:o.mp4"), device="cpu", frames=2)
    assert len(video_frames(tmp_path / "file:o.mp4")) == 2
    (tmp_path / "out").mkdir()
    result = pipeline.run_many([Path("file:x.mp4")], "out", device="cpu", frames=2)
    assert result.exit_code == 0 and [p.name for p in (tmp_path / "out").iterdir()] == ["file:x_processed.mp4"]
    assert not (tmp_path / "x.mp4").exists() and not (tmp_path / "o.mp4").exists()


@pytest.mark.parametrize("name", ["./-", "file:-", "./pipe:1", "file:pipe:1", "file:null"])
def test_a_file_named_like_stdout_or_the_null_output_is_that_file(tmp_path, clip, name):
    """./- and ./pipe:1 name files, as in FFmpeg (the video went to stdout: Path dropped the ./); so do
    file:- and file:null."""
    result = run_pipeline(clip, "-o", name, "-f", "mp4", "--frames", "2", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout == "", result.stderr
    written = tmp_path / name.removeprefix("./").removeprefix("file:")
    assert len(video_frames(written)) == 2
    one_error(run_pipeline(clip, "-o", name, "-f", "mp4", cwd=tmp_path), 2, "already exists")


@pytest.mark.parametrize("how", ["output", "stats", "progress"])
def test_a_file_behind_stdin_is_the_input(tmp_path, clip, how):
    src = tmp_path / "in.mp4"
    src.write_bytes(clip.read_bytes())
    args = {"output": ("-o", "in.mp4", "-y"), "stats": ("-o", "o.mp4", "--stats-json", "in.mp4", "-y"),
            "progress": ("-o", "o.mp4", "-progress", "in.mp4")}[how]
    with open(src, "rb") as stdin:
        result = subprocess.run(pipeline_command("-", *args), stdin=stdin, capture_output=True, text=True,
                                cwd=tmp_path, timeout=60)
    one_error(result, 2, "is the input")
    assert src.read_bytes() == clip.read_bytes()


def test_the_temporary_file_of_a_replacement_is_as_private_as_the_file_it_replaces(tmp_path):
    """Made before the muxer opens it, with the replaced file's permissions: a 0600 output is never readable
    by others while it is being written (it was, at the umask's 0644, until the rename)."""
    import os

    from pipeline.outfile import create_like

    target, tmp = tmp_path / "private.mp4", tmp_path / ".private.partial.mp4"
    target.write_bytes(b"secret")
    target.chmod(0o600)
    old = os.umask(0o022)
    try:
        create_like(tmp, target)
    finally:
        os.umask(old)
    assert tmp.stat().st_mode & 0o777 == 0o600 and tmp.read_bytes() == b""
    create_like(tmp_path / ".none.mp4", tmp_path / "absent.mp4")  # nothing to copy: nothing made
    assert not (tmp_path / ".none.mp4").exists()


def test_a_name_with_control_characters_is_said_on_one_line_escaped(tmp_path, clip):
    """A line break in a name would split the error over lines; an ESC would drive the terminal. A failing
    stream of a run with several inputs says error, as one run does."""
    odd = tmp_path / "nope\x1b[31m\nx.mp4"
    proc = run_pipeline(odd, "-o", "null")
    assert proc.returncode == 3 and proc.stderr == f"pipeline: error: {tmp_path}/nope\\x1b[31m x.mp4: no such file\n"
    (tmp_path / "out").mkdir()
    several = run_pipeline(clip, odd, "-o", f"{tmp_path / 'out'}/", "--frames", "2")
    assert several.returncode == 3 and several.stderr.count("\n") == 1, several.stderr
    assert several.stderr.startswith("pipeline: error: ") and "\\x1b[31m x.mp4" in several.stderr


def test_names_with_markup_or_emoji_codes_are_said_as_they_are(tmp_path, clip):
    """rich reads ``[bold]`` as markup and ``:smile:`` as an emoji: the summary said ``wrote xy😄.mp4`` for
    ``x[bold]y:smile:.mp4``, an error named another file than the one missing."""
    missing = tmp_path / "in:smile:[bold].mp4"
    proc = run_pipeline(missing, "-o", "null")
    assert proc.returncode == 3 and proc.stderr == f"pipeline: error: {missing}: no such file\n"
    out = tmp_path / "x[bold]y:smile:.mp4"
    done = run_pipeline(clip, out, "--frames", "2", quiet=False)
    assert done.returncode == 0 and f"wrote {out}\n" in done.stdout, done.stdout


def test_file_urls_name_their_files_for_reports(tmp_path, clip):
    """A file:// URL of this machine is its file wherever a file is named: --stats-json and -progress (the
    statistics' URL was read as a folder named "file:", the progress' refused as a URL)."""
    src = tmp_path / "in put.mp4"
    src.write_bytes(clip.read_bytes())
    result = run_pipeline(src.as_uri(), "-o", "o.mp4", "--frames", "2", "--stats-json",
                          (tmp_path / "s.json").as_uri(), "-progress", (tmp_path / "p.txt").as_uri(), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "s.json").read_text())["frames_out"] == 2
    assert "progress=end" in (tmp_path / "p.txt").read_text()
    one_error(run_pipeline(src.name, "-o", "x.mp4", "--stats-json", "file:///tmp/take#1.json", cwd=tmp_path), 2,
              "ambiguous")
