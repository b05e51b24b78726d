"""How a run's statistics (:class:`pipeline.stats.RunStats`) are filled in: what the run is at the start,
each frame as it leaves the pipeline, and what the input and the channels met, at the end.

Mixed into :class:`pipeline.engine.Pipeline`; the stages call :meth:`Tally._count_out` per frame and the
tear-down :meth:`Tally._count_damage` once. Kept apart from the engine so that what is counted, and
where, reads in one place.
"""

from __future__ import annotations

import time

from .log import log
from .video import FrameMeta

# The memory counters are sampled once this many frames are out: what the run allocates after them
# is the steady state (stats.steady_allocs_per_frame).
WARMUP_FRAMES = 2


class Tally:
    """The statistics side of a run (see :class:`pipeline.stats.RunStats` for the fields)."""

    def _describe(self) -> None:
        s, info = self.stats, self.source.info
        s.output = str(self.sink.target) if self.sink is not None else ""
        s.width, s.height = self.plan.out_format.width, self.plan.out_format.height
        s.layouts = {"input": self.plan.in_layout, "output": self.plan.out_layout}
        s.pix_fmt = getattr(self.sink, "pix_fmt", None)
        s.mode = "live" if info.live else "paced" if self.cfg.realtime else "file"
        policy = self.cfg.drop_policy
        if s.mode == "file" and policy not in ("auto", "block"):
            # Nothing upstream of a plain file can overflow: dropping would only lose frames.
            log.info(f"--drop-policy {policy} applies to live or --realtime sources; this file is read with block")
            policy = "block"
        s.drop_policy = policy if policy != "auto" else ("block" if s.mode == "file" else "drop-oldest")

    def _count_out(self, meta: FrameMeta, timings: dict[str, float], t0: float) -> None:
        now = time.perf_counter()
        if self.sink is None or not hasattr(self.sink, "on_packets"):
            self.stats.first_output(now)  # no encoder: the frame itself is the output
        timings.update(decode=meta.decode_s * 1e3, encode=(now - t0) * 1e3)
        self.stats.add_frame(timings, (now - meta.decoded_at) * 1e3, meta.seconds)
        if self.stats.frames_out == WARMUP_FRAMES:
            self.stats.memory_warm = {**self.processor.memory.counters(), **self._decoder_counters(),
                                      "frames": WARMUP_FRAMES}
        if self.on_frame is not None:
            self.on_frame(self.stats)

    def _caption(self, meta: FrameMeta, handed: float) -> str:
        elapsed = handed - self.stats.started
        fps = self.stats.frames_out / elapsed if elapsed > 0 else 0.0
        return f"{fps:5.1f} fps  {(handed - meta.decoded_at) * 1e3:6.1f} ms  dropped {self.stats.dropped}"

    def _count_damage(self) -> None:
        s, source = self.stats, self.source
        s.decode_errors, s.corrupt_frames = source.decode_errors, source.corrupt_frames
        s.retimed_frames = source.retimed_frames
        channels = {"submit": self.q_decoded, "encode": self.q_submitted}
        if self._feed is not None:
            channels = {"decode": self._feed.channel, **channels}
            s.reconnects = self._feed.reconnects
        s.queues = {name: {"size": c.size, "peak": c.peak, "dropped": c.dropped} for name, c in channels.items()}
        dropped = getattr(self.sink, "audio_dropped", 0)
        if dropped:
            log.warning(f"{source.path}: {dropped} damaged audio packets dropped "
                        "(timestamps going backwards, too short, or refused by the muxer)")

    def _decoder_counters(self) -> dict[str, int]:
        """The hardware decoder's own surface pool (allocated by FFmpeg as it needs, then reused)."""
        surfaces = getattr(self.backend.ops, "surfaces", None)
        if surfaces is None or self.stats.decode != "nvdec":
            return {}
        return {"decoder_surfaces": surfaces.count, "decoder_surface_bytes": surfaces.surface_bytes}

