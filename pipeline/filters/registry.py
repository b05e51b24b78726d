"""The filter registry and the ffmpeg-style chain syntax: ``gblur=sigma=2,eq=contrast=1.2:saturation=1.1``.

A filter is a small class: declared parameters (validated with messages that say what is allowed),
a CPU reference (NumPy/OpenCV) and a CUDA implementation that writes into the buffer it is given.
Frames between filters are planar float32 RGB in [0, 1], shape (3, H, W).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, ClassVar, Iterator

from ..errors import ConfigError
from ..numbers import integer, number


_PARSERS = {int: integer, float: number}  # from text: ASCII digits only (see pipeline.numbers)


def _plain(value: Any) -> Any:
    """A value as JSON holds it: a bound or default that is not a finite number (a plugin's) is none, and a
    value of another type than JSON's is its text."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


# What a filter's name cannot hold for a chain to name it: the chain's separators, quotes and spaces.
_UNNAMEABLE = re.compile(r"[\s,=:;'\"\\\[\]]")


@dataclass(frozen=True)
class Param:
    name: str
    kind: type
    default: Any
    low: float | None = None
    high: float | None = None
    help: str = ""
    low_exclusive: bool = False
    choices: tuple[Any, ...] = ()  # when set, the only values allowed
    is_path: bool = False  # a file name: in a config file, relative to that file (see resolve_paths)

    def parse(self, filter_name: str, text: Any) -> Any:
        try:
            parse = _PARSERS.get(self.kind, self.kind) if isinstance(text, str) else self.kind
            value = text if isinstance(text, self.kind) else parse(text)
        except (TypeError, ValueError):
            raise ConfigError(f"{filter_name}: {self.name} must be {self.kind.__name__}, got {text!r}") from None
        if isinstance(value, float) and not math.isfinite(value):  # NaN passes every range check
            raise ConfigError(f"{filter_name}: {self.name} must be a finite number, got {text!r}")
        if self.choices and value not in self.choices:
            allowed = ", ".join(str(c) for c in self.choices)
            raise ConfigError(f"{filter_name}: {self.name} must be one of {allowed}; got {value!r}")
        self._check_range(filter_name, value)
        return value

    def _check_range(self, filter_name: str, value: Any) -> None:
        if self.low is not None and (value <= self.low if self.low_exclusive else value < self.low):
            op = ">" if self.low_exclusive else ">="
            raise ConfigError(f"{filter_name}: {self.name} must be {op} {self.low:g}, got {value:g}")
        if self.high is not None and value > self.high:
            raise ConfigError(f"{filter_name}: {self.name} must be <= {self.high:g}, got {value:g}")

    def to_dict(self) -> dict[str, Any]:
        """For ``pipeline filters --json``: the bounds are null where there is none."""
        return {
            "name": self.name,
            "type": "path" if self.is_path else self.kind.__name__,
            "default": _plain(self.default),
            "min": _plain(self.low),
            "min_exclusive": self.low_exclusive,
            "max": _plain(self.high),
            "choices": [_plain(c) for c in self.choices] or None,
            "help": self.help,
        }

    def describe(self) -> str:
        lo = "" if self.low is None else (f"> {self.low:g}" if self.low_exclusive else f">= {self.low:g}")
        hi = "" if self.high is None else f"<= {self.high:g}"
        bounds = " and ".join(b for b in (lo, hi) if b)
        if self.choices:
            bounds = "one of " + "|".join(str(c) for c in self.choices)
        return f"{self.name} ({self.kind.__name__}, default {self.default}{', ' + bounds if bounds else ''})"


class Filter:
    """Base class. Subclasses set ``name``, ``params``, ``help`` and implement ``cpu`` and ``cuda``."""

    name: ClassVar[str] = ""
    help: ClassVar[str] = ""
    params: ClassVar[tuple[Param, ...]] = ()
    # The colour matrix of the frames (bt601, bt709 or bt2020), bound by use_colour when the frame plan is
    # built: filters that take luma (grayscale, eq's saturation, sobel) weigh R, G, B as it does.
    luma_matrix: str = "bt709"

    def __init__(self, **values: Any):
        known = {p.name: p for p in self.params}
        for key in values:
            if key not in known:
                raise ConfigError(f"{self.name}: unknown parameter {key!r}; known: {', '.join(known) or 'none'}")
        for p in self.params:
            setattr(self, p.name, p.parse(self.name, values[p.name]) if p.name in values else p.default)

    def __repr__(self) -> str:
        args = ":".join(f"{p.name}={getattr(self, p.name)}" for p in self.params)
        return f"{self.name}={args}" if args else self.name

    def use_colour(self, colour) -> None:
        """Bind the colour (:class:`~pipeline.video.Colour`) of the frames this filter will see; called once
        per run, before any kernel is bound. A filter whose work depends on it reads ``self.luma_matrix``."""
        self.luma_matrix = colour.matrix

    def output_size(self, width: int, height: int) -> tuple[int, int]:
        return width, height

    def output_sar(self, sar: Fraction, width: int, height: int) -> Fraction:
        """The pixel aspect ratio of this filter's output from its input's (``width`` x ``height`` pixels of
        ``sar``): kept, unless the filter stretches or turns the picture (scale, transpose)."""
        return sar

    def scratch_shapes(self, width: int, height: int) -> list[tuple[int, ...]]:
        """float32 temporaries this filter needs per frame (taken from the frame's pooled buffers)."""
        return []

    def state_shapes(self, width: int, height: int) -> list[tuple[int, ...]]:
        """float32 buffers kept across frames (temporal filters); reserved once, from the device pool."""
        return []

    def bind_state(self, buffers: list) -> None:
        """Receive the state buffers (zeroed is not guaranteed: mark them empty and fill on the first frame)."""
        self.state = buffers
        self.reset()

    def reset(self) -> None:
        """Forget state carried between frames (temporal filters)."""

    def prepare(self) -> None:
        """Compile and load this filter's CUDA kernels now (set-up), not at the first frame. Optional:
        a filter that does not implement it compiles at its first launch."""

    def cpu(self, src, dst, scratch: list) -> None:
        raise NotImplementedError

    def cuda(self, src, dst, scratch: list) -> None:
        raise NotImplementedError


FILTERS: dict[str, type[Filter]] = {}


def describe_filter(cls: type[Filter]) -> dict[str, Any]:
    """A filter's name, help and parameters as plain data (``pipeline filters --json``)."""
    return {"name": cls.name, "help": cls.help, "params": [p.to_dict() for p in cls.params]}


def register_filter(name: str):
    """Class decorator: ``@register_filter("gblur") class GBlur(Filter): ...``."""

    def wrap(cls: type[Filter]) -> type[Filter]:
        # The built-ins first, so that a name of theirs taken by a user's filter fails here, naming both,
        # instead of at the built-ins' own registration, which would fail every later run too.
        from . import builtin  # noqa: F401

        if not isinstance(name, str) or not name or _UNNAMEABLE.search(name):
            raise ConfigError(f"filter name {name!r}: a chain could not name it (no spaces, quotes, ',', '=', "
                              "':', ';' or brackets)")
        _check_filter_class(name, cls)
        taken = FILTERS.get(name)
        if taken is not None and taken is not cls:
            raise ConfigError(f"filter {name!r} is already registered (by {taken.__module__}.{taken.__qualname__}); "
                              f"{cls.__module__}.{cls.__qualname__} needs another name")
        cls.name = name
        FILTERS[name] = cls
        return cls

    return wrap


def _check_filter_class(name: str, cls: Any) -> None:
    """What every run and ``pipeline filters`` read from a filter's class: a plugin's class without them
    failed later, mid-listing or mid-run, as an internal error."""
    if not (isinstance(cls, type) and issubclass(cls, Filter)):
        what = f"class {cls.__qualname__}" if isinstance(cls, type) else repr(cls)
        raise ConfigError(f"filter {name!r}: {what} is not a subclass of pipeline.filters.Filter")
    if not isinstance(cls.help, str):
        raise ConfigError(f"filter {name!r}: its help must be a str, not {type(cls.help).__name__}")
    if not isinstance(cls.params, (tuple, list)) or not all(isinstance(p, Param) for p in cls.params):
        raise ConfigError(f"filter {name!r}: its params must be a tuple of pipeline.filters.Param")


_TOKEN = re.compile(r"[^,]+")


def parse_chain(text: str) -> list[Filter]:
    """Parse ``name=k=v:k=v,name2=v1:v2`` (ffmpeg's syntax; positional values fill params in order)."""
    from . import builtin  # noqa: F401  registers the built-in filters

    chain = []
    for match in _TOKEN.finditer(text or ""):
        token = match.group().strip()
        if not token:
            continue
        try:
            chain.append(_parse_filter(token))
        except ConfigError as e:
            raise ConfigError(f"bad filter {token!r} at column {match.start() + 1} of {text!r}: {e}",
                              setting="filters") from None
    if text and text.strip() and not chain:
        raise ConfigError(f"empty filter chain {text!r}", setting="filters")
    return chain


def _parse_filter(token: str) -> Filter:
    name, _, arg_text = token.partition("=")
    name = name.strip()
    cls = FILTERS.get(name)
    if cls is None:
        raise ConfigError(f"unknown filter {name!r}; see 'pipeline filters' (known: {', '.join(sorted(FILTERS))})")
    values: dict[str, str] = {}
    for position, arg in enumerate(a for a in arg_text.split(":") if a.strip()) if arg_text else ():
        key, eq, value = arg.partition("=")
        if not eq:
            if position >= len(cls.params):
                raise ConfigError(f"{name}: too many positional values ({arg!r})")
            key, value = cls.params[position].name, arg
        if key.strip() in values:
            raise ConfigError(f"{name}: {key.strip()} given twice")
        values[key.strip()] = value.strip()
    return cls(**values)


def resolve_paths(text: str, base: Path) -> str:
    """The chain with every relative path parameter (``is_path``) of a known filter made relative to ``base``.

    A config file's paths are relative to that file. Filters not registered yet (a plugin's, before it
    is loaded) are left as written, and so is everything else in the text.
    """
    from . import builtin  # noqa: F401  registers the built-in filters

    tokens = []
    for token in text.split(","):
        name, eq, arg_text = token.partition("=")
        cls = FILTERS.get(name.strip())
        if cls is not None and eq and any(p.is_path for p in cls.params):
            token = f"{name}={':'.join(_resolve_args(cls, arg_text, base))}"
        tokens.append(token)
    return ",".join(tokens)


def chain_files(text: str) -> list[Path]:
    """The files a chain's known filters read (their ``is_path`` parameters), as written."""
    from . import builtin  # noqa: F401  registers the built-in filters

    files = []
    for token in text.split(","):
        name, eq, arg_text = token.partition("=")
        cls = FILTERS.get(name.strip())
        if cls is not None and eq:
            files += [Path(value.strip()) for _, _, _, value, is_path in _args(cls, arg_text) if is_path]
    return files


def _args(cls: type[Filter], arg_text: str) -> Iterator[tuple[str, str, str, str, bool]]:
    """Each ``:``-separated argument as (text, key, "=" or "", value, whether it names a file)."""
    known = {p.name: p for p in cls.params}
    position = 0
    for arg in arg_text.split(":"):
        if not arg.strip():
            yield arg, "", "", "", False
            continue
        key, eq, value = arg.partition("=")  # positions count the non-empty values, as _parse_filter does
        if not eq:
            key, value = (cls.params[position].name if position < len(cls.params) else ""), arg
        param = known.get(key.strip())
        yield arg, key, eq, value, param is not None and param.is_path and bool(value.strip())
        position += 1


def _resolve_args(cls: type[Filter], arg_text: str, base: Path) -> list[str]:
    args = []
    for arg, key, eq, value, is_path in _args(cls, arg_text):
        if is_path:
            value = _relative_to(value.strip(), base, cls.name)
            arg = f"{key}={value}" if eq else value
        args.append(arg)
    return args


def _relative_to(value: str, base: Path, filter_name: str) -> str:
    full = base / os.path.expanduser(value)  # an unknown ~user stays a name, as a shell leaves it
    text = str(full)  # base / an absolute path is that path
    if ":" in text or "," in text:  # the chain syntax has no quoting (a Windows drive letter has a ':')
        try:
            text = os.path.relpath(full)
        except ValueError:  # another drive
            pass
    if ":" not in text and "," not in text:
        return text
    raise ConfigError(f"{filter_name}: {full}: a path in a filter chain cannot contain ':' or ','; "
                      "give one without them")

