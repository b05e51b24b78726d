"""``pipeline bench``: the allocation strategies side by side on one input."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", help="input video file")


def main(args: argparse.Namespace) -> int:
    raise NotImplementedError
