"""Reports (--stats-json, batch/bench/probe --json, the bench chart): a FIFO without a reader is refused
after a bounded wait instead of blocking the process for ever; one with a reader gets the whole report."""

from __future__ import annotations

import errno
import os
import subprocess
import threading
import time

import pytest

from pipeline import reportfile
from pipeline.errors import OutputError
from utils import run_cli


def test_a_fifo_nobody_reads_is_refused_after_the_wait(tmp_path, monkeypatch):
    monkeypatch.setattr(reportfile, "FIFO_WAIT_S", 0.3)
    fifo = tmp_path / "stats.json"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(OSError) as info:
        reportfile.write_report(fifo, "{}\n")
    assert info.value.errno == errno.ENXIO and "no process read" in str(info.value)
    assert 0.3 <= time.monotonic() - t0 < 5


def test_a_fifo_whose_reader_comes_late_gets_the_whole_report(tmp_path):
    fifo = tmp_path / "stats.json"
    os.mkfifo(fifo)
    body = "x" * (1 << 20) + "\n"  # more than a pipe holds: the writes must block, not fail, once a reader is there
    got: list[bytes] = []

    def read():
        time.sleep(0.3)
        with open(fifo, "rb") as f:
            got.append(f.read())

    reader = threading.Thread(target=read)
    reader.start()
    reportfile.write_report(fifo, body)
    reader.join(10)
    assert got == [body.encode()]


def test_a_file_is_replaced_or_kept_as_asked(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("theirs\n")
    with pytest.raises(FileExistsError):
        reportfile.write_report(path, "ours\n", exclusive=True)
    assert path.read_text() == "theirs\n"
    reportfile.write_report(path, "ours\n")
    assert path.read_text() == "ours\n"


@pytest.mark.parametrize("case", ["input", "existing", "each_other"])
def test_bench_refuses_a_report_path_before_any_work(tmp_path, case):
    """Never the input, never the other report, an existing file only with -y; checked before the GPU."""
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"\0" * 64)
    args = {"input": ["--json", clip, "-y"], "existing": ["--json", tmp_path / "old.json"],
            "each_other": ["--json", tmp_path / "r", "--chart", tmp_path / "r", "-y"]}[case]
    (tmp_path / "old.json").write_text("theirs\n")
    proc = run_cli("bench", clip, *args, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert clip.read_bytes() == b"\0" * 64 and (tmp_path / "old.json").read_text() == "theirs\n"


def test_probe_keeps_an_existing_json_without_y(tmp_path):
    path = tmp_path / "probe.json"
    path.write_text("theirs\n")
    proc = run_cli("probe", "--json", path, timeout=60)
    assert proc.returncode == 2 and "already exists" in proc.stderr, proc.stderr
    assert path.read_text() == "theirs\n"


def test_symbolic_link_loops_are_errors_of_their_own_never_internal(tmp_path):
    """Python 3.11's Path.resolve() raises RuntimeError on a loop: every path check follows links without it."""
    from utils import ROOT, run_pipeline

    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    clip = ROOT / "samples" / "sample.mp4"
    report = run_pipeline(clip, "-o", "null", "--stats-json", tmp_path / "loop1")
    assert report.returncode == 4 and "symbolic link loop" in report.stderr, report.stderr
    (tmp_path / "out").mkdir()
    several = run_pipeline(clip, tmp_path / "loop1", "-o", f"{tmp_path / 'out'}/", "--frames", "2")
    for proc in (report, several):
        assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert several.returncode == 3, several.stderr


def test_a_report_through_a_dangling_link_is_written_where_it_points(tmp_path):
    from utils import ROOT, run_pipeline

    (tmp_path / "stats.json").symlink_to(tmp_path / "real.json")
    proc = run_pipeline(ROOT / "samples" / "sample.mp4", "-o", "null", "--frames", "2", "--stats-json",
                        tmp_path / "stats.json")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "stats.json").is_symlink() and '"frames_out": 2' in (tmp_path / "real.json").read_text()


