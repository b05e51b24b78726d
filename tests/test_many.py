"""Many streams in one process sharing one device arena and pinned pool (pipeline.many)."""

from __future__ import annotations

import errno
import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import pipeline
from utils import all_devices, decode, pipeline_threads, read_json, run_cli
from pipeline import sample as make_sample
from pipeline.config import RunConfig
from pipeline.errors import ConfigError
from pipeline.many import configs_for, output_for, run_many, shared_memory_for

SIZES = [(96, 64), (160, 96), (128, 128)]


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("many")
    return [make_sample.make_clip(root / f"clip{w}x{h}.mkv", width=w, height=h, frames=12, fps=30, seed=i,
                                  codec="ffv1", audio=i == 0) for i, (w, h) in enumerate(SIZES)]


@pytest.mark.parametrize("device", all_devices())
def test_streams_of_three_sizes_give_what_single_runs_give(device, clips, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    base = RunConfig(device=device, codec="ffv1", quiet=True)
    result = run_many(configs_for(base, [str(c) for c in clips], str(out)))
    assert result.exit_code == 0 and [s.exit_code for s in result.streams] == [0, 0, 0]
    for clip, stream in zip(clips, result.streams):
        single = tmp_path / f"single_{clip.name}"
        proc = run_cli("run", clip, "-o", single, "--device", device, "-q", "-c", "ffv1")
        assert proc.returncode == 0, proc.stderr
        a, b = decode(stream.output), decode(single)
        assert len(a.frames) == 12 and a.pts == b.pts and a.audio_packets == b.audio_packets
        for x, y in zip(a.frames, b.frames):
            np.testing.assert_array_equal(x, y)
    shared = result.totals()["shared"]
    assert shared["arena_device_allocs"] >= 1 and shared["arena_bytes_in_use"] == 0
    assert shared["pinned_bytes_in_use"] == 0  # every ring went back to the pool
    assert pipeline_threads() == []


def test_a_failing_stream_fails_alone_and_sets_the_exit_code(clips, tmp_path):
    base = RunConfig(device="cpu", codec="ffv1", quiet=True)
    missing = str(tmp_path / "missing.mp4")
    result = run_many(configs_for(base, [str(clips[0]), missing, str(clips[1])], "null"))
    codes = [s.exit_code for s in result.streams]
    assert codes == [0, 3, 0] and result.exit_code == 3
    assert "no such file" in result.streams[1].error
    assert result.frames == 24


@pytest.mark.parametrize("device", all_devices())
def test_the_shared_arena_stops_growing_as_streams_start_and_stop(device, clips):
    """Cycles of streams of three sizes through one shared memory. The memory grows to the largest mix
    that has run at the same moment, and how a cycle's streams overlap is the scheduler's choice (on the
    GPU the first streams' set-up often runs them one after the other). So the first cycle holds all three
    at once, their first frames meeting in the stage: after it, no device or pinned allocation and no
    growth of what is reserved, whichever streams run and however they overlap."""
    base = RunConfig(device=device, codec="ffv1", quiet=True, frames=6)
    shared = shared_memory_for(base)
    together = threading.Barrier(3, timeout=60)
    warming = True

    def meet(frame) -> None:  # every cycle has the stage, so every cycle has the same frame plan
        if warming and frame.index == 0:
            together.wait()

    rng = np.random.default_rng(7)
    seen = []
    try:
        for cycle in range(12):
            chosen = [0, 1, 2] if cycle == 0 else rng.choice(3, size=int(rng.integers(1, 4)), replace=False)
            result = run_many(configs_for(base, [str(clips[i]) for i in chosen], "null"), shared=shared, stage=meet)
            assert result.exit_code == 0, [s.error for s in result.streams]
            warming = False
            counters = shared.counters()
            seen.append((counters["arena_device_allocs"], counters["arena_bytes_reserved"],
                         counters["pinned_host_allocs"], counters["pinned_bytes_reserved"]))
            assert counters["arena_bytes_in_use"] == 0 and counters["pinned_bytes_in_use"] == 0
    finally:
        shared.close()
    warm = seen[0]
    names = ("arena_device_allocs", "arena_bytes_reserved", "pinned_host_allocs", "pinned_bytes_reserved")
    moved = [f"cycle {i}: " + ", ".join(f"{n} {a} -> {b}" for n, a, b in zip(names, warm, s) if a != b)
             for i, s in enumerate(seen) if s != warm]
    assert not moved, f"grew after the warm-up (cycle 0: {dict(zip(names, warm))}): " + "; ".join(moved)


@pytest.mark.parametrize("device", all_devices())
@pytest.mark.parametrize("copy_threads", [1, 2])
@pytest.mark.parametrize("failing", [0, 5])  # 0: its frame context had never been used (no timings to read)
def test_a_stream_whose_stage_fails_gives_its_frames_memory_back(device, copy_threads, failing, clips, tmp_path):
    """The frame in the failing stage held two host slots that nothing gave back: a shared pool (run_many,
    a batch worker) lost them for good, two more with every failed file, until its cap refused good ones."""
    base = RunConfig(device=device, codec="ffv1", quiet=True, copy_threads=copy_threads)
    shared = shared_memory_for(base)

    def fails(frame) -> None:
        if frame.index == failing:
            raise RuntimeError(f"at frame {failing}")

    try:
        for _ in range(3):
            result = run_many(configs_for(base, [str(clips[0])], str(tmp_path)), shared=shared, stage=fails)
            assert result.exit_code == 1 and f"at frame {failing}" in result.streams[0].error
            counters = shared.counters()
            assert counters["pinned_bytes_in_use"] == 0 and counters["arena_bytes_in_use"] == 0, counters
        assert list(tmp_path.iterdir()) == []
    finally:
        shared.close()
    assert pipeline_threads() == []


@pytest.mark.parametrize("device", all_devices())
def test_one_stage_sees_every_streams_frames_and_which_input_each_came_from(device, clips):
    seen: dict[str, list[int]] = {}
    lock = threading.Lock()

    def stage(frame) -> None:
        frame.planes[0] *= 0.5  # still the working frame, writable in place
        with lock:
            seen.setdefault(frame.source, []).append(frame.index)

    result = pipeline.run_many(clips, "null", stage=stage, device=device, frames=5)
    assert result.exit_code == 0, [s.error for s in result.streams]
    assert {k: sorted(v) for k, v in seen.items()} == {str(c): list(range(5)) for c in clips}


def test_a_stage_failing_on_one_stream_ends_only_that_stream(clips, tmp_path):
    out = tmp_path / "out"
    out.mkdir()

    def stage(frame) -> None:
        if frame.source == str(clips[1]) and frame.index == 2:
            raise ValueError("bad frame")

    result = pipeline.run_many(clips, out, stage=stage, device="cpu", codec="ffv1")
    assert [s.exit_code for s in result.streams] == [0, 1, 0]
    assert "bad frame" in result.streams[1].error and "stage" in result.streams[1].error
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{c.stem}_processed.mkv" for c in (clips[0], clips[2]))


def test_a_keyboardinterrupt_from_the_stage_reaches_the_caller_after_every_stream_ends(clips, tmp_path):
    """It escaped the stream's thread (a traceback on stderr) and the call returned exit 0 for every stream."""
    out = tmp_path / "out"
    out.mkdir()

    def stage(frame) -> None:
        if frame.source == str(clips[1]) and frame.index == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pipeline.run_many(clips, out, stage=stage, device="cpu", codec="ffv1")
    assert pipeline_threads() == []
    kept = sorted(p.name for p in out.iterdir())
    assert f"{clips[1].stem}_processed.mkv" not in kept
    for name in kept:  # the others stopped as for a Ctrl-C: what they did is kept, playable
        decode(out / name)  # asserts it has frames


def test_cli_several_inputs_into_a_directory_and_a_streams_config(clips, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    stats = tmp_path / "s.json"
    proc = run_cli("run", *clips[:2], "-o", f"{out}/", "--device", "cpu", "-c", "ffv1", "--stats-json", stats)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{c.stem}_processed.mkv" for c in clips[:2])
    assert "2 streams" in proc.stdout
    data = read_json(stats)
    assert data["totals"]["streams"] == 2 and data["totals"]["frames_out"] == 24
    config = tmp_path / "streams.toml"
    config.write_text(f'codec = "ffv1"\n[[streams]]\ninput = "{clips[0]}"\noutput = "{tmp_path / "a.mkv"}"\n'
                      f'[[streams]]\ninput = "{clips[2]}"\noutput = "{tmp_path / "b.mkv"}"\nfilters = "hflip"\n')
    proc = run_cli("run", "--config", config, "--device", "cpu", "-q")
    assert proc.returncode == 0, proc.stderr
    assert len(decode(tmp_path / "a.mkv").frames) == len(decode(tmp_path / "b.mkv").frames) == 12


def test_the_command_lines_flags_override_a_streams_entry_as_they_override_the_file(clips, tmp_path):
    """An entry's own keys beat the command line: -n replaced a file the entry said to overwrite, --frames lost
    to the entry's frames, and an entry's encoder table replaced the file's instead of merging with it."""
    kept = tmp_path / "kept.mkv"
    kept.write_bytes(b"precious")
    config = tmp_path / "streams.toml"
    config.write_text(f'codec = "libx264"\n[encoder_opts]\npreset = "ultrafast"\n'
                      f'[[streams]]\ninput = "{clips[0]}"\noutput = "{kept}"\noverwrite = true\nframes = 3\n'
                      f'[streams.encoder_opts]\ncrf = "40"\n')
    proc = run_cli("run", "--config", config, "-n", "--device", "cpu", "-q")
    assert proc.returncode == 2 and "already exists" in proc.stderr and kept.read_bytes() == b"precious"
    proc = run_cli("run", "--config", config, "--frames", "5", "--encoder-opt", "qcomp=0.5", "--device", "cpu", "-q")
    assert proc.returncode == 0, proc.stderr
    assert len(decode(kept).frames) == 5
    settings = kept.read_bytes()
    assert b"crf=40.0" in settings and b"subme=0" in settings and b"qcomp=0.50" in settings  # all three tables


@pytest.mark.parametrize("case", ["output is another's input", "same output", "frame linked to an input"])
def test_a_stream_that_would_write_what_another_reads_or_writes_is_refused(clips, tmp_path, case):
    """Checked before any stream starts: nothing of the user's is overwritten, every input stays as it was."""
    import shutil

    first, second = tmp_path / "first.mkv", tmp_path / "second.mkv"
    shutil.copy(clips[0], first)
    shutil.copy(clips[1], second)
    outputs = {"output is another's input": [second, tmp_path / "x.mkv"],
               "same output": [tmp_path / "x.mkv", tmp_path / "x.mkv"],
               "frame linked to an input": [tmp_path / "f%02d.png", tmp_path / "y.mkv"]}[case]
    if case == "frame linked to an input":
        os.symlink(second, tmp_path / "f02.png")
    config = tmp_path / "streams.toml"
    config.write_text(f'codec = "ffv1"\noverwrite = true\n[[streams]]\ninput = "{first}"\noutput = "{outputs[0]}"\n'
                      f'[[streams]]\ninput = "{second}"\noutput = "{outputs[1]}"\n')
    before = second.read_bytes()
    proc = run_cli("run", "--config", config, "--device", "cpu", "-q")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "stream" in proc.stderr and "Traceback" not in proc.stderr
    assert second.read_bytes() == before and not (tmp_path / "x.mkv").exists() and not (tmp_path / "y.mkv").exists()


def test_cli_several_inputs_need_a_directory(clips, tmp_path):
    proc = run_cli("run", *clips[:3], "--device", "cpu", "-q")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "several inputs need -o DIR/" in proc.stderr
    proc = run_cli("run", *clips[:2], "-o", tmp_path / "missing", "--device", "cpu", "-q")
    assert proc.returncode == 2 and "several inputs need -o DIR/" in proc.stderr, proc.stderr
    config = tmp_path / "streams.toml"  # [[streams]] without an output and no -o: not a silent null
    config.write_text(f'[[streams]]\ninput = "{clips[0]}"\n[[streams]]\ninput = "{clips[1]}"\n')
    proc = run_cli("run", "--config", config, "--device", "cpu", "-q")
    assert proc.returncode == 2 and "stream 1" in proc.stderr and "has no output" in proc.stderr, proc.stderr
    assert "-o DIR/" in run_cli("run", "--help").stdout


def test_cli_one_input_into_a_directory_and_several_into_a_missing_one(clips, tmp_path):
    """`run *.mkv -o out/` where the glob matches one file writes out/<stem>_processed<ext> as for several, and
    so does a config's `output = "out/"` (each was "is a directory", exit 4); several into a directory that
    is not there say so (it said "not a directory", as it does for a file)."""
    out = tmp_path / "out"
    out.mkdir()
    config = tmp_path / "into.toml"
    config.write_text('output = "out/"\n')  # read from the config's folder
    for given in (("-o", f"{out}/"), ("-o", str(out)), ("--config", str(config))):
        proc = run_cli("run", clips[0], *given, "--device", "cpu", "-q", "-y")
        assert proc.returncode == 0, proc.stderr
    assert [p.name for p in out.iterdir()] == [f"{clips[0].stem}_processed.mkv"]
    assert len(decode(out / f"{clips[0].stem}_processed.mkv").frames) == len(decode(clips[0]).frames)
    (tmp_path / "file").write_bytes(b"kept")
    for name, words in ((tmp_path / "missing", "no such directory"), (tmp_path / "file", "not a directory")):
        proc = run_cli("run", *clips[:2], "-o", f"{name}/", "--device", "cpu", "-q")
        assert proc.returncode == 4 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert words in proc.stderr
    assert (tmp_path / "file").read_bytes() == b"kept" and not (tmp_path / "missing").exists()


def test_a_configs_output_folder_takes_every_positional_as_an_input(clips, tmp_path):
    """`run a.mkv b.mkv --config c.toml` with the config's `output = "out/"` took b.mkv for the output (the
    IN OUT form), and -y replaced it with a's frames; -o on the command line still wins over the file."""
    out = tmp_path / "out"
    out.mkdir()
    config = tmp_path / "into.toml"
    config.write_text('output = "out/"\n')
    second = tmp_path / clips[1].name
    shutil.copy(clips[1], second)
    kept = second.read_bytes()
    proc = run_cli("run", clips[0], second, "--config", config, "--device", "cpu", "-q", "-y")
    assert proc.returncode == 0, proc.stderr
    assert second.read_bytes() == kept
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{c.stem}_processed.mkv" for c in clips[:2])
    given = tmp_path / "given.mkv"  # an input too: not there
    proc = run_cli("run", clips[0], given, "--config", config, "--device", "cpu", "-q", "-y")
    assert proc.returncode == 3 and f"{given.name}: no such file" in proc.stderr, proc.stderr
    proc = run_cli("run", clips[0], "-o", given, "--config", config, "--device", "cpu", "-q")
    assert proc.returncode == 0 and len(decode(given).frames) == len(decode(clips[0]).frames), proc.stderr


def test_the_api_writes_into_a_directory_as_the_command_line_does(clips, tmp_path):
    """run(src, "out/") was "is a directory" (and run(src, "kept.mp4/", overwrite=True) replaced kept.mp4);
    run_many([...], "file:///.../out/") was "no such directory" for one that is there."""
    out = tmp_path / "out"
    out.mkdir()
    pipeline.run(clips[0], f"{out}/", device="cpu", frames=2)
    pipeline.run_many([clips[1]], out.as_uri() + "/", device="cpu", frames=2)
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{c.stem}_processed.mkv" for c in clips[:2])
    kept = tmp_path / "kept.mp4"
    kept.write_bytes(b"kept")
    frames = [np.full((16, 16, 3), 7, np.uint8)] * 2
    for source in (clips[0], pipeline.ArraySource(frames, fps=2)):
        with pytest.raises(pipeline.OutputError, match="directory"):
            pipeline.run(source, f"{kept}/", device="cpu", overwrite=True)
    assert kept.read_bytes() == b"kept"


def test_a_streams_entry_may_name_a_folder_of_its_own(clips, tmp_path):
    """output = "one/" in a [[streams]] entry was "is a directory" (exit 4); two entries into one folder
    get two names."""
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
    entries = [("one/", clips[0]), ("two/", clips[0]), ("two/", clips[1])]
    config = tmp_path / "streams.toml"
    config.write_text("".join(f'[[streams]]\ninput = "{src}"\noutput = "{out}"\n' for out, src in entries))
    proc = run_cli("run", "--config", config, "--frames", "2", "--device", "cpu", "-q")
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in (tmp_path / "one").iterdir()] == [f"{clips[0].stem}_processed.mkv"]
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == sorted(
        f"{c.stem}_processed.mkv" for c in clips[:2])


def test_a_stream_url_ending_with_a_slash_is_no_directory():
    from pipeline.many import into_directory

    for url in ("udp://127.0.0.1:5999/", "srt://host:9000/", "http://host/upload/"):
        cfg = RunConfig(input="a.mp4", output=url, output_format="mpegts")
        assert into_directory(cfg).output == url


def test_a_muxer_given_names_the_extension_in_a_directory(clips, tmp_path):
    """-f mpegts -o out/ wrote out/<stem>_processed.mkv holding MPEG-TS."""
    out = tmp_path / "out"
    out.mkdir()
    for inputs, muxer in (([clips[0]], "mpegts"), (clips[:2], "nut")):
        proc = run_cli("run", *inputs, "-f", muxer, "-o", f"{out}/", "--frames", "2", "--device", "cpu", "-q")
        assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"{clips[0].stem}_processed.ts", f"{clips[0].stem}_processed.nut", f"{clips[1].stem}_processed.nut"])
    proc = run_cli("run", *clips[:2], "-o", out.as_uri(), "--frames", "2", "--device", "cpu", "-q", "-y")
    assert proc.returncode == 0, proc.stderr  # an existing directory as a URL, no slash: "two outputs"
    assert len(list(out.iterdir())) == 5


