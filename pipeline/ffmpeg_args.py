"""FFmpeg's habits on ``pipeline run``, so that fingers used to ffmpeg work: ``-i IN``, the output as a
positional after the input and ``-n``.
The one-word aliases of existing options (``-vf``, ``-c:v``, ``-f``, ``-v``/``-loglevel``) are declared
beside their long options in :mod:`pipeline.cli`; the long options stay.
"""

from __future__ import annotations

import argparse

from .errors import ConfigError


def add_overwrite_arguments(p) -> None:
    """``-y`` replaces an existing output, ``-n`` never does (exit 2, as without either): one or the other."""
    group = p.add_mutually_exclusive_group()
    group.add_argument("-y", "--overwrite", action="store_true", default=None, help="replace an existing output file")
    group.add_argument("-n", "--no-overwrite", dest="overwrite", action="store_false", default=None,
                       help="never replace an existing output: exit 2 if it exists (the default without -y)")


def add_ffmpeg_arguments(p) -> None:
    """``-i``."""
    p.add_argument("-i", dest="input", action="append", metavar="INPUT",
                   help="the input, as an option (ffmpeg style): then a positional is the output")


def resolve_paths(args: argparse.Namespace) -> None:
    """The input is ``-i IN`` or the first positional; a positional after it is the output (as ``-o``)."""
    given = list(getattr(args, "paths", None) or ())
    inputs = list(args.input) if isinstance(args.input, list) else [args.input] if args.input else []
    if len(inputs) > 1:
        raise ConfigError(f"run: one input only; -i was given {len(inputs)} times")
    if not inputs:
        if not given:
            raise ConfigError("run: an input is needed: pipeline run IN [OUT], or pipeline run -i IN [OUT]")
        inputs.append(given.pop(0))
    if len(given) > 1:
        raise ConfigError(f"run: one input and one output; got {' '.join([*inputs, *given])}")
    if given and args.output is not None:
        raise ConfigError(f"run: two outputs: {given[0]} and -o {args.output}")
    args.input = inputs[0]
    if given:
        args.output = given[0]
    args.paths = None
