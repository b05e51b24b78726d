"""Configuration: RunConfig validation, TOML files, flags over file values, the CLI parser and filter chains."""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import fields
from pathlib import Path

import pytest

from utils import run_cli
from pipeline.cli import add_run_arguments, build_parser, config_from_args, main
from pipeline.config import DEFAULT_FILTERS, RunConfig, build_config
from pipeline.config_file import load_toml
from pipeline.errors import ConfigError
from pipeline.filters import parse_chain

# --- RunConfig validation ---------------------------------------------------------------------------


def test_defaults_are_valid():
    cfg = RunConfig(input="in.mp4")
    assert (cfg.device, cfg.alloc, cfg.ring_size, cfg.filters) == ("auto", "pool", 8, DEFAULT_FILTERS)


@pytest.mark.parametrize("value", [0, 1, -3, 257, 10**30])
def test_ring_size_out_of_range(value):
    with pytest.raises(ConfigError) as info:
        RunConfig(ring_size=value)
    assert str(info.value) == f"Invalid ring_size ({value}). Supported values are integers from 2 to 256."


@pytest.mark.parametrize("name, low, high", [("ring_size", 2, 256), ("streams", 1, 32), ("in_flight", 1, 64)])
def test_counts_that_size_the_set_up_have_a_largest_value(name, low, high):
    assert getattr(RunConfig(**{name: low}), name) == low
    assert getattr(RunConfig(**{name: high}), name) == high
    for value in (high + 1, 100_000):
        with pytest.raises(ConfigError, match=re.escape(f"Invalid {name} ({value}). Supported values are integers "
                                                        f"from {low} to {high}.")):
            RunConfig(**{name: value})


@pytest.mark.parametrize("value", ["8", 8.0, True, None])
def test_ring_size_must_be_an_integer(value):
    with pytest.raises(ConfigError, match=re.escape(f"Invalid ring_size ({value!r})")):
        RunConfig(ring_size=value)


def test_device_message_lists_choices():
    with pytest.raises(ConfigError) as info:
        RunConfig(device="gpu")
    assert str(info.value) == "Invalid device ('gpu'). Supported values are auto, cuda, cuda:N (a GPU's index), cpu."
    for good in ("cuda:0", "cuda:12"):
        assert RunConfig(device=good).device == good
    for bad in ("cuda:", "cuda:-1", "cuda:x", "CUDA", "cuda:\u0661"):  # cuda:١ was taken for cuda:1
        with pytest.raises(ConfigError):
            RunConfig(device=bad)


def test_alloc_message_lists_choices():
    with pytest.raises(ConfigError) as info:
        RunConfig(alloc="slab")
    message = str(info.value)
    assert message.startswith("Invalid alloc ('slab'). Supported values are ")
    for choice in ("pool", "naive"):
        assert choice in message


@pytest.mark.parametrize(
    "changes, name",
    [({"streams": 0}, "streams"), ({"in_flight": 0}, "in_flight"), ({"frames": 0}, "frames"),
     ({"arena_headroom": 0.5}, "arena_headroom")],
)
def test_other_limits(changes, name):
    with pytest.raises(ConfigError, match=f"Invalid {name} "):
        RunConfig(**changes)


@pytest.mark.parametrize("value", [0.5, -0.0, 4.01, 1e308, 5e-324, True, "2"])
def test_arena_headroom_out_of_range(value):
    with pytest.raises(ConfigError, match=re.escape(f"Invalid arena_headroom ({value!r}). Supported values are "
                                                    "numbers from 1.0 to 4.0.")):
        RunConfig(arena_headroom=value)
    assert RunConfig(arena_headroom=1).arena_headroom == 1 and RunConfig(arena_headroom=4.0).arena_headroom == 4.0


@pytest.mark.parametrize("name", ["start", "duration", "end"])
def test_span_times_have_a_largest_value(name):
    assert getattr(RunConfig(**{name: 10**9}), name) == 10**9
    for value in (10**9 + 1, 1e20, 1e308):
        with pytest.raises(ConfigError, match=re.escape(f"Invalid {name} ({value!r}). Supported values are numbers "
                                                        "of seconds from 0 to 1,000,000,000.")):
            RunConfig(**{name: value})


def test_config_error_is_a_value_error():
    with pytest.raises(ValueError):
        RunConfig(ring_size=1)


