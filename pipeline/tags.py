"""The input's metadata on the output, as ffmpeg keeps it by default: the file's tags (title, artist,
creation time...) and each kept stream's (language, title, handler).

Tags that describe what this run rewrites are left for the muxer and encoder to write anew: ``encoder``
(which program wrote the file or stream) and ``duration`` (Matroska's per-stream duration, wrong after a
cut).
"""

from __future__ import annotations

REWRITTEN = frozenset({"encoder", "duration"})


def tags_of(owner) -> tuple[tuple[str, str], ...]:
    """``owner``'s (a PyAV container or stream) metadata, less the tags this run writes anew. Inputs are
    opened with bytes that are not UTF-8 read as U+FFFD (:func:`pipeline.opening.open_input`)."""
    return tuple((key, value) for key, value in owner.metadata.items() if key.lower() not in REWRITTEN)
