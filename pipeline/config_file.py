"""Config files and presets: a TOML file read into :class:`~pipeline.config.RunConfig` values, its paths
taken relative to it, and ``[[streams]]`` entries for a run of several inputs."""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any

from .config import MAX_INT_BITS, _TABLES, _TYPES, RunConfig, file_url_as_path, is_url, pipe_fd
from .errors import ConfigError
from .textfile import read_text

FIELD_NAMES = {f.name for f in fields(RunConfig)}
MAX_CONFIG_BYTES = 1 << 20  # a preset is a few lines: anything near this is not one

PRESETS_DIR = Path(__file__).resolve().parent / "presets"  # shipped in the package (package data)


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.toml"))


def preset_summary(name: str) -> str:
    """The first line of the preset's file: a comment saying what it is for."""
    first = (PRESETS_DIR / f"{name}.toml").read_text().partition("\n")[0]
    return first.removeprefix("#").strip().rstrip(".")


def find_config(name: str | Path) -> Path:
    """``--config``: a preset's name (``denoise``), or a path (it has a ``/`` or ends in ``.toml``)."""
    text = str(name)
    if isinstance(name, Path) or text.endswith(".toml") or "/" in text or os.sep in text:
        if text.endswith(("/", os.sep)):  # Path drops the slash, which asks for a directory: not the file before it
            try:
                os.stat(text)  # a directory's name: read_text says what it is
            except FileNotFoundError:
                raise ConfigError(f"config file: file not found: {text}") from None
            except OSError as e:
                raise ConfigError(f"config file: cannot read {text}: {e.strerror}") from None
        return Path(name)
    path = PRESETS_DIR / f"{text}.toml"
    if not path.is_file():
        raise ConfigError(f"unknown preset {text!r}; presets: {', '.join(preset_names())} "
                          f"(a config file's path needs a '/' or the .toml suffix: ./{text}.toml)")
    return path


TOO_LONG = "invalid TOML: a number too long to read (a config file's numbers have a few digits)"


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a config file or preset (see :func:`find_config`); keys may use dashes or underscores; an
    unknown key is an error naming it. Paths in it (plugins, filter files) are relative to the file."""
    path = find_config(path)
    text = read_text(path, MAX_CONFIG_BYTES, "config file")
    _check_key_depth(path, text)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from e
    except ValueError:  # an integer of more digits than Python converts (int_max_str_digits)
        raise ConfigError(f"{path}: {TOO_LONG}") from None
    except RecursionError:  # tomllib parses each nested array or inline table with one more call
        raise ConfigError(f"{path}: invalid TOML: arrays or inline tables nested too deeply "
                          "(a config file's values nest a level or two)") from None
    _check_numbers(path, raw)
    values, spelled = {}, {}
    # The directory as the system reaches it: "link/../c.toml" is read beside what the link names, where a
    # lexical ".." would take the directory the link is in.
    base = Path(os.path.realpath(os.path.dirname(os.fspath(path)) or "."))
    for key, value in raw.items():
        name = _once(path, key, spelled, "")
        if name == "streams" and isinstance(value, list):  # [[streams]]: the inputs of a many-stream run
            values[STREAM_LIST] = [_stream_entry(path, base, i, entry) for i, entry in enumerate(value)]
            continue
        if name not in FIELD_NAMES or name == "input":
            raise ConfigError(f"{path}: unknown key {key!r}")
        values[name] = _coerce(path, name, value)
    return _resolve_paths(values, base)


def _once(path: Path, key: str, spelled: dict[str, str], where: str) -> str:
    """The key's name (``ring-size`` is ``ring_size``); a name given twice in two spellings, which TOML's own
    check of repeated keys cannot see, is refused: one of the two would be dropped without a word."""
    name = key.replace("-", "_")
    if name in spelled:
        raise ConfigError(f"{path}: {where}{spelled[name]!r} and {key!r} are one setting given twice")
    spelled[name] = key
    return name


def _check_numbers(path: Path, raw: dict[str, Any]) -> None:
    """A hexadecimal, octal or binary integer of thousands of digits parses (the 4300-digit limit is for
    decimal ones) but cannot be written out in a message or an option: refuse it as a long decimal one."""
    pending: list[Any] = [raw]
    while pending:  # not recursive: the parser's nesting limit is the interpreter's
        value = pending.pop()
        if isinstance(value, dict):
            pending += value.values()
        elif isinstance(value, list):
            pending += value
        elif isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
            raise ConfigError(f"{path}: {TOO_LONG}")


MAX_KEY_PARTS = 64  # a config file's keys have a part or two; TOML's parser takes quadratic time in them
_QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'")


_DOTTED = re.compile(r"[\w-]+(?:[ \t]*\.[ \t]*[\w-]+)*")  # a dotted key's bare parts, quoted ones masked


def _check_key_depth(path: Path, text: str) -> None:
    """Refuse, before parsing, a key of hundreds of dotted parts (``a.a.a... = 1``, or inside an inline
    table), which would keep the parser busy for minutes where a nesting limit's error was due. Quoted
    parts count as one; a string holds no key."""
    for line in text.splitlines():
        masked = _QUOTED.sub("q", line)
        if any(m.group().count(".") >= MAX_KEY_PARTS for m in _DOTTED.finditer(masked)):
            raise ConfigError(f"{path}: invalid TOML: a key of more than {MAX_KEY_PARTS} dotted parts "
                              "(a config file's keys have a part or two)")


STREAM_LIST = "stream_list"  # load_toml's key for a [[streams]] list (not a RunConfig field)
# Settings of the whole run, never of one [[streams]] entry: the streams share one GPU's memory, and write
# one statistics file.
RUN_WIDE = ("device", "pinned_cap_mib", "stats_json")


def _stream_entry(path: Path, base: Path, index: int, entry: Any) -> dict[str, Any]:
    """One [[streams]] table: ``input`` (required), ``output``, and any run setting for that stream."""
    if not isinstance(entry, dict) or not isinstance(entry.get("input"), str):
        raise ConfigError(f"{path}: [[streams]] entry {index + 1} needs input = \"PATH or URL\"")
    values, spelled = {}, {}
    for key, value in entry.items():
        name = _once(path, key, spelled, f"[[streams]] entry {index + 1}: ")
        if name not in FIELD_NAMES:
            raise ConfigError(f"{path}: [[streams]] entry {index + 1}: unknown key {key!r}")
        if name in RUN_WIDE:
            raise ConfigError(f"{path}: [[streams]] entry {index + 1}: {key} is a setting of the whole run "
                              "(the streams share one GPU and one statistics file); set it before [[streams]]")
        values[name] = value if name == "input" else _coerce(path, name, value)
    if not values["input"]:
        raise ConfigError(f"{path}: [[streams]] entry {index + 1}: input is an empty name")
    values["input"] = _beside(values["input"], base)
    return _resolve_paths(values, base)


def _resolve_paths(values: dict[str, Any], base: Path) -> dict[str, Any]:
    """A config file's paths are relative to it: an input's and an output's as a plugin's or a LUT's."""
    from .filters.registry import resolve_paths

    for name in ("output", "stats_json"):
        if name in values:
            values[name] = _beside(values[name], base)
    if "filters" in values:
        values["filters"] = resolve_paths(values["filters"], base)
    if "plugins" in values:
        values["plugins"] = tuple(str(base / os.path.expanduser(file_url_as_path(p))) for p in values["plugins"])
    return values