def test_output_path_default_is_stem_processed_in_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert RunConfig(input="/videos/clip.mkv").output_path() == tmp_path / "clip_processed.mkv"
    assert RunConfig(input="/videos/noext").output_path() == tmp_path / "noext_processed.mp4"
    assert RunConfig(input="/videos/clip.mkv", output="x/y.mp4").output_path() == Path("x/y.mp4")


def test_replace_validates():
    cfg = RunConfig()
    assert cfg.replace(ring_size=3).ring_size == 3
    with pytest.raises(ConfigError):
        cfg.replace(ring_size=1)


# --- TOML files ----------------------------------------------------------------------------------


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(text)
    return path


def test_toml_accepts_dashes_and_underscores(tmp_path):
    path = _toml(tmp_path, 'ring-size = 4\nin_flight = 3\ndevice = "cpu"\narena-headroom = 1.5\n'
                           '[encoder-opts]\ncrf = 18\npreset = "slow"\n')
    assert load_toml(path) == {
        "ring_size": 4, "in_flight": 3, "device": "cpu", "arena_headroom": 1.5,
        "encoder_opts": {"crf": "18", "preset": "slow"},
    }


def test_toml_plugins_become_a_tuple_of_paths_relative_to_the_file(tmp_path):
    a, b = str(tmp_path / "a.py"), str(tmp_path / "b.py")
    assert load_toml(_toml(tmp_path, 'plugins = ["a.py", "b.py"]\n')) == {"plugins": (a, b)}
    assert load_toml(_toml(tmp_path, 'plugins = "a.py"\n')) == {"plugins": (a,)}


def test_a_config_files_inputs_and_outputs_are_relative_to_it_as_its_plugins_are(tmp_path):
    """An input and an output named alike in one [[streams]] entry are one file (the output was taken from
    the current directory, and with -y replaced another file than the one read)."""
    from pipeline.config_file import STREAM_LIST

    (tmp_path / "cfg").mkdir()
    text = ('output = "all.mkv"\nstats_json = "s.json"\n[[streams]]\ninput = "../c.mp4"\noutput = "../c.mp4"\n'
            '[[streams]]\ninput = "srt://host:9000"\noutput = "null"\n[[streams]]\ninput = "d.mp4"\noutput = "-"\n')
    values = load_toml(_toml(tmp_path / "cfg", text))
    base = tmp_path / "cfg"
    assert values["output"] == str(base / "all.mkv") and values["stats_json"] == str(base / "s.json")
    first, url, piped = values[STREAM_LIST]
    assert Path(first["input"]).resolve() == Path(first["output"]).resolve() == tmp_path / "c.mp4"
    assert url == {"input": "srt://host:9000", "output": "null"}
    assert piped == {"input": str(base / "d.mp4"), "output": "-"}


def test_a_config_keeps_a_directorys_slash_and_reads_file_urls_as_files(tmp_path):
    """output = "kept.mp4/" became .../kept.mp4 (a run with -y replaced that file), and plugins named by
    file:// URLs were looked for as .../file:/... (in a config) or file:/... (from the API)."""
    values = load_toml(_toml(tmp_path, f'output = "out/"\nstats_json = "{(tmp_path / "s.json").as_uri()}"\n'
                                       f'plugins = ["{(tmp_path / "p.py").as_uri()}"]\n'))
    assert values == {"output": f"{tmp_path}/out/", "stats_json": str(tmp_path / "s.json"),
                      "plugins": (str(tmp_path / "p.py"),)}
    assert RunConfig(plugins=[(tmp_path / "p.py").as_uri()]).plugins == (str(tmp_path / "p.py"),)


def test_a_config_output_ending_with_a_slash_never_replaces_that_file(tmp_path, clip):
    kept = tmp_path / "kept.mp4"
    kept.write_bytes(b"kept")
    config = _toml(tmp_path, 'output = "kept.mp4/"\n')
    proc = run_cli("run", clip, "--config", config, "--device", "cpu", "-q", "-y")
    assert proc.returncode == 4 and "is a file, not a directory" in proc.stderr, proc.stderr
    assert kept.read_bytes() == b"kept"


def test_a_config_reached_through_a_link_is_relative_to_the_link_as_named(tmp_path):
    """As the README says: the folder of the file as named, so a link to a shared config reads its neighbours."""
    (tmp_path / "shared").mkdir()
    (tmp_path / "job").mkdir()
    real = _toml(tmp_path / "shared", 'output = "out.mkv"\n')
    (tmp_path / "job" / "link.toml").symlink_to(real)
    assert load_toml(tmp_path / "job" / "link.toml") == {"output": str(tmp_path / "job" / "out.mkv")}