@pytest.mark.parametrize("option", ["-progress", "--stats-json"])
def test_a_report_to_dev_stdout_reaches_a_pipe(option):
    """/dev/stdout into a pipe links to /proc's name for the pipe, which cannot be opened: the path given is."""
    from utils import ROOT, run_pipeline

    proc = run_pipeline(ROOT / "samples" / "sample.mp4", "-o", "null", "--frames", "2", option, "/dev/stdout")
    assert proc.returncode == 0, proc.stderr
    assert ("progress=end" if option == "-progress" else '"frames_out": 2') in proc.stdout


def test_a_report_that_fails_mid_write_keeps_the_old_file_whole(tmp_path):
    """A full disk or a stop while a report is written leaves the old report, never half a JSON document."""
    path = tmp_path / "stats.json"
    path.write_text('{"theirs": 1}\n')
    path.chmod(0o640)
    with pytest.raises(OSError):
        with reportfile.report_file(path) as f:
            f.write('{"ours": ')
            raise OSError(errno.ENOSPC, "No space left on device")
    assert path.read_text() == '{"theirs": 1}\n' and sorted(os.listdir(tmp_path)) == ["stats.json"]
    reportfile.write_report(path, '{"ours": 2}\n')
    assert path.read_text() == '{"ours": 2}\n' and (path.stat().st_mode & 0o777) == 0o640
    assert sorted(os.listdir(tmp_path)) == ["stats.json"]


def test_a_report_that_appears_while_it_is_written_is_kept(tmp_path):
    path = tmp_path / "stats.json"
    with pytest.raises(FileExistsError):
        with reportfile.report_file(path, exclusive=True) as f:
            f.write("ours\n")
            path.write_text("theirs\n")  # another process, meanwhile
    assert path.read_text() == "theirs\n" and sorted(os.listdir(tmp_path)) == ["stats.json"]


def test_stats_json_on_a_full_disk_keeps_the_old_report(tmp_path, monkeypatch, capsys, restore_signals):
    from utils import ROOT

    from pipeline import cli

    path = tmp_path / "stats.json"
    path.write_text('{"theirs": 1}\n')
    real_fdopen = os.fdopen

    class FullDisk:  # the temporary report's writes fail: the disk is full
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc_info):
            self.f.close()

        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

    def fdopen(fd, *args, **kwargs):
        f = real_fdopen(fd, *args, **kwargs)
        return FullDisk(f) if ".partial-" in os.readlink(f"/proc/self/fd/{fd}") else f

    monkeypatch.setattr(os, "fdopen", fdopen)
    code = cli.main(["run", str(ROOT / "samples" / "sample.mp4"), "-o", "null", "--frames", "2", "--device", "cpu",
                     "-q", "-y", "--stats-json", str(path)])
    err = capsys.readouterr().err
    assert code == 4 and "No space left on device" in err and len(err.strip().splitlines()) == 1, err
    assert path.read_text() == '{"theirs": 1}\n' and sorted(os.listdir(tmp_path)) == ["stats.json"]


