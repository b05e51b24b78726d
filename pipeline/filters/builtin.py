"""Importing this module registers every built-in filter."""

from . import bilateral, blur, geometry, looks, lut, pointwise, spatial, temporal  # noqa: F401