@pytest.mark.parametrize("text", ['output = ""\n', 'stats_json = ""\n', 'plugins = ["a.py", ""]\n',
                                  '[[streams]]\ninput = "a.mp4"\noutput = ""\n', '[[streams]]\ninput = ""\n'],
                         ids=["output", "stats_json", "plugin", "entry-output", "entry-input"])
def test_an_empty_name_in_a_config_file_is_refused_as_on_the_command_line(tmp_path, text):
    # It used to mean the default output (or, in a [[streams]] entry, no output at all), unseen.
    with pytest.raises(ConfigError, match="empty name"):
        load_toml(_toml(tmp_path, text))


def test_an_unknown_home_directory_in_a_config_file_stays_a_name_as_a_shell_leaves_it(tmp_path):
    from pipeline.config_file import STREAM_LIST

    text = ('output = "~nosuchuser/o.mp4"\nstats_json = "~nosuchuser/s.json"\nplugins = ["~nosuchuser/p.py"]\n'
            'filters = "lut3d=file=~nosuchuser/x.cube"\n[[streams]]\ninput = "~nosuchuser/a.mp4"\n')
    values = load_toml(_toml(tmp_path, text))  # Path.expanduser raised RuntimeError: an internal error
    home = tmp_path / "~nosuchuser"
    assert values["output"] == str(home / "o.mp4") and values["stats_json"] == str(home / "s.json")
    assert values["plugins"] == (str(home / "p.py"),) and values[STREAM_LIST][0]["input"] == str(home / "a.mp4")
    assert values["filters"] == f"lut3d=file={home / 'x.cube'}"


def test_a_home_directory_in_a_config_files_filter_chain_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    values = load_toml(_toml(tmp_path, 'filters = "lut3d=file=~/x.cube"\nplugins = "~/p.py"\n'))
    assert values["filters"] == f"lut3d=file={tmp_path / 'home' / 'x.cube'}"  # was left as ~/x.cube
    assert values["plugins"] == (str(tmp_path / "home" / "p.py"),)
    monkeypatch.setenv("HOME", str(tmp_path / "a,b"))  # the chain has no quoting: refused, not split there
    with pytest.raises(ConfigError, match="cannot contain ':' or ','"):
        load_toml(_toml(tmp_path, 'filters = "lut3d=file=~/x.cube"\n'))


@pytest.mark.parametrize("key", ["colour", "ring-sizes", "input"])
def test_toml_unknown_key_is_named(tmp_path, key):
    path = _toml(tmp_path, f"{key} = 1\n")
    with pytest.raises(ConfigError) as info:
        load_toml(path)
    assert repr(key) in str(info.value)
    assert str(path) in str(info.value)


