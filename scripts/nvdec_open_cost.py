#!/usr/bin/env python3
"""Where an NVDEC decoder's open, first frame and release go, in a process where CuPy's context exists.

    python scripts/nvdec_open_cost.py CLIP [CLIP ...] [--repeats 3]

For each clip, ``--repeats`` times: the container's open with the stream analysis as FFmpeg does it
(``open``), and with its probing decoders skipping every frame (``open_headers``, what
``pipeline.opening`` asks for where CuPy was up before the run); the first frame through NVDEC (the
decoder is made at the first packet); the decoder's release (the container and its frames let
go). Then the same decoder reused for the clip again after a flush (``first_frame_reused``): what a
``pipeline.DecoderPool`` saves. Milliseconds, one JSON line per repeat. Needs CuPy, PyAV and a GPU with
NVDEC.
"""

from __future__ import annotations

import argparse
import gc
import json
import time


def ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1e3, 1)


def one(clip: str, accel, headers_only: dict) -> dict:
    import av

    row = {"clip": clip}
    t0 = time.perf_counter()
    av.open(clip).close()
    row["open"] = ms(t0)
    t0 = time.perf_counter()
    container = av.open(clip, hwaccel=accel, options=headers_only)
    row["open_headers"] = ms(t0)
    video = container.streams.video[0]
    ctx = av.CodecContext.create(video.codec_context.name, "r", hwaccel=accel)
    ctx.extradata = video.codec_context.extradata
    ctx.thread_type, ctx.thread_count = "SLICE", 1
    packets = list(container.demux(video))
    for label in ("first_frame", "first_frame_reused"):
        frames, t0 = [], time.perf_counter()
        for packet in packets:
            frames += ctx.decode(packet)
            if frames:
                break
        row[label] = ms(t0)
        ctx.decode(None)
        ctx.flush_buffers()  # as a DecoderPool hands it on
        del frames
    t0 = time.perf_counter()
    container.close()
    del ctx, container, video, packets
    gc.collect()
    row["release"] = ms(t0)
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("clips", nargs="+")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    import cupy

    cupy.cuda.Device(0).use()
    cupy.empty(1)  # the context, as an application that has CuPy up has it
    from pipeline.nvdec import accel
    from pipeline.opening import PROBE_HEADERS_ONLY

    for clip in args.clips:
        for _ in range(args.repeats):
            print(json.dumps(one(clip, accel(0), PROBE_HEADERS_ONLY)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
