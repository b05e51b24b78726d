"""Numbers as people type them on a command line or in a filter chain: ASCII digits, a sign, a decimal
point, an exponent. Python's ``int()`` and ``float()`` take more (``1_0`` as 10, other scripts' digits such as
``١``), which no other video tool reads as numbers and which is more likely a slip than a wish."""

from __future__ import annotations

import re

_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*", re.ASCII)
_NUMBER = re.compile(r"\s*[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf(?:inity)?|nan)\s*",
                     re.ASCII | re.IGNORECASE)  # inf and nan pass here: the range checks name them


def integer(text: str) -> int:
    """``text`` as an int (ValueError unless it is ASCII digits with an optional sign)."""
    if not _INTEGER.fullmatch(text):
        raise ValueError(f"invalid integer: {text!r}")
    return int(text)


def number(text: str) -> float:
    """``text`` as a float (ValueError unless it is written as above)."""
    if not _NUMBER.fullmatch(text):
        raise ValueError(f"invalid number: {text!r}")
    return float(text)
