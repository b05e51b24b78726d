"""FFmpeg's habits on `pipeline run`: -i, a positional output, -vf, -c:v, -f, -n, -v/-loglevel, the time
syntax of -ss/-t/-to, and -progress. Parsing is checked in process; each alias once more as a subprocess."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path
from types import SimpleNamespace

import av
import numpy as np
import pytest
from utils import one_error, partials, pipeline_command, run_command, run_pipeline, video_frames

from pipeline.cli import build_parser, config_from_args, main
from pipeline.config import RunConfig
from pipeline.ffmpeg_args import parse_time
from pipeline.progress import ProgressReport, clock
from pipeline.sample import make_clip

FPS, FRAMES = 30, 60


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    return make_clip(tmp_path_factory.mktemp("clip") / "in.mp4", width=128, height=72, frames=FRAMES, fps=FPS)


def _parse(*argv: str) -> RunConfig:
    return config_from_args(build_parser().parse_args(["run", *argv]))


# -- the time syntax ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text, seconds", [
    ("90", 90.0), ("1.5", 1.5), (".5", 0.5), ("2.", 2.0), ("01:30", 90.0), ("1:02:03", 3723.0),
    ("0:01:30.5", 90.5), ("00:00:00.040", 0.04), ("1500ms", 1.5), ("250us", 0.00025), ("3s", 3.0),
])
def test_parse_time_takes_ffmpeg_durations(text, seconds):
    assert parse_time(text) == pytest.approx(seconds, abs=1e-12)


@pytest.mark.parametrize("text", ["", "-1", "1:60", "1:2:60", "abc", "1.5.2", "1h", "1:", ":30"])
def test_parse_time_refuses_the_rest(text):
    with pytest.raises(argparse.ArgumentTypeError, match="invalid time"):
        parse_time(text)


# -- aliases map to the long options (in process) ---------------------------------------------------


@pytest.mark.parametrize("alias, long", [
    (["-vf", "hflip"], ["--filters", "hflip"]),
    (["-c:v", "ffv1"], ["--codec", "ffv1"]),
    (["-c", "ffv1"], ["--codec", "ffv1"]),
    (["-vcodec", "ffv1"], ["--codec", "ffv1"]),
    (["-codec:v", "ffv1"], ["--codec", "ffv1"]),
    (["-f", "matroska"], ["--format", "matroska"]),
    (["-ss", "1.5"], ["--start", "1.5"]),
    (["-t", "00:02"], ["--duration", "2"]),
    (["-to", "0:00:03.5"], ["--end", "3.5"]),
    (["-n"], ["--no-overwrite"]),
    (["-y"], ["--overwrite"]),
    (["-filter:v", "hflip"], ["--filters", "hflip"]),
    (["-frames:v", "3"], ["--frames", "3"]),
    (["-vframes", "3"], ["--frames", "3"]),
    (["-frames", "3"], ["--frames", "3"]),
    (["-re"], ["--realtime"]),
    (["-hide_banner", "-nostdin", "-sn", "-dn", "-y"], ["-y"]),  # ffmpeg's that change nothing here
    (["-nostats"], []), (["-stats"], []),  # the progress bar's, which is no run setting
    (["-yq"], ["-y", "-q"]),  # flags run together, as argparse takes them
    (["-o=o.mp4", "-vf=hflip", "-ss=0.5"], ["-o", "o.mp4", "-vf", "hflip", "-ss", "0.5"]),  # argparse's forms
    (["-oo.mp4"], ["-o", "o.mp4"]),
    (["-yo", "o.mp4"], ["-y", "-o", "o.mp4"]),
])
def test_alias_gives_the_long_options_config(alias, long):
    assert _parse("in.mp4", *alias) == _parse("in.mp4", *long)


def test_c_and_c_v_are_one_option():
    assert _parse("in.mp4", "-c:v", "ffv1").codec == _parse("in.mp4", "-c", "ffv1").codec == "ffv1"
    assert _parse("in.mp4", "-c", "libx264", "-c:v", "ffv1").codec == "ffv1"  # the last one wins, as in ffmpeg


@pytest.mark.parametrize("argv", [
    ["-i", "in.mp4", "out.mkv"],
    ["in.mp4", "out.mkv"],
    ["in.mp4", "-vf", "hflip", "out.mkv"],  # the output after options, as ffmpeg takes it
    ["-vf", "hflip", "-i", "in.mp4", "-t", "1", "out.mkv"],
    ["-i", "in.mp4", "-o", "out.mkv"],
    ["in.mp4", "-o", "out.mkv"],
])
def test_input_and_output_in_either_style(argv):
    cfg = _parse(*argv)
    assert (cfg.input, cfg.output) == ("in.mp4", "out.mkv")


@pytest.mark.parametrize("argv, paths", [
    (["-vf", "hflip", "--", "-in.mp4", "-out.mkv"], ("-in.mp4", "-out.mkv")),
    (["in.mp4", "-vf", "hflip", "--", "-out.mkv"], ("in.mp4", "-out.mkv")),
    (["-o", "out.mkv", "--", "-in.mp4"], ("-in.mp4", "out.mkv")),
    (["--", "in.mp4", "out.mkv"], ("in.mp4", "out.mkv")),
])
def test_names_that_start_with_a_dash_follow_a_double_dash(argv, paths):
    cfg = _parse(*argv)
    assert (cfg.input, cfg.output) == paths


def test_n_sets_no_overwrite_over_a_config_file(tmp_path):
    (toml := tmp_path / "c.toml").write_text("overwrite = true\n")
    assert _parse("in.mp4", "--config", str(toml)).overwrite is True
    assert _parse("in.mp4", "--config", str(toml), "-n").overwrite is False


@pytest.mark.parametrize("argv, words", [
    ([], "an input is needed"),
    (["a.mp4", "b.mp4", "c.mp4"], "one input and one output"),
    (["-i", "a.mp4", "-i", "b.mp4"], "one input only"),
    (["a.mp4", "b.mp4", "-o", "c.mp4"], "two outputs"),
    (["-i", "a.mp4", "b.mp4", "c.mp4"], "one input and one output"),
    (["a.mp4", "-y", "-n"], "not allowed with"),
    (["a.mp4", "-t", "1", "-to", "2"], "not allowed with"),
    (["a.mp4", "-ss", "2", "-to", "1"], "must come after the start"),
    (["a.mp4", "-ss", "1:75"], "invalid time"),
    (["a.mp4", "-t", "0"], "Invalid duration"),
    (["a.mp4", "-v", "loud"], "invalid choice"),
])
def test_bad_paths_and_spans_are_usage_errors(argv, words, capsys):
    assert main(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and words in err, err


@pytest.mark.parametrize("command", ["run", "batch"])
@pytest.mark.parametrize("argv, words", [
    (["-crf", "20"], "-crf: encoder options are given as --encoder-opt KEY=VALUE: --encoder-opt crf=20"),
    (["-b:v", "2M"], "--encoder-opt b=2M"),
    (["-preset", "fast"], "--encoder-opt preset=fast"),
    (["-c:a", "aac"], "-c:a: the audio is copied where the container takes its codec"),
    (["-acodec", "aac"], "--audio copy|encode|none chooses"),
    (["-cq", "20"], "--encoder-opt cq=20"),  # read as -c q before: an encoder named q, 20 the output
    (["-crf:v", "20"], "--encoder-opt crf=20"),
    (["-crf", "-y"], "--encoder-opt crf=VALUE"),
    (["-codec", "libx264"], "-codec: not an option here; --codec (two dashes) is"),
    # argparse took these apart: -threads 4 as -t hreads, -s 64x48 as -ss, -noautorotate as -n -o autorotate.
    (["-threads", "4"], "-threads: --encoder-opt threads=N sets the encoder's threads"),
    (["-s", "64x48"], "-s: -vf scale=W:H sets the size"),
    (["-r", "30"], "-r: the output keeps the input's frame timing"),
    (["-map", "0:v"], "-map: a run takes the input's first video stream and its audio"),
    (["-movflags", "+faststart"], "--output-opt movflags=+faststart"),
    (["-vn"], "-vn: a run processes the video"),
    (["-noautorotate"], "-noautorotate: not an option here"),  # -n -o autorotate
    (["-yostats"], "-yostats: not an option here"),  # flags, then a value glued on: -nostdin's shape
    (["-itsoffset", "2"], "-itsoffset: not an option here"),  # -i tsoffset
    (["-yz"], "-yz: not an option here; --help lists them"),
])
def test_ffmpegs_encoder_and_audio_options_say_how_they_are_given_here(command, argv, words, capsys, tmp_path):
    """-crf 20 was read as -c rf and 20 as the output: "two outputs: 20 and -o ...", or a run that
    wrote 20 with an encoder named rf."""
    assert main([command, "a.mp4", "-o", str(tmp_path / "out"), *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and words in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["filters", "presets", "sample", "warmup", "probe", "bench"])
def test_every_command_refuses_a_word_it_would_take_apart(command, capsys):
    """`pipeline sample -hx` (as -hide_banner) printed the help and exited 0 (-h), having made nothing."""
    assert main([command, "-hx"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "pipeline: error: -hx: not an option here; --help lists them\n", err


def test_ffmpeg_options_after_a_double_dash_are_names():
    assert _parse("-o", "o.mkv", "--", "-crf").input == "-crf"


@pytest.mark.parametrize("command", ["run", "batch"])
def test_nostats_hides_the_progress_bar_as_in_ffmpeg(command, monkeypatch):
    """-nostats was -n -o stats: the output written into a file named "stats"."""
    from pipeline import cli

    parser = build_parser(command)
    assert parser.parse_args([command, "in.mp4", "-nostats"]).stats is False
    assert parser.parse_args([command, "in.mp4", "-stats"]).stats is True
    assert parser.parse_args([command, "in.mp4"]).stats is None
    if command == "run":
        seen = {}
        monkeypatch.setattr(cli, "cmd_run", lambda *a, **k: seen.update(k) or 0)
        assert main(["run", "in.mp4", "-o", "o.mkv", "-nostats", "--device", "cpu"]) == 0
        assert seen["bar"] is False


@pytest.mark.parametrize("command, argv, said", [
    # argparse matches a one-letter option before it looks for a space: "-nostdin x.mp4" wrote "stdin x.mp4"
    ("run", ["in.mp4", "-nostdin x.mp4"], "-nostdin x.mp4: not an option here; a name that starts with '-' goes "
                                         "after -- (or as ./-nostdin x.mp4)"),
    ("run", ["in.mp4", "-overwrite"], "-overwrite: not an option here; --overwrite (two dashes) is"),  # -o verwrite
    ("batch", ["in.mp4", "-output", "out/"], "-output: not an option here; --output (two dashes) is"),
    ("sample", ["-output.mp4"], "-output.mp4: not an option here; --output (two dashes) is"),  # wrote utput.mp4
    ("sample", ["-crf", "5"], "-crf: not an option here; --crf (two dashes) is"),  # sample's own, no --encoder-opt
    ("run", ["in.mp4", "-input_format", "mpegts"], "--input-format (two dashes) is"),
    ("run", ["in.mp4", "-framerate", "30"], "-framerate: not an option here"),  # -f ramerate
    ("run", ["in.mp4", "-o", "-sn", "b.mp4"], "-sn: not an option here"),  # a no-op where a value goes: no output
])
def test_words_argparse_would_take_apart_are_refused_whole(command, argv, said, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # what a word taken apart would write lands here, never in the checkout
    assert main([command, *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and said in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_name_starting_with_a_dash_and_holding_a_space_follows_a_double_dash():
    assert _parse("-o", "o.mkv", "--", "-my clip.mp4").input == "-my clip.mp4"


def test_config_file_colon_names_a_file_never_a_preset(tmp_path, monkeypatch):
    """--config file:denoise loaded the shipped preset, not the file named denoise."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "denoise").write_text("frames = 2\n")
    assert _parse("in.mp4", "--config", "file:denoise").frames == 2
    assert _parse("in.mp4", "--config", "denoise").frames is None