def test_toml_syntax_error(tmp_path):
    path = _toml(tmp_path, "ring_size = = 4\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_toml(path)


@pytest.mark.parametrize("text", ["a" + ".a" * 120_000 + " = 1\n", "[" + "a." * 500 + "a]\nx = 1\n",
                                  '  "q".' + "b." * 64 + "c = 1\n", "x = {" + "a." * 5000 + "a = 1}\n"],
                         ids=["key", "table", "quoted-first", "inline"])
def test_a_key_of_many_dotted_parts_is_refused_before_the_parser_spends_minutes_on_it(tmp_path, text):
    # Parsed, 120 000 parts would take the parser about half an hour (8 000 took 0.5 s, growing as the square).
    with pytest.raises(ConfigError, match="a key of more than 64 dotted parts"):
        load_toml(_toml(tmp_path, text))


def test_dots_in_values_and_short_dotted_keys_are_fine(tmp_path):
    text = 'filters = "gblur=sigma=1.5,eq=contrast=1.1"\n[encoder-opts]\nx264-params = "' + "a." * 80 + 'b"\n'
    assert load_toml(_toml(tmp_path, text))["encoder_opts"] == {"x264-params": "a." * 80 + "b"}


@pytest.mark.parametrize("value", ["[" * 100_000 + "]" * 100_000, "{a = " * 100_000 + "1" + "}" * 100_000],
                         ids=["arrays", "inline-tables"])
def test_toml_nested_too_deeply(tmp_path, value):
    with pytest.raises(ConfigError, match="invalid TOML: arrays or inline tables nested too deeply"):
        load_toml(_toml(tmp_path, f"encoder_opts = {value}\n"))


@pytest.mark.parametrize("text", ["frames = 1" + "0" * 5000, "codec = 0x" + "f" * 4000,
                                  "[encoder-opts]\ncrf = 0o" + "7" * 5000, "plugins = [[0b" + "1" * 5000 + "]]"],
                         ids=["decimal", "hex", "octal-in-table", "binary-in-list"])
def test_a_number_too_long_to_read_is_invalid_toml(tmp_path, text):
    # Python converts no integer of more than 4300 decimal digits: tomllib's ValueError, or later str() or
    # repr() of a hexadecimal one, was an internal error.
    with pytest.raises(ConfigError, match="invalid TOML: a number too long to read"):
        load_toml(_toml(tmp_path, text + "\n"))


def test_toml_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_toml(tmp_path / "nope.toml")


def test_toml_encoder_opts_must_be_a_table(tmp_path):
    with pytest.raises(ConfigError, match="encoder_opts"):
        load_toml(_toml(tmp_path, 'encoder_opts = "crf=18"\n'))


def test_toml_bad_value_is_reported_by_validation(tmp_path):
    values = load_toml(_toml(tmp_path, "ring_size = 1\n"))
    with pytest.raises(ConfigError, match="Invalid ring_size"):
        build_config(values, {})


# --- flags over file values ------------------------------------------------------------------------


def test_flags_override_file_values():
    cfg = build_config({"ring_size": 4, "device": "cpu", "codec": "ffv1"}, {"ring_size": 6, "codec": None})
    assert (cfg.ring_size, cfg.device, cfg.codec) == (6, "cpu", "ffv1")


def test_unset_flags_keep_defaults():
    assert build_config({}, {"ring_size": None, "quiet": None, "overwrite": None}) == RunConfig()


def test_encoder_opts_merge_flag_wins():
    file_values = {"encoder_opts": {"crf": "18", "preset": "slow"}}
    cfg = build_config(file_values, {"encoder_opts": {"crf": "0", "tune": "film"}})
    assert cfg.encoder_opts == {"crf": "0", "preset": "slow", "tune": "film"}


def test_unknown_field_is_a_config_error():
    with pytest.raises(ConfigError):
        build_config({}, {"colour": "red"})


# --- the CLI parser (in process) -------------------------------------------------------------------


def _parse(*argv: str) -> RunConfig:
    return config_from_args(build_parser().parse_args(["run", *argv]))


@pytest.mark.parametrize("in_file, flag", [("duration = 0.1", ["-to", "0.2"]), ("end = 0.3", ["-t", "0.2"])])
def test_a_span_length_flag_replaces_the_files_other_one(tmp_path, in_file, flag):
    """The user gave one of -t and -to, the file the other: "-t/--duration and -to/--end are exclusive",
    naming no file. The flag wins, as flags do; in a [[streams]] entry too."""
    config = tmp_path / "span.toml"
    config.write_text(in_file + "\n")
    cfg = _parse("in.mp4", "-o", "out.mkv", "--config", str(config), *flag)
    assert (cfg.duration, cfg.end) == ((0.2, None) if flag[0] == "-t" else (None, 0.2))
    config.write_text(f'[[streams]]\ninput = "a.mp4"\n{in_file}\n[[streams]]\ninput = "b.mp4"\n')
    args = build_parser().parse_args(["run", "--config", str(config), "-o", "null", *flag])
    config_from_args(args)
    assert all(key not in entry for entry in args.stream_list for key in ("duration", "end"))


def test_config_given_twice_is_refused_not_replaced():
    """--config denoise --config sharpen ran sharpen alone, without a word."""
    with pytest.raises(ConfigError, match=r"--config given twice \(denoise, sharpen\): give it once"):
        _parse("in.mp4", "-o", "out.mkv", "--config", "denoise", "--config", "sharpen")
    assert _parse("in.mp4", "-o", "out.mkv", "--config", "denoise", "--config", "denoise").filters


def test_cli_flags_map_to_config():
    cfg = _parse("in.mp4", "-o", "out.mkv", "-y", "--device", "cpu", "-c", "ffv1", "--encoder-opt", "crf=0",
                 "--encoder-opt", "preset=fast", "--frames", "5", "--ring-size", "3", "--streams", "1",
                 "--in-flight", "2", "-q", "--filters", "eq=contrast=2", "--stats-json", "s.json")
    assert cfg.input == "in.mp4" and cfg.output == "out.mkv"
    assert cfg.overwrite and cfg.quiet and not cfg.debug
    assert (cfg.device, cfg.codec, cfg.frames, cfg.ring_size, cfg.streams, cfg.in_flight) == ("cpu", "ffv1", 5, 3, 1, 2)
    assert cfg.encoder_opts == {"crf": "0", "preset": "fast"}
    assert cfg.filters == "eq=contrast=2" and cfg.stats_json == "s.json"


def test_cli_without_flags_gives_defaults():
    assert _parse("in.mp4") == RunConfig(input="in.mp4")


def test_cli_naive_alloc_alias():
    assert _parse("in.mp4", "--naive-alloc").alloc == "naive"
    assert _parse("in.mp4", "--alloc", "naive").alloc == "naive"


def test_cli_empty_filter_chain_is_kept():
    assert _parse("in.mp4", "--filters", "").filters == ""


def test_cli_flags_override_config_file(tmp_path):
    path = _toml(tmp_path, 'ring-size = 4\ncodec = "ffv1"\n[encoder_opts]\ncrf = 18\npreset = "slow"\n')
    cfg = _parse("in.mp4", "--config", str(path), "--ring-size", "6", "--encoder-opt", "crf=0")
    assert cfg.ring_size == 6  # flag wins
    assert cfg.codec == "ffv1"  # file value kept
    assert cfg.encoder_opts == {"crf": "0", "preset": "slow"}


def test_cli_bad_encoder_opt_is_a_usage_error(capsys):
    assert main(["run", "in.mp4", "--encoder-opt", "crf"]) == 2
    err = capsys.readouterr().err
    assert "KEY=VALUE" in err and "Traceback" not in err


@pytest.mark.parametrize("values, message", [
    ({"encoder_opts": {"preset": "ultrafast\npreset=slow"}}, "Invalid --encoder-opt 'preset'='ultrafast\\npreset=slow'"),
    ({"input_opts": {"a\tb": "1"}}, "Invalid --input-opt 'a\\tb'"),
    ({"output_opts": {"k": "v\x00"}}, "Invalid --output-opt"),
    ({"stats_json": "s\x00.json"}, "Invalid stats_json ('s\\x00.json'): it holds a NUL character"),
    ({"filters": "lut3d=file=a\x00.cube"}, "Invalid filters"),
    ({"plugins": ("ok.py", "p\x00.py")}, "Invalid plugins"),
    ({"output": "o\x00.mp4"}, "Invalid output"),
    ({"input_opts": {"headers": "A: 1\x1b[2J"}}, "Invalid --input-opt 'headers'"),
    ({"encoder_opts": [("crf", "18")]}, "Invalid --encoder-opt ([('crf', '18')]): options are a mapping"),
])
def test_nul_anywhere_and_control_characters_in_options_are_refused_on_one_line(values, message):
    with pytest.raises(ConfigError) as e:
        RunConfig(input="in.mp4", **values)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_filter_chain_over_lines_and_options_from_the_api_as_numbers_are_fine():
    cfg = RunConfig(input="in.mp4", filters="gblur=sigma=2,\n  eq=contrast=1.1\n", encoder_opts={"crf": 18})
    assert [f.name for f in parse_chain(cfg.filters)] == ["gblur", "eq"]


@pytest.mark.parametrize("values, message", [
    ({"overwrite": "false"}, "Invalid overwrite ('false'). Supported values are of type bool."),
    ({"quiet": 1}, "Invalid quiet (1)"),
    ({"codec": None}, "Invalid codec (None). Supported values are of type str."),
    ({"stats_json": 5}, "Invalid stats_json (5)"),
    ({"output": 5}, "Invalid output (5)"),
    ({"plugins": None}, "Invalid plugins (None)"),
    ({"plugins": (5,)}, "Invalid plugins"),
    ({"encoder_opts": {"crf": None}}, "Invalid --encoder-opt 'crf'=None: keys are text, values text or numbers"),
    ({"input_opts": {1: "2"}}, "Invalid --input-opt 1='2'"),
    ({"frames": 10**5000}, "Invalid frames (an integer of 16610 bits)"),
    ({"timeout": 10**400}, "Invalid timeout ("),
    ({"latency_budget": 10**400}, "Invalid latency_budget ("),
])
def test_a_value_of_the_wrong_type_is_a_config_error_naming_it(values, message):
    """The API's callers get the error the command line gives, not a TypeError (or a true "false") later."""
    with pytest.raises(ConfigError) as e:
        RunConfig(input="in.mp4", **values)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_paths_and_option_values_from_the_api_are_kept_as_text():
    cfg = RunConfig(input=Path("in.mp4"), output=Path("out.mp4"), plugins=[Path("p.py")],
                    encoder_opts={"crf": 18, "psy-rd": 1.5})
    assert (cfg.input, cfg.output, cfg.plugins) == ("in.mp4", "out.mp4", ("p.py",))
    assert cfg.encoder_opts == {"crf": "18", "psy-rd": "1.5"}


def test_bytes_paths_a_single_plugin_and_numpy_scalars_are_taken_as_python_gives_them():
    import numpy as np

    cfg = RunConfig(input=b"in.mp4", output=b"out.mp4", stats_json=b"s.json", plugins="p.py", frames=np.int64(3),
                    ring_size=np.int32(4), start=np.float32(0.5), overwrite=np.bool_(True))
    assert (cfg.input, cfg.output, cfg.stats_json, cfg.plugins) == ("in.mp4", "out.mp4", "s.json", ("p.py",))
    assert (cfg.frames, cfg.ring_size, cfg.start, cfg.overwrite) == (3, 4, 0.5, True)
    assert type(cfg.frames) is int and type(cfg.overwrite) is bool
    cfg = RunConfig(plugins=[b"a.py", bytearray(b"b.py")], encoder_opts={"crf": np.int64(20), "aq": np.float32(0.5)})
    assert cfg.plugins == ("a.py", "b.py") and cfg.encoder_opts == {"crf": "20", "aq": "0.5"}
    with pytest.raises(ConfigError, match="Invalid --encoder-opt 'crf'=<ndarray of shape"):  # not a number
        RunConfig(encoder_opts={"crf": np.array([20])})


def test_protocol_options_may_hold_line_breaks():
    """HTTP's headers option is CRLF-separated lines."""
    headers = "Authorization: Bearer x\r\nX-Trace:\t1\r\n"
    cfg = RunConfig(input="https://example.com/a.mp4", input_opts={"headers": headers})
    assert cfg.input_opts == {"headers": headers}


def test_cli_bad_value_exit_code(capsys):
    assert main(["run", "in.mp4", "--ring-size", "1", "--device", "cpu"]) == 2
    assert "ring_size" in capsys.readouterr().err


# --- the CLI as a subprocess -----------------------------------------------------------------------


def _normalised(text: str) -> str:
    # argparse wraps help text (also at hyphens), so compare with all whitespace removed.
    return re.sub(r"\s+", "", text)


def test_run_help_lists_every_option_with_defaults():
    proc = run_cli("run", "--help")
    assert proc.returncode == 0, proc.stderr
    help_text = _normalised(proc.stdout)
    run_parser = argparse.ArgumentParser()
    add_run_arguments(run_parser, RunConfig())  # the same flags `pipeline run` gets
    config_fields = {f.name for f in fields(RunConfig)}
    defaults = RunConfig()
    expected = {"--output", "--overwrite", "--filters", "--config", "--device", "--alloc", "--naive-alloc", "--codec",
                "--encoder-opt", "--frames", "--ring-size", "--streams", "--in-flight", "--plugin", "--stats-json",
                "--quiet", "--debug"}
    seen = set()
    for action in run_parser._actions:
        for option in action.option_strings:
            seen.add(option)
            assert _normalised(option) in help_text, option
        default = getattr(defaults, action.dest, None) if action.dest in config_fields else None
        if default not in (None, False, (), {}) and action.const is None:
            shown = repr(default) if isinstance(default, str) and action.dest == "filters" else str(default)
            assert _normalised(f"(default: {shown}") in help_text, (action.dest, shown)
    assert expected <= seen
    assert "(default:all)" in help_text  # --frames
    assert "exitcodes:" in help_text


def test_top_level_help_says_what_the_tool_does():
    proc = run_cli("--help")
    assert proc.returncode == 0, proc.stderr
    text = _normalised(proc.stdout)
    assert _normalised("Run a video through GPU filters") in text and "memorystrategy" in text
    listed = [line.split()[0] for line in proc.stdout.splitlines() if re.match(r"    [a-z]+ ", line)]
    assert listed == ["run", "filters", "presets", "sample", "batch", "bench", "probe", "warmup"]
    assert "engine" not in proc.stdout and "exitcodes:" in text


def test_unknown_flag_exits_2_with_one_line():
    proc = run_cli("run", "in.mp4", "--no-such-flag")
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "--no-such-flag" in lines[0]
    assert "Traceback" not in proc.stderr


def test_missing_input_argument_exits_2():
    proc = run_cli("run")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_unknown_config_key_exits_2_naming_it(tmp_path):
    path = _toml(tmp_path, "colour = 1\n")
    proc = run_cli("run", "in.mp4", "--config", path)
    assert proc.returncode == 2
    assert "'colour'" in proc.stderr and "Traceback" not in proc.stderr


def test_bad_chain_on_cli_exits_2_naming_token(tmp_path):
    proc = run_cli("run", tmp_path / "in.mp4", "--device", "cpu", "--filters", "gblur=sigma=2,blurx")
    assert proc.returncode == 2
    assert "'blurx'" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_filters_command_lists_builtins():
    proc = run_cli("filters")
    assert proc.returncode == 0, proc.stderr
    assert "gblur" in proc.stdout and "eq" in proc.stdout


def test_filters_command_shows_one_and_refuses_unknown():
    proc = run_cli("filters", "gblur")
    assert proc.returncode == 0 and "sigma" in proc.stdout
    proc = run_cli("filters", "nope")
    assert proc.returncode == 2 and "'nope'" in proc.stderr


def test_filters_json_describes_every_parameter():
    from pipeline.filters import FILTERS

    proc = run_cli("filters", "--json")
    assert proc.returncode == 0, proc.stderr
    listed = {f["name"]: f for f in json.loads(proc.stdout)["filters"]}
    parse_chain("")
    assert set(listed) == set(FILTERS)
    for name, cls in FILTERS.items():
        assert listed[name]["help"] == cls.help
        params = listed[name]["params"]
        assert [p["name"] for p in params] == [p.name for p in cls.params]
        for shown, param in zip(params, cls.params, strict=True):
            assert shown["type"] == ("path" if param.is_path else param.kind.__name__)
            assert shown["default"] == param.default
            assert (shown["min"], shown["max"], shown["min_exclusive"]) == (param.low, param.high, param.low_exclusive)
    sigma = listed["gblur"]["params"][0]
    assert sigma["name"] == "sigma" and sigma["type"] == "float" and sigma["min"] is not None
    assert listed["transpose"]["params"][0]["choices"] == ["clock", "cclock"]
    assert listed["eq"]["params"][0]["choices"] is None
    assert listed["lut3d"]["params"][0]["type"] == "path"

    one = json.loads(run_cli("filters", "gblur", "--json").stdout)["filters"]
    assert [f["name"] for f in one] == ["gblur"]


# --- filter chains ---------------------------------------------------------------------------------


def test_parse_chain_named_and_positional():
    blur, eq = parse_chain("gblur=sigma=2, eq=1.2:0.1")
    assert blur.name == "gblur" and blur.sigma == 2.0
    assert eq.name == "eq" and (eq.contrast, eq.brightness, eq.saturation, eq.gamma) == (1.2, 0.1, 1.0, 1.0)


def test_parse_chain_empty_and_defaults():
    assert parse_chain("") == []
    (blur,) = parse_chain("gblur")
    assert blur.sigma == 1.0
    assert [f.name for f in parse_chain(DEFAULT_FILTERS)] == ["gblur", "eq"]


@pytest.mark.parametrize(
    "text, token, detail",
    [
        ("blurx", "blurx", "unknown filter 'blurx'"),
        ("gblur=sigma=2,blurx=3", "blurx=3", "unknown filter 'blurx'"),
        ("gblur=sigma=abc", "gblur=sigma=abc", "sigma must be float, got 'abc'"),
        ("gblur=sigma=0", "gblur=sigma=0", "sigma must be > 0"),
        ("gblur=sigma=100", "gblur=sigma=100", "sigma must be <= 64"),
        ("eq=contrast=1:contrast=2", "eq=contrast=1:contrast=2", "contrast given twice"),
        ("gblur=1:2", "gblur=1:2", "too many positional values"),
        ("gblur=radius=3", "gblur=radius=3", "unknown parameter 'radius'"),
        ("eq=saturation=-1", "eq=saturation=-1", "saturation must be >= 0"),
    ],
)
def test_parse_chain_errors_name_the_token(text, token, detail):
    with pytest.raises(ConfigError) as info:
        parse_chain(text)
    message = str(info.value)
    assert f"bad filter {token!r}" in message
    assert detail in message


def test_parse_chain_error_gives_column():
    with pytest.raises(ConfigError, match="at column 4 "):
        parse_chain("eq,gblur=sigma=x")


def test_parse_chain_only_separators_is_an_error():
    with pytest.raises(ConfigError, match="empty filter chain"):
        parse_chain(" , ,")


@pytest.mark.parametrize("text", ['ring-size = 300\nring_size = 4\n',
                                  '[encoder_opts]\ncrf = "40"\n[encoder-opts]\npreset = "fast"\n',
                                  '[[streams]]\ninput = "a.mp4"\nin-flight = 2\nin_flight = 3\n'])
def test_one_setting_in_two_spellings_is_refused(tmp_path, text):
    """TOML refuses a repeated key, but ring-size and ring_size are two keys to it: one was dropped silently
    (an encoder table with it)."""
    with pytest.raises(ConfigError, match="are one setting given twice"):
        load_toml(_toml(tmp_path, text))


@pytest.mark.parametrize("value", ['["isom", "mp42"]', "true", '{ a = 1 }', "1979-05-27T07:32:00Z"])
def test_an_option_tables_value_is_text_or_a_number(tmp_path, value):
    """Any TOML value became its Python text: an MP4 was written with the major brand "['is"."""
    with pytest.raises(ConfigError, match="output_opts: brand = .*values are text or numbers"):
        load_toml(_toml(tmp_path, f"[output_opts]\nbrand = {value}\n"))
    assert load_toml(_toml(tmp_path, '[output_opts]\nbrand = "isom"\nmoov_size = 4096\n'))["output_opts"] == {
        "brand": "isom", "moov_size": "4096"}


def test_a_config_reached_through_a_link_and_dot_dot_is_relative_to_where_it_is(tmp_path):
    """link/../c.toml is read from beside the link's directory (the system follows the link before "..");
    its paths were taken from beside the link instead, where -y could replace an unrelated file."""
    real = tmp_path / "real" / "a"
    (real / "b").mkdir(parents=True)
    (tmp_path / "lnk").symlink_to(real / "b")
    (real / "c.toml").write_text('output = "out.mp4"\n')
    values = load_toml(tmp_path / "lnk" / ".." / "c.toml")
    assert values["output"] == str(real / "out.mp4")


def test_a_config_files_value_out_of_range_names_the_file(tmp_path):
    """The line said "Invalid ring_size (300)" and nothing of where the 300 came from."""
    from utils import ROOT, run_cli

    config = _toml(tmp_path, "ring-size = 300\n")
    proc = run_cli("run", ROOT / "samples" / "sample.mp4", "-o", "null", "--config", config, "-q")
    assert proc.returncode == 2 and f"error: {config}: Invalid ring_size (300)" in proc.stderr, proc.stderr
    proc = run_cli("run", ROOT / "samples" / "sample.mp4", "-o", "null", "--config", config, "--ring-size", "4",
                   "--frames", "1", "-q")
    assert proc.returncode == 0, proc.stderr  # the command line's value stands in for the file's


def test_a_config_name_ending_in_a_slash_is_not_the_file_before_it(tmp_path):
    """``c.toml/`` asks for a directory, as the system reads it; the file c.toml was read instead."""
    config = _toml(tmp_path, "ring-size = 4\n")
    with pytest.raises(ConfigError, match=r"run\.toml/: Not a directory$"):
        load_toml(f"{config}/")
    with pytest.raises(ConfigError, match="is a directory, not a file"):
        load_toml(f"{tmp_path}/")
    with pytest.raises(ConfigError, match=r"file not found: .*nowhere\.toml/$"):
        load_toml(f"{tmp_path}/nowhere.toml/")


@pytest.mark.parametrize("text, message", [
    ('codec = "nosuch"', "unknown encoder 'nosuch'"),
    ('pix_fmt = "nosuch"', "unknown pixel format 'nosuch'"),
    ('filters = "nosuch"', "bad filter 'nosuch'"),
])
def test_a_config_files_value_refused_once_the_run_is_built_names_the_file(tmp_path, text, message):
    """The encoder, the pixel format and the filter chain are checked after the file is read: the line
    named the value but not the file it was in. A flag's own value is not the file's."""
    from utils import ROOT, run_cli

    config = _toml(tmp_path, text + "\n")
    sample = ROOT / "samples" / "sample.mp4"
    proc = run_cli("run", sample, "-o", "null", "--config", config, "--device", "cpu", "-q")
    assert proc.returncode == 2 and f"error: {config}: {message}" in proc.stderr, proc.stderr
    flag = {"codec": "-c", "pix_fmt": "--pix-fmt", "filters": "-vf"}[text.partition(" ")[0]]
    proc = run_cli("run", sample, "-o", "null", "--device", "cpu", "-q", flag, "nosuch")
    assert proc.returncode == 2 and "error: " + message in proc.stderr and str(config) not in proc.stderr
