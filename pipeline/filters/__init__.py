"""Filters: a registry of small classes, each with a CPU reference and a CUDA kernel.

Write your own with :func:`register_filter` and load it with ``pipeline run --plugin my_filter.py``.
"""

from .registry import FILTERS, Filter, Param, load_plugin, parse_chain, register_filter

__all__ = ["FILTERS", "Filter", "Param", "load_plugin", "parse_chain", "register_filter"]
