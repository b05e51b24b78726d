"""Resuming a batch: which outputs are complete, and the marker that says so.

An output is *complete* when it exists and its marker, ``DIR/.<output name>.done.json``, matches:
the marker is written only after a successful run, and records the input's size and modification time,
the hash of the options that shape the output, and the output's own size. A run never leaves a partial
output (the pipeline writes a temporary file and renames it into place when complete), and the marker
of an output about to be replaced is removed before its run starts, so a marker never vouches for a
file it did not see finished.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ..config import RunConfig
from ..errors import ConfigError, OutputError
from ..textfile import read_text

MARKER_VERSION = 1
MAX_MARKER_BYTES = 1 << 16

# Fields that cannot change the output's pixels or frames: where it goes, how it is reported, the memory
# and queue sizes (the pooled and per-frame paths give the same frames), and a live source's read timeout
# and reconnects (a batch reads files). Every other field, including ones added later, is hashed: an
# unknown field makes a file be processed again, never skipped.
_NOT_HASHED = frozenset({
    "input", "output", "overwrite", "quiet", "stats_json", "debug", "preview", "nvtx", "alloc", "ring_size",
    "streams", "in_flight", "copy_threads", "nvdec_sessions", "arena_headroom", "latency_budget",
    "pinned_cap_mib", "write_combined", "timeout", "reconnect",
})


def options_hash(cfg: RunConfig) -> str:
    """A short hash of the options that shape an output; plugins and the files the filter chain reads (a
    3D LUT) count by their contents too."""
    from ..filters.registry import chain_files

    values: dict[str, Any] = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)
                              if f.name not in _NOT_HASHED}
    values["plugins"] = [[p, _file_digest(p)] for p in cfg.plugins]
    values["filter_files"] = [[str(p), _file_digest(p)] for p in chain_files(cfg.filters)]
    text = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _file_digest(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "unreadable"  # the run itself reports it


def marker_path(output: Path) -> Path:
    return output.with_name(f".{output.name}.done.json")


def input_identity(path: Path) -> tuple[int, int] | None:
    """(size, mtime in ns) of the input, or None when it cannot be read."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def why_incomplete(source: Path, output: Path, digest: str) -> str | None:
    """None when ``output`` is a complete output of ``source`` with these options; else the reason."""
    if not output.exists():
        return "no output"
    try:  # a marker is a few lines: a FIFO, a device or a huge file put in its place is not one
        marker = json.loads(read_text(marker_path(output), MAX_MARKER_BYTES, "marker"))
    except (ConfigError, ValueError, RecursionError):  # RecursionError: JSON nested thousands deep
        return "no marker of a finished batch run beside it"
    identity = input_identity(source)
    if not isinstance(marker, dict) or marker.get("version") != MARKER_VERSION:
        return "its marker is from another version"
    if identity is None or [marker.get("input_size"), marker.get("input_mtime_ns")] != list(identity):
        return "the input changed since"
    if marker.get("options") != digest:
        return "it was made with other options"
    if marker.get("output_size") != output.stat().st_size:
        return "the output changed since"
    return None


def forget(output: Path) -> str | None:
    """Remove the marker before ``output`` is written again: if that run dies after renaming its output
    into place but before writing the new marker, no marker is left to vouch for the old one. Returns the
    marker's text (None: there was none), for :func:`restore` should the run leave the old output."""
    marker = marker_path(output)
    try:
        kept = read_text(marker, MAX_MARKER_BYTES, "marker")
    except ConfigError:  # none, or no marker of ours (a FIFO, a directory): nothing to give back
        kept = None
    try:
        marker.unlink(missing_ok=True)
    except OSError as e:  # a directory in its place, a read-only folder: the run would write unvouched
        raise OutputError(f"{marker}: cannot remove the resume marker: {e.strerror or e}") from None
    return kept


def restore(output: Path, kept: str | None) -> None:
    """Put back the marker :func:`forget` removed: the run that was to replace ``output`` failed or was
    stopped and left it as it was, complete as before. Best effort: without it the output only counts as
    incomplete."""
    if kept is not None:
        with contextlib.suppress(OSError):
            _write(marker_path(output), kept)


def write_marker(output: Path, identity: tuple[int, int] | None, digest: str, frames: int) -> None:
    """Record a finished output; written to a temporary name and renamed, so it is whole or absent."""
    if identity is None:
        return  # the input vanished during the run: nothing to compare with next time
    body = {"version": MARKER_VERSION, "input_size": identity[0], "input_mtime_ns": identity[1],
            "options": digest, "output_size": output.stat().st_size, "frames": frames}
    _write(marker_path(output), json.dumps(body))


def _write(marker: Path, text: str) -> None:
    tmp = marker.with_name(f"{marker.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, marker)
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk: nothing half-written left beside the output
        raise