def test_stats_json_names_a_path_not_a_pipe(tmp_path):
    from utils import ROOT, run_pipeline

    for name in ("-", "pipe:1"):
        proc = run_pipeline(ROOT / "samples" / "sample.mp4", "-o", "null", "--stats-json", name, cwd=tmp_path)
        assert proc.returncode == 2 and "/dev/stdout" in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_report_to_dev_stdout_redirected_to_a_file_is_written_into_it(tmp_path):
    """As a shell's >> set it up: after what the file held, the file itself kept (no -y, nothing replaced)."""
    from utils import ROOT, pipeline_command

    log = tmp_path / "log.txt"
    log.write_text("before\n")
    inode = log.stat().st_ino
    with open(log, "a") as out:
        proc = subprocess.run(pipeline_command(ROOT / "samples" / "sample.mp4", "-o", "null", "--frames", "2",
                                               "--stats-json", "/dev/stdout"), stdout=out, stderr=subprocess.PIPE,
                              text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    text = log.read_text()
    assert text.startswith("before\n{") and '"frames_out": 2' in text and log.stat().st_ino == inode


def test_a_report_is_never_written_into_the_video_pipe():
    from utils import ROOT, pipeline_command

    proc = subprocess.run(pipeline_command(ROOT / "samples" / "sample.mp4", "-o", "-", "-f", "mpegts", "--frames",
                                           "2", "--stats-json", "/dev/stdout"), capture_output=True, timeout=60)
    assert proc.returncode == 2 and b"is the output" in proc.stderr and proc.stdout == b"", proc.stderr


def test_a_report_through_a_link_loop_is_refused_and_the_link_kept(tmp_path):
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    with pytest.raises(OutputError, match="cannot be followed"):
        reportfile.write_report(tmp_path / "loop1", "{}\n")
    assert (tmp_path / "loop1").is_symlink() and sorted(os.listdir(tmp_path)) == ["loop1", "loop2"]


def test_a_descriptor_name_not_open_now_is_refused(tmp_path):
    from utils import ROOT, run_pipeline

    proc = run_pipeline(ROOT / "samples" / "sample.mp4", "-o", "null", "--stats-json", "/dev/fd/57", cwd=tmp_path)
    assert proc.returncode == 2 and "file descriptor" in proc.stderr, proc.stderr


@pytest.mark.parametrize("exists", [False, True])
def test_without_hard_links_a_report_is_still_placed_only_where_nothing_is(tmp_path, monkeypatch, exists):
    """FAT and some network mounts have no link(): the name is claimed, then replaced."""
    from pipeline import outfile

    monkeypatch.setattr(outfile, "_RENAMEAT2", None)
    monkeypatch.setattr(os, "link", lambda *a, **k: (_ for _ in ()).throw(OSError(errno.EPERM, "Operation not permitted")))
    path = tmp_path / "r.json"
    if exists:
        path.write_text("theirs\n")
        with pytest.raises(FileExistsError):
            reportfile.write_report(path, "ours\n", exclusive=True)
    else:
        reportfile.write_report(path, "ours\n", exclusive=True)
    assert path.read_text() == ("theirs\n" if exists else "ours\n") and os.listdir(tmp_path) == ["r.json"]


def test_a_read_only_report_is_not_replaced_even_with_y(tmp_path, monkeypatch):
    """-y replaced a --stats-json file its owner had made read-only (renamed over, it needs no write
    permission on the file itself), where the output and -progress are refused; ffmpeg refuses too."""
    from pipeline import checks

    path = tmp_path / "stats.json"
    path.write_text("theirs\n")
    path.chmod(0o444)
    if os.geteuid() == 0:  # root may write any file: make the file read-only for this process too
        real = os.access
        monkeypatch.setattr(checks.os, "access", lambda p, mode: real(p, mode) and not (p == path and mode == os.W_OK))
    with pytest.raises(OutputError, match="stats.json: --stats-json file is read-only; not replaced"):
        checks.check_report_path(str(path), "--stats-json", [], overwrite=True)
    assert path.read_text() == "theirs\n"


@pytest.mark.parametrize("inputs", [1, 2], ids=["run", "streams"])
def test_stats_json_on_stdout_is_all_stdout_holds(inputs):
    """The summary went to stdout after the JSON: `--stats-json /dev/stdout | jq` failed unless -q was given.
    It goes to stderr now, as with -o -."""
    import json

    from utils import ROOT, run_pipeline

    clip = ROOT / "samples" / "sample.mp4"
    proc = run_pipeline(*[clip] * inputs, "-o", "null", "--frames", "2", "--stats-json", "/dev/stdout", quiet=False)
    assert proc.returncode == 0, proc.stderr
    json.loads(proc.stdout)
    assert "frames" in proc.stderr and ("processed" in proc.stderr or "stream" in proc.stderr)
