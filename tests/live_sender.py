"""A live MPEG-TS sender for the real-time tests: remuxes a clip to a URL at the clip's own pace.

    python tests/live_sender.py CLIP URL [--loop] [--stall-after N] [--stall-s S] [--connect-s S]

Packets are sent when due by their timestamps, as a camera or encoder would send them. ``--stall-after
N``: after N video packets, stop sending for ``--stall-s`` seconds (the connection stays open), then
carry on. ``--connect-s``: keep retrying to connect that long (a TCP listener may not be up yet).
Bounded in every case: it ends after the clip (or ``--loop`` times it) and never waits forever.
"""

from __future__ import annotations

import argparse
import sys
import time

import av


def open_output(url: str, src, connect_s: float):
    """The output with a stream per input stream, connected (FFmpeg connects when writing the header)."""
    deadline = time.monotonic() + connect_s
    while True:
        out = av.open(url, "w", format="mpegts", timeout=(2.0, 2.0))
        streams = {s.index: out.add_stream_from_template(s) for s in src.streams}
        try:
            out.start_encoding()
            return out, streams
        except (OSError, av.error.FFmpegError):
            out.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def send(clip: str, url: str, *, loops: int, stall_after: int | None, stall_s: float, connect_s: float) -> int:
    sent = 0
    with av.open(clip) as src:
        out, streams = open_output(url, src, connect_s)
        origin = time.monotonic()
        offset = 0.0  # stream time of this loop's start
        for _ in range(loops):
            end = offset
            src.seek(0)
            for packet in src.demux():
                if packet.dts is None:
                    continue
                t = offset + float(packet.dts * packet.time_base)
                end = max(end, t)
                time.sleep(max(0.0, origin + t - time.monotonic()))
                if packet.stream.type == "video":
                    if sent == stall_after:
                        time.sleep(stall_s)
                        origin += stall_s
                    sent += 1
                shift = round(offset / packet.time_base)
                packet.pts = None if packet.pts is None else packet.pts + shift
                packet.dts += shift
                packet.stream = streams[packet.stream.index]
                out.mux(packet)
            offset = end + 0.1
        out.close()
    return sent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("clip")
    p.add_argument("url")
    p.add_argument("--loop", type=int, default=1, help="send the clip this many times")
    p.add_argument("--stall-after", type=int)
    p.add_argument("--stall-s", type=float, default=30.0)
    p.add_argument("--connect-s", type=float, default=20.0)
    args = p.parse_args(argv)
    sent = send(args.clip, args.url, loops=args.loop, stall_after=args.stall_after, stall_s=args.stall_s,
                connect_s=args.connect_s)
    print(f"sent {sent} video packets", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
