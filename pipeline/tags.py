"""The input's metadata on the output, as ffmpeg keeps it by default: the file's tags (title, artist,
creation time...) and each kept stream's (language, title, handler).

Tags that describe what this run rewrites are left out, for the muxer and encoder to write anew or not at
all: ``encoder`` (which program wrote the file or stream), Matroska's per-stream ``duration`` and the
statistics mkvmerge writes (``BPS``, ``NUMBER_OF_FRAMES``...), wrong after a cut or a re-encode. So are
values a muxer cannot hold, with a notice: MPEG-TS codes its service name (the title) in 255 bytes, and
several muxers a tag's length in 16 bits (MOV wraps it, so the tags after it read back as garbage).
"""

from __future__ import annotations

from .log import log

REWRITTEN = frozenset({"encoder", "duration", "bps", "number_of_frames", "number_of_bytes"})
MAX_VALUE_BYTES = 16 * 1024  # ASF's UTF-16 doubles it, within the 16 bits of MOV's, FLV's and ASF's lengths
# MPEG-TS: the service name and provider, in 255 bytes with a character-set byte before UTF-8 text.
SHORT_VALUES = {"mpegts": (frozenset({"title", "service_name", "service_provider"}), 254)}


def tags_of(owner) -> tuple[tuple[str, str], ...]:
    """``owner``'s (a PyAV container or stream) metadata, less the tags this run writes anew. Bytes that are
    not UTF-8 are kept (PyAV 19) or read as U+FFFD (PyAV 18: :data:`pipeline.avlib.READ_TAGS`)."""
    return tuple((key, value) for key, value in owner.metadata.items() if not _rewritten(key))


def _rewritten(key: str) -> bool:
    name = key.lower().split("-", 1)[0]  # mkvmerge's "BPS-eng": the tag of one language
    return name in REWRITTEN or name.startswith("_statistics_")


def fitting(tags: tuple[tuple[str, str], ...], muxer: str, target: str) -> dict[str, str]:
    """The tags ``muxer`` can hold; each one left out is said."""
    short_keys, short_limit = SHORT_VALUES.get(muxer, (frozenset(), MAX_VALUE_BYTES))
    kept = {}
    for key, value in tags:
        limit = short_limit if key.lower() in short_keys else MAX_VALUE_BYTES
        size = len(value.encode("utf-8", "surrogateescape"))  # PyAV 19 reads bytes that are not UTF-8 so
        if size > limit:
            log.info(f"{target}: the input's {key!r} tag is left out ({size} bytes; a {muxer} output takes "
                     f"{limit} at most)")
            continue
        kept[key] = value
    return kept
