"""The filter registry and the ffmpeg-style chain syntax: ``gblur=sigma=2,eq=contrast=1.2:saturation=1.1``.

A filter is a small class: declared parameters (validated with messages that say what is allowed),
a CPU reference (NumPy/OpenCV) and a CUDA implementation that writes into the buffer it is given.
Frames between filters are planar float32 RGB in [0, 1], shape (3, H, W).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import ConfigError


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

    def parse(self, filter_name: str, text: Any) -> Any:
        try:
            value = self.kind(text) if not isinstance(text, self.kind) else text
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

    def output_size(self, width: int, height: int) -> tuple[int, int]:
        return width, height

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

    def cpu(self, src, dst, scratch: list) -> None:
        raise NotImplementedError

    def cuda(self, src, dst, scratch: list) -> None:
        raise NotImplementedError


FILTERS: dict[str, type[Filter]] = {}


def register_filter(name: str):
    """Class decorator: ``@register_filter("gblur") class GBlur(Filter): ...``."""

    def wrap(cls: type[Filter]) -> type[Filter]:
        if name in FILTERS and FILTERS[name] is not cls:
            raise ConfigError(f"filter {name!r} is already registered")
        cls.name = name
        FILTERS[name] = cls
        return cls

    return wrap


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
            raise ConfigError(f"bad filter {token!r} at column {match.start() + 1} of {text!r}: {e}") from None
    if text and text.strip() and not chain:
        raise ConfigError(f"empty filter chain {text!r}")
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