# -- each alias as a subprocess ----------------------------------------------------------------------


def test_ffmpeg_style_command_line(clip, tmp_path):
    """`pipeline run -i in.mp4 -vf hflip -t 1 out.mp4`, as the README shows it."""
    r = run_pipeline("-i", clip, "-vf", "hflip", "-t", "1", "out.mp4", "-q", quiet=False, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert len(video_frames(tmp_path / "out.mp4")) == FPS


def test_an_ffmpeg_scripts_no_op_options_run_as_without_them(clip, tmp_path):
    """`ffmpeg -hide_banner -nostdin -i IN ... OUT`: -hide_banner printed the help (exit 0, nothing written) and
    -nostdin and -nostats wrote the output into a file named "stdin" or "stats" (-n -o stdin)."""
    r = run_pipeline("-hide_banner", "-nostdin", "-nostats", "-i", clip, "-frames:v", "3", "-sn", "out.mp4", "-q",
                     quiet=False, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "", r.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["out.mp4"] and len(video_frames(tmp_path / "out.mp4")) == 3


def test_aliases_write_what_the_long_options_write(clip, tmp_path):
    short = run_pipeline("-i", clip, "-vf", "hflip", "-c:v", "ffv1", "-f", "matroska", "-ss", "0.5", "-t", "1",
                         "-v", "error", "short.bin", quiet=False, cwd=tmp_path)
    long = run_pipeline(clip, "-o", "long.bin", "--filters", "hflip", "--codec", "ffv1", "--format", "matroska",
                        "--start", "0.5", "--duration", "1", "--loglevel", "error", quiet=False, cwd=tmp_path)
    assert short.returncode == 0 and long.returncode == 0, short.stderr + long.stderr
    with av.open(str(tmp_path / "short.bin")) as c:
        assert "matroska" in c.format.name and c.streams.video[0].codec_context.name == "ffv1"
    a, b = video_frames(tmp_path / "short.bin"), video_frames(tmp_path / "long.bin")
    assert len(a) == len(b) == FPS
    assert all(np.array_equal(x.to_ndarray(), y.to_ndarray()) and x.pts == y.pts for x, y in zip(a, b))


def test_flip_of_vf_is_applied(clip, tmp_path):
    plain = run_pipeline(clip, "plain.mkv", "-c:v", "ffv1", "-vf", "", "-t", "0.2", "-q", quiet=False, cwd=tmp_path)
    flipped = run_pipeline(clip, "flip.mkv", "-c:v", "ffv1", "-vf", "hflip", "-t", "0.2", "-q", quiet=False,
                           cwd=tmp_path)
    assert plain.returncode == flipped.returncode == 0, plain.stderr + flipped.stderr
    a = video_frames(tmp_path / "plain.mkv")[0].to_ndarray(format="rgb24").astype(int)
    b = video_frames(tmp_path / "flip.mkv")[0].to_ndarray(format="rgb24").astype(int)
    assert np.abs(a[:, ::-1] - b).mean() < 3 < np.abs(a - b).mean()


def test_n_never_replaces_an_existing_output(clip, tmp_path):
    (tmp_path / "out.mp4").write_bytes(b"keep me")
    r = run_pipeline("-n", "-i", clip, "out.mp4", "-q", quiet=False, cwd=tmp_path)
    assert r.returncode == 2 and "already exists" in r.stderr
    assert (tmp_path / "out.mp4").read_bytes() == b"keep me"
    r = run_pipeline("-n", "-y", "-i", clip, "out.mp4", "-q", quiet=False, cwd=tmp_path)
    assert r.returncode == 2 and "not allowed with" in r.stderr


@pytest.mark.parametrize("option", ["-v", "-loglevel", "--loglevel"])
def test_loglevel_aliases(clip, tmp_path, option):
    # A notice at info level: --drop-policy on a file is read with block.
    args = (clip, "out.mp4", "-t", "0.2", "-q", "--drop-policy", "drop-oldest")
    shown = run_pipeline(*args, quiet=False, cwd=tmp_path)
    quiet = run_pipeline(*args, "-y", option, "error", quiet=False, cwd=tmp_path)
    assert shown.returncode == quiet.returncode == 0, shown.stderr + quiet.stderr
    assert "--drop-policy" in shown.stderr and quiet.stderr == ""


# -- -progress ---------------------------------------------------------------------------------------

KEYS = ("frame", "fps", "bitrate", "total_size", "out_time_us", "out_time_ms", "out_time", "dup_frames",
        "drop_frames", "speed", "progress")


def blocks(text: str) -> list[dict[str, str]]:
    """ffmpeg's -progress output: key=value lines, each block ended by a progress= line."""
    out, block = [], {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        block[key] = value
        if key == "progress":
            out.append(block)
            block = {}
    assert block == {}, f"trailing lines after the last block: {block}"
    return out


def test_progress_to_a_file(clip, tmp_path):
    r = run_pipeline(clip, "out.mp4", "-q", "-progress", "progress.txt", quiet=False, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    found = blocks((tmp_path / "progress.txt").read_text())
    last = found[-1]
    assert tuple(last) == KEYS and last["progress"] == "end"
    assert all(b["progress"] == "continue" for b in found[:-1])
    assert int(last["frame"]) == FRAMES and int(last["drop_frames"]) == 0
    assert int(last["out_time_us"]) == int(last["out_time_ms"]) == FRAMES * 1_000_000 // FPS
    assert last["out_time"] == "00:00:02.000000"
    assert int(last["total_size"]) == (tmp_path / "out.mp4").stat().st_size
    assert last["speed"].endswith("x") and float(last["speed"][:-1]) > 0 and float(last["fps"]) > 0


def test_progress_about_once_a_second_on_stdout(clip, tmp_path):
    # --realtime reads the 2 s clip at its own rate: a block a second while it runs, then the last.
    r = run_pipeline(clip, "out.mp4", "-q", "--realtime", "-progress", "pipe:1", quiet=False, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    found = blocks(r.stdout)
    assert 2 <= len(found) <= 4, r.stdout
    assert [b["progress"] for b in found] == ["continue"] * (len(found) - 1) + ["end"]
    frames = [int(b["frame"]) for b in found]
    assert frames == sorted(frames) and frames[-1] == FRAMES
    assert all(0 < float(b["out_time_us"]) <= 2_000_000 for b in found)


def test_progress_refusals(clip, tmp_path):
    r = run_pipeline(clip, "-o", "-", "-f", "mpegts", "-progress", "pipe:1", quiet=False, cwd=tmp_path)
    assert r.returncode == 2 and "stdout carries the video" in r.stderr and r.stdout == ""
    r = run_pipeline(clip, "out.mp4", "-progress", "udp://127.0.0.1:9", quiet=False, cwd=tmp_path)
    assert r.returncode == 2 and "-progress" in r.stderr
    r = run_pipeline(clip, "out.mp4", "-progress", tmp_path / "missing" / "p.txt", quiet=False, cwd=tmp_path)
    assert r.returncode == 4 and "-progress directory" in r.stderr and "does not exist" in r.stderr
    assert not (tmp_path / "out.mp4").exists()


@pytest.mark.parametrize("which", ["input", "output", "stats"])
def test_progress_refuses_the_runs_own_files_and_truncates_nothing(clip, tmp_path, which):
    """-progress FILE truncated FILE before the run's checks: naming the input emptied it."""
    src = tmp_path / "in.mp4"
    src.write_bytes(clip.read_bytes())
    out, stats = tmp_path / "out.mp4", tmp_path / "stats.json"
    out.write_bytes(b"kept output")
    stats.write_text("{}")
    named = {"input": "./in.mp4", "output": out, "stats": "stats.json"}[which]
    r = run_pipeline(src, "-o", out, "-y", "--stats-json", stats, "-progress", named, cwd=tmp_path)
    one_error(r, 2, "-progress is the")
    assert src.read_bytes() == clip.read_bytes()
    assert out.read_bytes() == b"kept output" and stats.read_text() == "{}"
    assert partials(tmp_path) == []


def test_progress_refuses_a_file_a_plugin_filter_reads_and_a_lut_named_with_a_tilde(clip, tmp_path):
    (tmp_path / "rp.py").write_text(
        "from pipeline.filters import Filter, Param, register_filter\n\n"
        "@register_filter('readmask')\nclass ReadMask(Filter):\n    params = (Param('file', str, '', is_path=True),)\n")
    (mask := tmp_path / "mask.bin").write_bytes(b"a mask")
    r = run_pipeline(clip, "-o", "out.mp4", "--plugin", "rp.py", "-vf", "readmask=file=mask.bin", "-progress",
                     "mask.bin", cwd=tmp_path)
    one_error(r, 2, "-progress is a file the filter chain reads")
    assert mask.read_bytes() == b"a mask"
    (tmp_path / "~").mkdir()  # a LUT named "~/x.cube" is read as written, from ./~ : that is the file kept
    lut = tmp_path / "~" / "x.cube"
    lut.write_text((Path(__file__).resolve().parents[1] / "pipeline/presets/luts/warm.cube").read_text())
    before = lut.read_bytes()
    r = run_pipeline(clip, "-o", "out.mp4", "-vf", "lut3d=file=~/x.cube", "-progress", "./~/x.cube", cwd=tmp_path)
    one_error(r, 2, "-progress is a file the filter chain reads")
    assert lut.read_bytes() == before


@pytest.mark.parametrize("which", ["config", "lut", "lut_in_config", "plugin"])
def test_progress_refuses_the_files_the_run_reads_and_truncates_none(clip, tmp_path, which):
    """The config file, a LUT of the chain (named directly or by the config) and a plugin are read by the
    run: -progress naming one would empty it."""
    lut = tmp_path / "warm.cube"
    lut.write_text((Path(__file__).resolve().parents[1] / "pipeline/presets/luts/warm.cube").read_text())
    (config := tmp_path / "c.toml").write_text('filters = "lut3d=file=warm.cube"\n')
    (plugin := tmp_path / "plug.py").write_text("# a plugin that registers nothing\n")
    args = {"config": ("--config", config), "lut": ("-vf", f"lut3d=file={lut}"),
            "lut_in_config": ("--config", config), "plugin": ("--plugin", plugin)}[which]
    named = {"config": config, "lut": lut, "lut_in_config": lut, "plugin": plugin}[which]
    before = {f: f.read_bytes() for f in (lut, config, plugin)}
    r = run_pipeline(clip, "-o", tmp_path / "out.mp4", *args, "-progress", named, cwd=tmp_path)
    one_error(r, 2, "-progress is", str(named.name))
    assert {f: f.read_bytes() for f in before} == before
    assert not (tmp_path / "out.mp4").exists()


def test_progress_refuses_stdout_when_it_carries_the_video(clip, tmp_path):
    with open(tmp_path / "video.ts", "wb") as video:
        r = subprocess.run(pipeline_command(clip, "-o", "-", "-f", "mpegts", "-progress", "/dev/stdout"),
                           stdout=video, stderr=subprocess.PIPE, text=True, timeout=60)
    one_error(r, 2, "is stdout")
    assert (tmp_path / "video.ts").stat().st_size == 0


@pytest.mark.parametrize("fd", [1, 2])
@pytest.mark.parametrize("which", ["input", "output"])
def test_progress_into_a_pipe_redirected_to_the_runs_own_file_is_refused(clip, tmp_path, fd, which):
    """``-progress pipe:1`` with stdout opened onto the input (``1<>in.mp4``) wrote progress lines into it,
    where ``-progress /dev/stdout`` was refused."""
    src, out = tmp_path / "in.mp4", tmp_path / "out.mp4"
    src.write_bytes(clip.read_bytes())
    out.write_bytes(b"kept output")
    kept = {"input": src, "output": out}[which]
    before = kept.read_bytes()
    with open(kept, "r+b") as redirected:
        streams = {"stdout": redirected} if fd == 1 else {"stdout": subprocess.PIPE, "stderr": redirected}
        r = subprocess.run(pipeline_command(src, "-o", out, "-y", "-progress", f"pipe:{fd}"), timeout=60,
                           **{"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **streams})
    assert r.returncode == 2
    said = f"pipe:{fd} (file descriptor {fd}): -progress is the {which}"
    if fd == 1:
        assert kept.read_bytes() == before and said in r.stderr.decode()
    else:  # on stderr, the error itself lands in the file: that much the redirection asked for
        assert said.encode() in kept.read_bytes()


def test_progress_into_a_pipe_on_a_device_or_a_closed_one(clip, tmp_path):
    """Two writers into /dev/null harm nothing (the same device as --stats-json /dev/null); a closed stdout
    has nowhere to write (an internal error)."""
    command = pipeline_command(clip, "-o", "null", "--stats-json", "/dev/null", "-progress", "pipe:1")
    r = run_command(["sh", "-c", '"$@" >/dev/null', "sh", *command])
    assert r.returncode == 0, r.stderr
    command = pipeline_command(clip, "-o", "null", "-progress", "pipe:1")
    r = run_command(["sh", "-c", '"$@" >&-', "sh", *command])
    one_error(r, 2, "-progress pipe:1: stdout is closed")


def test_progress_with_several_inputs_is_refused(clip, tmp_path):
    """It was left unwritten, with exit 0."""
    r = run_pipeline(clip, clip, "-o", "null", "-progress", "p.txt", cwd=tmp_path)
    one_error(r, 2, "-progress p.txt", "several streams")
    assert not (tmp_path / "p.txt").exists()


def test_progress_block_format(monkeypatch):
    lines = []
    report = ProgressReport(SimpleNamespace(write=lines.append, flush=lambda: None))
    report.frame_s = 0.04
    stats = SimpleNamespace(frames_out=250, started=0.0, dropped=3, first_pts_s=1.4, last_pts_s=11.36)
    monkeypatch.setattr("time.perf_counter", lambda: 5.0)
    report.write(stats, ended=False)
    block = blocks(lines[0])[0]
    assert block["frame"] == "250" and block["fps"] == "50.00" and block["drop_frames"] == "3"
    assert block["out_time_us"] == "10000000" and block["out_time"] == "00:00:10.000000"
    assert block["speed"] == "2x" and block["progress"] == "continue" and block["bitrate"] == "N/A"


def test_progress_into_a_fifo_nobody_reads_is_given_up_as_stats_json_is(clip, tmp_path, monkeypatch, capsys):
    import os

    from pipeline import reportfile

    monkeypatch.setattr(reportfile, "FIFO_WAIT_S", 0.3)
    os.mkfifo(tmp_path / "fifo")
    assert main(["run", str(clip), "-o", str(tmp_path / "out.mp4"), "-q", "--device", "cpu",
                 "-progress", str(tmp_path / "fifo")]) == 4
    err = capsys.readouterr().err.strip()
    assert err.endswith("cannot write -progress: a FIFO no process read within 0.3 s") and "\n" not in err
    assert not (tmp_path / "out.mp4").exists()


def test_a_progress_write_that_fails_is_said_once_and_the_run_goes_on(caplog):
    import errno

    def full(_text):
        raise OSError(errno.ENOSPC, "No space left on device")

    report = ProgressReport(SimpleNamespace(write=full, flush=lambda: None))
    stats = SimpleNamespace(frames_out=1, started=0.0, dropped=0, first_pts_s=0.0, last_pts_s=0.0)
    report.write(stats, ended=False)
    report.write(stats, ended=True)  # silenced: no second warning
    warnings = [r.getMessage() for r in caplog.records if "-progress" in r.getMessage()]
    assert warnings == ["-progress: write failed (No space left on device); no more progress is written"]


def test_clock_is_ffmpegs_out_time():
    assert clock(0) == "00:00:00.000000"
    assert clock(3_723_040_000) == "01:02:03.040000"
    assert clock(500_000) == "00:00:00.500000"


@pytest.mark.parametrize("args, said", [
    (["-c", "copy"], "-c copy: every frame is decoded, filtered and encoded again, so there is no stream copy"),
    (["-f", "v4l2"], "-f v4l2 writes to a device, not a file or a stream"),
    (["-f", "fbdev"], "-f fbdev writes to a device, not a file or a stream"),
    (["-f", "video4linux2"], "the video4linux2 muxer opens its own output"),
    (["-f", "sap"], "the sap muxer opens its own output"),
    (["-f", "rtsp"], "the rtsp muxer opens its own output"),
    (["-f", "uncodedframecrc"], "-f framecrc checksums the encoded frames"),
])
def test_ffmpeg_habits_the_pipeline_has_no_part_for_are_said_as_such(clip, tmp_path, args, said):
    """-c copy was an "unknown encoder 'copy'", and -f v4l2 failed at the open naming the temporary file."""
    out = tmp_path / "out.mkv"
    line = one_error(run_pipeline(clip, "-o", out, *args, cwd=tmp_path), 2, said)
    assert ".partial" not in line and not out.exists() and partials(tmp_path) == []


@pytest.mark.parametrize("args, said", [
    (["-f", "image2"], "the image2 muxer writes files by their names, a pipe carries one stream (-f image2pipe"),
    (["-f", "video4linux2"], "the video4linux2 muxer opens its own output"),
    (["-f", "uncodedframecrc"], "-f framecrc checksums the encoded frames"),
])
def test_a_muxer_that_cannot_write_into_the_pipe_is_refused_before_the_run(clip, tmp_path, args, said):
    """-o - -f image2 wrote its picture into a file named "<none>" in the current directory, stdout empty."""
    result = run_command(pipeline_command(clip, "-o", "-", *args), cwd=tmp_path)
    line = one_error(result, 2, said)
    assert "<none>" not in line and result.stdout == "" and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [["run", "in.mp4", "-c", "g\udcff"], ["run", "in.mp4", "-f", "g\udcff"],
                                  ["run", "in.mp4", "--encoder-opt", "crf=\udcff"],
                                  ["run", "in.mp4", "--input-opt", "\udcff=1"], ["sample", "--codec", "g\udcff"],
                                  ["batch", "in.mp4", "--output-opt", "brand=\udcff"]])
def test_an_option_value_that_is_not_utf8_is_a_usage_error_naming_it(argv, capsys):
    """Bytes that are not UTF-8 ($'\\xff' in a shell) reached FFmpeg: an encoding error naming no option,
    exit 3 for an --input-opt, or a line blaming the container."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "\\xff' is not UTF-8 text" in err, err


@pytest.mark.parametrize("command", ["filters", "presets", "sample", "warmup", "probe", "batch", "bench", "run"])
def test_every_command_takes_debug_which_its_internal_errors_name(command):
    """An internal error's line says "--debug shows the traceback", but five commands refused --debug."""
    from pipeline.cli_parser import build_parser

    args = build_parser(command).parse_args([command, "--debug", *(["x.mp4"] if command in ("bench", "batch") else [])])
    assert args.debug