def test_the_default_output_of_a_long_name_is_shortened_as_in_a_directory(tmp_path):
    """A 250-byte input name: <stem>_processed.mp4 was past the file system's limit (exit 4)."""
    src = tmp_path / ("x" * 246 + ".mkv")
    make_sample.make_clip(src, width=32, height=32, frames=2, codec="ffv1", audio=False)
    proc = run_cli("run", src, "--device", "cpu", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    written = [p.name for p in tmp_path.iterdir() if p != src]
    assert len(written) == 1 and written[0].endswith("_processed.mkv") and len(written[0]) <= 255


@pytest.mark.gpu
def test_many_nvdec_streams_at_once(tmp_path):
    """Eight NVDEC decoders opened and run side by side in one process, each in device memory."""
    clip = make_sample.make_clip(tmp_path / "h264.mp4", width=640, height=360, frames=30, fps=30, seed=3)
    base = RunConfig(device="cuda", decode="nvdec", quiet=True)
    result = run_many(configs_for(base, [str(clip)] * 8, "null"))
    assert result.exit_code == 0, [s.error for s in result.streams]
    assert result.frames == 8 * 30
    assert all(s.stats["decode"] == "nvdec" and s.stats["memory"]["decoder_surfaces"] > 0 for s in result.streams)
    assert result.totals()["shared"]["arena_bytes_in_use"] == 0


def test_the_shared_arena_soak_script_reports_a_flat_arena(tmp_path):
    """scripts/soak_shared.py (the timed soak of the GPU machine), briefly on the CPU."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, str(root / "scripts" / "soak_shared.py"), "--rounds", "30",
                           "--device", "cpu", "--frames", "4", "--dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1].startswith("soak_shared: ok,") and "fragmentation" in lines[-2]


@pytest.mark.parametrize("worst", [0, 3, 130])
def test_a_summary_that_cannot_be_written_keeps_the_streams_worse_code(monkeypatch, tmp_path, worst):
    from rich.console import Console

    from pipeline import many, many_cli
    from pipeline.config import RunConfig
    from pipeline.errors import OutputError

    result = many.ManyResult([many.StreamResult("a.mp4", "null", worst, "failed" if worst else "")], 1.0, {})
    monkeypatch.setattr(many, "run_many", lambda configs, control=None: result)
    monkeypatch.setattr(many, "configs_for", lambda *args: [])

    def unwritable(self, path, exclusive=False):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(many.ManyResult, "write_json", unwritable)
    cfg = RunConfig(input="a.mp4", output="null", stats_json=str(tmp_path / "s.json"), quiet=True)
    err = Console(file=open(os.devnull, "w"))
    if worst == 0:
        with pytest.raises(OutputError, match="No space left"):
            many_cli.cmd_run_many(cfg, ["a.mp4"], None, err, lambda control: None)
    else:
        assert many_cli.cmd_run_many(cfg, ["a.mp4"], None, err, lambda control: None) == worst


def test_stats_json_of_many_streams_never_replaces_their_files_or_one_without_y(clips, tmp_path):
    import shutil

    first = tmp_path / "first.mkv"
    shutil.copy(clips[0], first)
    before = first.read_bytes()
    keep = tmp_path / "keep.json"
    keep.write_text("mine\n")
    for target, extra in ((first, ["-y"]), (keep, [])):
        proc = run_cli("run", first, clips[1], "-o", "null", "--device", "cpu", "-q", "--stats-json", target, *extra)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "--stats-json" in proc.stderr and "Traceback" not in proc.stderr
    assert first.read_bytes() == before and keep.read_text() == "mine\n"
    proc = run_cli("run", first, clips[1], "-o", "null", "--device", "cpu", "-q", "--stats-json", keep, "-y")
    assert proc.returncode == 0, proc.stderr
    assert read_json(keep)["totals"]["streams"] == 2


@pytest.mark.parametrize("case", ["stats on an entry's LUT", "stats on an entry's plugin", "output on another's plugin"])
def test_an_entrys_own_lut_and_plugins_are_kept_from_the_runs_writes(clips, tmp_path, case):
    """The top-level plugins and LUTs were kept; one entry's were replaced by the statistics file (with -y)."""
    lut = tmp_path / "warm.cube"
    lut.write_text((Path(__file__).resolve().parents[1] / "pipeline/presets/luts/warm.cube").read_text())
    (plugin := tmp_path / "plug.mkv").write_text("# a plugin that registers nothing\n")
    entry = {"stats on an entry's LUT": f'filters = "lut3d=file={lut}"',
             "stats on an entry's plugin": f'plugins = ["{plugin}"]',
             "output on another's plugin": f'plugins = ["{plugin}"]'}[case]
    top = f'stats_json = "{lut if "LUT" in case else plugin}"\n' if case.startswith("stats") else ""
    second_output = plugin if case.startswith("output") else tmp_path / "b.mkv"
    config = tmp_path / "streams.toml"
    config.write_text(f'{top}codec = "ffv1"\noverwrite = true\n[[streams]]\ninput = "{clips[0]}"\n'
                      f'output = "{tmp_path / "a.mkv"}"\n{entry}\n'
                      f'[[streams]]\ninput = "{clips[1]}"\noutput = "{second_output}"\n')
    before = {f: f.read_bytes() for f in (lut, plugin)}
    proc = run_cli("run", "--config", config, "--device", "cpu", "-q")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert ("a file the filter chain reads" if "LUT" in case else "a --plugin file") in proc.stderr
    assert {f: f.read_bytes() for f in before} == before and not (tmp_path / "a.mkv").exists()


READS_FILE_PLUGIN = """
import numpy as np
from pipeline.filters import Filter, Param, register_filter

@register_filter("reads_a_file")
class ReadsAFile(Filter):
    help = "copies the frame; its file parameter names a file it reads"
    params = (Param("file", str, "", is_path=True),)

    def cpu(self, src, dst, scratch):
        np.copyto(dst, src)
"""


@pytest.mark.parametrize("command", ["several inputs", "streams config", "batch"])
def test_a_file_a_plugins_filter_reads_is_kept_from_the_writes_of_every_command(clips, tmp_path, command):
    """One run refused it; several streams and a batch did not load the plugin before their checks and
    replaced the file (with -y) by the statistics, an output or the batch's JSON."""
    (tmp_path / "reads.py").write_text(READS_FILE_PLUGIN)
    data = tmp_path / "data.bin"
    data.write_text("the user's data\n")
    chain = ["--plugin", tmp_path / "reads.py", "--filters", f"reads_a_file=file={data}"]
    (tmp_path / "out").mkdir()
    if command == "several inputs":
        proc = run_cli("run", *clips[:2], "-o", f"{tmp_path / 'out'}/", *chain, "--stats-json", data, "-y",
                       "--device", "cpu", "-q")
    elif command == "streams config":
        config = tmp_path / "streams.toml"
        config.write_text(f'plugins = ["reads.py"]\nfilters = "reads_a_file=file={data}"\n[[streams]]\n'
                          f'input = "{clips[0]}"\noutput = "out/a.mkv"\n[[streams]]\ninput = "{clips[1]}"\n'
                          f'output = "{data}"\noutput_format = "matroska"\n')
        proc = run_cli("run", "--config", config, "-y", "--device", "cpu", "-q")
    else:
        proc = run_cli("batch", clips[0], "-o", tmp_path / "out", *chain, "--json", data, "-y", "--device", "cpu",
                       "--workers", "1", "-q")
    assert proc.returncode == 2 and "a file the filter chain reads" in proc.stderr, proc.stderr
    assert data.read_text() == "the user's data\n" and list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("value, said", [("ring_size = 100000", "Invalid ring_size (100000)"),
                                         ('encoder_opts = { crf = "nan" }', "Invalid encoder_opts value crf='nan'")])
def test_an_entrys_refused_value_names_the_file_and_the_entry(clips, tmp_path, value, said):
    """The line said what was wrong but not where: neither the file nor the entry."""
    config = tmp_path / "streams.toml"
    config.write_text(f'[[streams]]\ninput = "{clips[0]}"\n[[streams]]\ninput = "{clips[1]}"\n{value}\n')
    proc = run_cli("run", "--config", config, "-o", "null", "--device", "cpu", "-q")
    assert proc.returncode == 2 and f"{config}: [[streams]] entry 2: {said}" in proc.stderr, proc.stderr


@pytest.mark.parametrize("given", ["null", "DIR/"])
def test_o_beside_an_entrys_own_output_is_refused(clips, tmp_path, given):
    """-o null was ignored for an entry with its own output, whose file was written (with -y, replaced)."""
    theirs = tmp_path / "a.mkv"
    theirs.write_text("the user's file\n")
    config = tmp_path / "streams.toml"
    config.write_text(f'codec = "ffv1"\n[[streams]]\ninput = "{clips[0]}"\noutput = "{theirs}"\n'
                      f'[[streams]]\ninput = "{clips[1]}"\n')
    (tmp_path / "out").mkdir()
    target = "null" if given == "null" else f"{tmp_path / 'out'}/"
    proc = run_cli("run", "--config", config, "-o", target, "-y", "--device", "cpu", "-q")
    assert proc.returncode == 2 and "names its own output" in proc.stderr, proc.stderr
    assert theirs.read_text() == "the user's file\n" and list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("entry", ['device = "cpu"', 'stats_json = "x.json"', "pinned_cap_mib = 64"])
def test_a_setting_of_the_whole_run_in_one_streams_entry_is_refused(clips, tmp_path, entry):
    config = tmp_path / "streams.toml"
    config.write_text(f'codec = "ffv1"\n[[streams]]\ninput = "{clips[0]}"\n{entry}\n'
                      f'[[streams]]\ninput = "{clips[1]}"\n')
    proc = run_cli("run", "--config", config, "-o", "null", "--device", "cpu", "-q")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "whole run" in proc.stderr


def test_two_streams_on_one_pipe_are_refused(clips):
    proc = run_cli("run", "-", "-", "-o", "null", "--device", "cpu", "-q", input=clips[0].read_bytes(), text=False)
    assert proc.returncode == 2 and b"both read stdin" in proc.stderr, proc.stderr


def test_names_in_a_directory_for_urls_pipes_fifos_and_clashing_stems():
    taken: set[str] = set()
    names = [Path(output_for(s, "/o/", i, taken)).name for i, s in enumerate(
        ["udp://127.0.0.1:5999", "rtsp://user:pw@cam1/main?x=1", "live.fifo", "-", "a_2.mp4", "a.mp4", "x/a.mp4"])]
    assert names == ["127.0.0.1_5999_processed.mkv", "cam1_main_processed.mkv", "live_processed.mkv",
                     "stdin_processed.mkv", "a_2_processed.mp4", "a_processed.mp4", "a_6_processed.mp4"]
    assert output_for("a.mp4", "null", 0, set()) == "null"


def test_names_chosen_in_the_working_directory_stay_files(clips, tmp_path):
    """``-o .`` keeps its ``./``: without it pipe:clip_processed.mkv was refused as a pipe (exit 2) and
    http:x_processed.mkv would be a URL."""
    for name in ("pipe:clip.mkv", "http:x.mkv"):
        (tmp_path / name).write_bytes(clips[0].read_bytes())
    proc = run_cli("run", "./pipe:clip.mkv", "./http:x.mkv", "-o", ".", "--device", "cpu", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert all(len(decode(tmp_path / f"{stem}_processed.mkv").frames) == 12 for stem in ("pipe:clip", "http:x"))


def test_a_name_chosen_from_a_long_input_fits_the_filesystem(tmp_path):
    from pipeline.outfile import name_max

    taken: set[str] = set()
    long = "é" * 120 + ".mp4"  # 240 bytes: with "_processed" past the usual 255
    names = [Path(output_for(f"{d}/{long}", str(tmp_path), i, taken)).name for i, d in enumerate("xy")]
    assert len(set(names)) == 2 and all(n.endswith("_processed.mp4") for n in names)
    assert all(len(os.fsencode(n)) <= name_max(tmp_path) for n in names) and names[0].startswith("é" * 100)


def test_streams_stopped_early_keep_the_statistics_of_the_frames_they_did(clips, tmp_path):
    from pipeline.control import RunControl

    out = tmp_path / "out"
    out.mkdir()
    control = RunControl()

    def stop_at_the_fourth(frame) -> None:
        if frame.index == 3:
            control.stop(2)

    base = RunConfig(device="cpu", codec="ffv1", quiet=True, realtime=True)
    result = run_many(configs_for(base, [str(c) for c in clips[:2]], str(out)), control=control,
                      stage=stop_at_the_fourth)
    assert [s.exit_code for s in result.streams] == [130, 130]
    for stream in result.streams:  # the stream that asked: its first four at least; the other: what it had done
        assert 1 <= stream.stats["frames_out"] < 12
        assert len(decode(stream.output).frames) == stream.stats["frames_out"]
    assert max(s.stats["frames_out"] for s in result.streams) >= 4


def test_on_start_raising_fails_every_stream_and_keeps_no_output(clips, tmp_path):
    out = tmp_path / "out"
    out.mkdir()

    from pipeline.control import RunControl

    control = RunControl()

    def on_start(pipelines) -> None:  # once a stream has done frames
        deadline = time.monotonic() + 30
        while not any(p.stats.frames_out for p in list(pipelines)):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        raise ValueError("the application's own mistake")

    def stage(frame) -> None:  # no stream ends before the call fails
        if frame.index >= 2:
            control.stop_event.wait(30)

    base = RunConfig(device="cpu", codec="ffv1", quiet=True)
    with pytest.raises(ValueError, match="own mistake"):
        run_many(configs_for(base, [str(c) for c in clips], str(out)), control=control, on_start=on_start,
                 stage=stage)
    assert pipeline_threads() == [] and list(out.iterdir()) == []


def test_run_many_takes_a_list_of_sources_not_one(clips):
    with pytest.raises(ConfigError, match="list of sources"):
        pipeline.run_many(str(clips[0]), "null", device="cpu")


def _streams_config(tmp_path, *entries: str) -> Path:
    config = tmp_path / "streams.toml"
    config.write_text("".join(f"[[streams]]\n{entry}\n" for entry in entries))
    return config


def test_a_stream_writing_stdout_keeps_it_for_its_video(clips, tmp_path):
    """With stdout redirected to a file: --stats-json may not name that file, and the summary goes to stderr."""
    import subprocess

    from utils import cli_command

    config = _streams_config(tmp_path, f'input = "{clips[0]}"\noutput = "-"\noutput_format = "matroska"',
                             f'input = "{clips[1]}"\noutput = "null"')
    video = tmp_path / "v.mkv"
    for stats, code in ((video, 2), (tmp_path / "s.json", 0)):
        with open(video, "wb") as stdout:
            proc = subprocess.run([str(c) for c in cli_command("run", "--config", config, "--device", "cpu", "-c",
                                                               "ffv1", "--stats-json", stats, "-y")],
                                  stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120)
        assert proc.returncode == code, proc.stderr
    assert "is where stream 1 writes its video" not in proc.stderr and "2 streams" in proc.stderr
    assert len(decode(video).frames) == 12  # the whole file is the video: no table after it
    assert read_json(tmp_path / "s.json")["totals"]["streams"] == 2


@pytest.mark.parametrize("names", [("-", "/dev/stdin"), ("pipe:0", "/dev/fd/0")])
def test_one_pipe_named_two_ways_is_still_one_pipe(clips, names):
    proc = run_cli("run", *names, "-o", "null", "--device", "cpu", "-q", "-f", "matroska",
                   input=clips[0].read_bytes(), text=False)
    assert proc.returncode == 2 and b"both read stdin" in proc.stderr, proc.stderr


def test_two_streams_writing_stdout_by_two_names_are_refused(clips, tmp_path):
    config = _streams_config(tmp_path, f'input = "{clips[0]}"\noutput = "-"\noutput_format = "matroska"',
                             f'input = "{clips[1]}"\noutput = "/dev/stdout"\noutput_format = "matroska"')
    proc = run_cli("run", "--config", config, "--device", "cpu", "-q", "-y")
    assert proc.returncode == 2 and "both write stdout" in proc.stderr, proc.stderr


def test_an_input_on_the_command_line_beside_streams_in_the_config_is_refused(clips, tmp_path):
    config = _streams_config(tmp_path, f'input = "{clips[0]}"\noutput = "null"')
    proc = run_cli("run", clips[1], "--config", config, "--device", "cpu", "-q")
    assert proc.returncode == 2 and "not both" in proc.stderr, proc.stderr


def test_chosen_names_step_aside_from_outputs_given_and_file_urls_are_files(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    configs = configs_for(RunConfig(device="cpu"), ["d/a.mp4", "b.mp4", f"file://{tmp_path}/c.mov"], f"{out}/",
                          [{}, {"output": str(out / "a_processed.mp4")}, {}])
    assert [Path(c.output).name for c in configs] == ["a_0_processed.mp4", "a_processed.mp4", "c_processed.mov"]


def test_a_fifo_read_by_two_streams_is_refused_a_file_is_not(clips, tmp_path):
    from pipeline.checks import check_streams

    fifo = tmp_path / "cam.fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="both read the same pipe"):
        check_streams([(str(fifo), "null"), (str(fifo), "null")])  # stat only: nothing opens the FIFO
    check_streams([(str(clips[0]), "null"), (str(clips[0]), "null"), ("/dev/null", "null")])


@pytest.mark.parametrize("first, second", [("f%d.png", "f%1d.png"), ("f%d.png", "f5.png"),
                                           ("f%d.png", "f%02d.png"), ("f1%d.png", "f%d.png")])
def test_two_streams_whose_outputs_share_a_file_are_refused_before_either_runs(clips, tmp_path, first, second):
    """Only the same name was looked for: f%d.png and f%1d.png (or f5.png) wrote one set of files, one
    stream's frames replacing the other's with -y (exit 0); f%d and f%02d failed at the end, the first
    stream's work lost, with "appeared during the run"."""
    config = tmp_path / "two.toml"
    config.write_text("".join(f'[[streams]]\ninput = "{clip}"\noutput = "{name}"\n'
                              for clip, name in zip(clips, (first, second))))
    result = run_cli("run", "--config", config, "--device", "cpu", "-y", "-q")
    assert result.returncode == 2 and "streams 1 and 2 write the same file" in result.stderr, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["two.toml"]
    from pipeline.checks import check_streams

    check_streams([(str(clips[0]), str(tmp_path / "f%d.png")), (str(clips[1]), str(tmp_path / "g%d.png"))])


def test_a_streams_own_error_comes_before_its_devices_as_in_pipeline_run(tmp_path):
    """A missing input fails with exit 3 whether or not its GPU can be used, as `pipeline run` says it:
    each stream is checked and opened beside its backend's making, not after it."""
    from pipeline.many import SharedMemory

    cfg = RunConfig(input=str(tmp_path / "missing.mkv"), output="null", device="cuda", quiet=True)
    result = run_many([cfg], shared=SharedMemory("cpu"))
    assert result.streams[0].exit_code == 3, result.streams[0].error


def test_the_no_gpu_notice_is_said_once_for_several_streams(clips):
    from utils import gpu_available

    if gpu_available():
        pytest.skip("a GPU is present: no notice")
    proc = run_cli("run", *clips[:3], "-o", "null", "-q")
    assert proc.returncode == 0 and proc.stderr.count("running on the CPU") == 1, proc.stderr
