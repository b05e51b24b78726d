"""The ceilings and the CPU peer that ``pipeline bench`` measures beside the strategies, in the same run.

decode-only and encode-only fps bound any pipeline on this clip; the plain transcode (decode then
encode, two threads, same encoder settings, no processing) is the e2e ceiling; FFmpeg's own CPU
filters on a heavier chain are the peer the GPU path is compared with, beside our run of that chain.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Any, Callable

from ..config import RunConfig
from ..filters import parse_chain
from . import ffmpeg_graph, peers


def _median_run(fn: Callable[[], dict], repeats: int) -> dict:
    runs = [fn() for _ in range(repeats)]
    best = sorted(runs, key=lambda r: r["fps"])[len(runs) // 2]
    return {**best, "fps": round(statistics.median(r["fps"] for r in runs), 2), "fps_runs": [round(r["fps"], 2) for r in runs]}


def measure_peers(args, cfg: RunConfig, say) -> dict[str, Any]:
    frames, repeats = args.frames, args.repeats
    codec, opts = cfg.codec, cfg.encoder_opts
    out: dict[str, Any] = {}
    say("ceilings: decode only")
    out["decode"] = {"label": "decode only", **_median_run(lambda: peers.decode_fps(args.input, frames=frames), repeats)}
    say("ceilings: encode only")
    out["encode"] = {"label": f"encode only ({codec})", **_encode_only(args.input, frames, codec, opts, repeats)}
    say("ceilings: plain transcode")
    out["transcode"] = {"label": "plain PyAV transcode", **_median_run(
        lambda: peers.transcode_fps(args.input, codec=codec, options=opts, frames=frames), repeats)}
    out.update(_heavy_chain(args, cfg, say))
    return out


def _encode_only(path: str, frames: int, codec: str, opts: dict, repeats: int) -> dict:
    decoded = peers.load_frames(path, frames=frames)  # in memory, outside the timing
    w, h, rate = decoded[0].width, decoded[0].height, peers.video_info(path)["rate"]
    return _median_run(lambda: peers.encode_fps(decoded, width=w, height=h, rate=rate, codec=codec, options=opts),
                       repeats)


def _heavy_chain(args, cfg: RunConfig, say) -> dict[str, Any]:
    """The same heavier chain through FFmpeg's CPU filters and through the pooled GPU pipeline."""
    from ..engine import Pipeline

    chain = parse_chain(args.peer_filters)
    graph = ffmpeg_graph.ffmpeg_chain(chain)
    result: dict[str, Any] = {}
    if graph is None:
        result["ffmpeg_filters"] = {"label": "FFmpeg CPU filters", "skipped": f"no FFmpeg equivalent for {args.peer_filters!r}"}
    else:
        say(f"peer: FFmpeg CPU filters {graph!r}")
        result["ffmpeg_filters"] = {"label": "FFmpeg CPU filters, heavy chain", "note": graph, **_median_run(
            lambda: peers.ffmpeg_filters_fps(args.input, graph, codec=cfg.codec, options=cfg.encoder_opts,
                                             frames=args.frames), args.repeats)}
    say(f"peer: pipeline (pool) with {args.peer_filters!r}")
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp:
        run_cfg = cfg.replace(alloc="pool", filters=args.peer_filters, frames=args.frames,
                              output=str(Path(tmp) / f"heavy{Path(args.input).suffix or '.mp4'}"))
        Pipeline.from_config(run_cfg.replace(frames=args.warmup)).run()
        runs = [Pipeline.from_config(run_cfg).run() for _ in range(args.repeats)]
    fps = [r.steady_fps() for r in runs]
    result["pipeline_heavy"] = {"label": "pipeline (pool), heavy chain", "note": args.peer_filters,
                                "fps": round(statistics.median(fps), 2), "fps_runs": [round(f, 2) for f in fps],
                                "frames": runs[0].frames_out}
    if "fps" in result["ffmpeg_filters"]:
        result["pipeline_heavy"]["x_ffmpeg"] = round(result["pipeline_heavy"]["fps"] / result["ffmpeg_filters"]["fps"], 2)
    return result