def _beside(name: str, base: Path) -> str:
    """A file named in a config file, relative to its folder (a ``file://`` URL is its file); another URL,
    a pipe, ``-`` and ``null`` as they are. A directory's trailing ``/`` stays: ``kept.mp4/`` must not
    name the file kept.mp4."""
    name = file_url_as_path(name)
    if name in ("-", "null") or is_url(name) or pipe_fd(name) is not None:
        return name
    joined = str(base / os.path.expanduser(name))  # an unknown ~user stays a name, as a shell leaves it
    return joined + "/" if name.endswith(("/", os.sep)) and not joined.endswith("/") else joined


_FILE_NAMES = ("output", "stats_json")


def _coerce(path: Path, name: str, value: Any) -> Any:
    if name in _TABLES:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: {name} must be a table of KEY = VALUE")
        for k, v in value.items():  # as the API takes them: an array or a table's text would reach FFmpeg
            if isinstance(v, bool) or not isinstance(v, (str, int, float)):
                raise ConfigError(f"{path}: {name}: {k} = {v!r}: values are text or numbers")
        return {str(k): str(v) for k, v in value.items()}
    if name == "plugins":
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(v, str) for v in items):
            raise ConfigError(f"{path}: invalid plugins ({value!r}). Supported values are paths (strings).")
        if not all(items):
            raise ConfigError(f"{path}: plugins: an empty name")
        return tuple(items)
    if name in _FILE_NAMES and value == "":  # as on the command line: an empty name is no default
        hint = "the default" if name == "output" else "none"
        raise ConfigError(f"{path}: {name} is an empty name (leave the key out for {hint})")
    expected = _TYPES.get(name)
    # bool is an int in Python; a TOML 'true' is never a frame count.
    if expected and (not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected)):
        kinds = " or ".join(t.__name__ for t in expected)
        raise ConfigError(f"{path}: invalid {name} ({value!r}). Supported values are of type {kinds}.")
    return value
