"""Filters: a registry of small classes, each with a CPU reference and a CUDA kernel.

Write your own with :func:`register_filter` and load it with ``pipeline run --plugin my_filter.py``.
:func:`fuse_pointwise` merges neighbouring per-pixel filters of a parsed chain into one kernel.
"""

from .fuse import PointwiseFilter, fuse_pointwise
from .plugins import load_plugin
from .registry import FILTERS, Filter, Param, describe_filter, parse_chain, register_filter

__all__ = ["FILTERS", "Filter", "Param", "PointwiseFilter", "describe_filter", "fuse_pointwise", "load_plugin",
           "parse_chain", "register_filter"]
