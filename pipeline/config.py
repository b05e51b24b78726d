"""Run configuration: a frozen dataclass built from defaults, a TOML file, then command-line flags."""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .errors import ConfigError

DEVICES = ("auto", "cuda", "cpu")
ALLOC_STRATEGIES = ("pool", "naive", "cupy", "async", "pinned-per-frame")
DEFAULT_FILTERS = "gblur=sigma=1.5,eq=contrast=1.1:saturation=1.1"


@dataclass(frozen=True)
class RunConfig:
    input: str = ""
    output: str | None = None
    filters: str = DEFAULT_FILTERS
    device: str = "auto"
    codec: str = "libx264"
    encoder_opts: dict[str, str] = field(default_factory=dict)
    frames: int | None = None
    stats_json: str | None = None
    quiet: bool = False
    overwrite: bool = False
    alloc: str = "pool"
    ring_size: int = 8
    streams: int = 2
    in_flight: int = 4
    arena_headroom: float = 1.2
    plugins: tuple[str, ...] = ()
    strict: bool = False
    debug: bool = False

    def __post_init__(self) -> None:
        _check_choice("device", self.device, DEVICES)
        _check_choice("alloc", self.alloc, ALLOC_STRATEGIES)
        _check_min("ring_size", self.ring_size, 2)
        _check_min("streams", self.streams, 1)
        _check_min("in_flight", self.in_flight, 1)
        if self.frames is not None:
            _check_min("frames", self.frames, 1)
        if self.arena_headroom < 1.0:
            raise ConfigError(f"Invalid arena_headroom ({self.arena_headroom}). Supported values are >= 1.0.")

    def output_path(self) -> Path:
        """The output file: ``-o`` if given, else ``<input stem>_processed<ext>`` in the current directory."""
        if self.output:
            return Path(self.output)
        src = Path(self.input)
        return Path.cwd() / f"{src.stem}_processed{src.suffix or '.mp4'}"

    def replace(self, **changes: Any) -> RunConfig:
        return dataclasses.replace(self, **changes)


def _check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"Invalid {name} ({value!r}). Supported values are {', '.join(allowed)}.")


def _check_min(name: str, value: int, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ConfigError(f"Invalid {name} ({value!r}). Supported values are integers >= {low}.")


FIELD_NAMES = {f.name for f in fields(RunConfig)}


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a config file; keys may use dashes or underscores; an unknown key is an error naming it."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config file {path}: {e}") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from e
    values = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name not in FIELD_NAMES or name == "input":
            raise ConfigError(f"{path}: unknown key {key!r}")
        values[name] = _coerce(path, name, value)
    return values


_TYPES: dict[str, tuple[type, ...]] = {
    "output": (str,), "filters": (str,), "device": (str,), "codec": (str,), "stats_json": (str,),
    "alloc": (str,), "frames": (int,), "ring_size": (int,), "streams": (int,), "in_flight": (int,),
    "arena_headroom": (int, float), "quiet": (bool,), "overwrite": (bool,), "strict": (bool,), "debug": (bool,),
}


def _coerce(path: Path, name: str, value: Any) -> Any:
    if name == "encoder_opts":
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: encoder_opts must be a table of KEY = VALUE")
        return {str(k): str(v) for k, v in value.items()}
    if name == "plugins":
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(v, str) for v in items):
            raise ConfigError(f"{path}: invalid plugins ({value!r}). Supported values are paths (strings).")
        return tuple(items)
    expected = _TYPES.get(name)
    # bool is an int in Python; a TOML 'true' is never a frame count.
    if expected and (not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected)):
        kinds = " or ".join(t.__name__ for t in expected)
        raise ConfigError(f"{path}: invalid {name} ({value!r}). Supported values are of type {kinds}.")
    return value


def build_config(file_values: dict[str, Any], flag_values: dict[str, Any]) -> RunConfig:
    """Defaults, then the file, then the flags that were given on the command line (not None)."""
    merged = dict(file_values)
    for key, value in flag_values.items():
        if value is None:
            continue
        if key == "encoder_opts":
            merged["encoder_opts"] = {**merged.get("encoder_opts", {}), **value}
        else:
            merged[key] = value
    try:
        return RunConfig(**merged)
    except TypeError as e:
        raise ConfigError(str(e)) from e
