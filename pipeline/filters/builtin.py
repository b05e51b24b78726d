"""Importing this module registers every built-in filter."""

from . import blur, pointwise  # noqa: F401
