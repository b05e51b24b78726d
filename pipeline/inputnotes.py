"""Notices about an input that the run changes without failing: what the user should hear once.

Plain functions over PyAV's stream and frame objects (read through their attributes, never imported),
so the source stays the only place that opens anything.
"""

from __future__ import annotations

# FFmpeg's AVFieldOrder values: 1 progressive, 2 top field first, 3 bottom field first, 4/5 mixed.
_FIELD_ORDERS = {2: "top field first", 3: "bottom field first", 4: "top field coded first, bottom shown first",
                 5: "bottom field coded first, top shown first"}


def other_video_streams(path: str, videos, chosen) -> str | None:
    """The input has more than one video stream: say which one is processed (the others are not copied)."""
    if len(videos) < 2:
        return None
    others = ", ".join(f"#{s.index} {_describe(s)}" for s in videos if s is not chosen)
    return (f"{path}: {len(videos)} video streams; processing #{chosen.index} ({_describe(chosen)}); "
            f"not in the output: {others}")


_KINDS = {"subtitle": ("subtitle stream", "subtitle streams"), "attachment": ("attachment", "attachments"),
          "data": ("data stream", "data streams")}


def streams_left_out(path: str, streams) -> str | None:
    """Subtitles, attachments (a subtitle's fonts) and data streams (a drone's KLV) are not written: the output
    holds video and audio. ffmpeg leaves them out too, saying so only in its stream map. A timecode track whose
    timecode the video carries as a tag is not said: the tag is kept, and MOV and MP4 write the track again."""
    on_video = {(s.metadata or {}).get("timecode") for s in streams if s.type == "video"} - {None}
    parts = []
    for kind, names in _KINDS.items():
        found = [s for s in streams if s.type == kind and (s.metadata or {}).get("timecode") not in on_video]
        if found:
            parts.append(f"{len(found)} {names[len(found) > 1]}{_data_names(found) if kind == 'data' else ''}")
    if not parts:
        return None
    return f"{path}: not in the output: {', '.join(parts)}; the output holds video and audio only"


def _data_names(streams) -> str:
    """What the data streams carry, where FFmpeg knows: " (klv)", " (timecode 01:00:00:00)"."""
    names = []
    for s in streams:
        timecode = (s.metadata or {}).get("timecode")
        name = f"timecode {timecode}" if timecode else getattr(s, "name", None)
        if name and name != "none" and name not in names:
            names.append(name)
    return f" ({', '.join(names)})" if names else ""


def _describe(stream) -> str:
    cc = stream.codec_context
    name = cc.name if cc is not None else "unknown codec"
    return f"{name} {stream.width}x{stream.height}" if cc is not None else name


def interlaced(path: str, frame, field_order: int | None) -> str | None:
    """An interlaced input: its fields are filtered and encoded together, as progressive frames, and the
    output carries no field flags (a filter mixing the two fields' lines would make them wrong anyway)."""
    if not getattr(frame, "interlaced_frame", False) and field_order not in _FIELD_ORDERS:
        return None
    order = _FIELD_ORDERS.get(field_order or 0, "interlaced")
    return (f"{path}: interlaced video ({order}); processed and written as progressive frames "
            "(deinterlace it first, e.g. FFmpeg's yadif, for clean filtering)")
