"""The bodies of the three stage threads, frame by frame along the data path: decode into a host slot,
submit to the device, wait for the frame and encode it.

Mixed into :class:`pipeline.engine.Pipeline`, which owns what they share (the channels, the processor,
the sink, the statistics) and starts, joins and tears down the threads around them; kept apart so that
the per-frame path reads on its own, without the run's set-up and tear-down.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from typing import Any, Callable

from .channels import END as _END, Aborted, AnyOf, wait_for
from .errors import InputError, SourceStalled
from .video import WorkItem


class Stages:
    """What each stage thread runs (see :mod:`pipeline.engine` for the threads and channels)."""

    def _decode_stage(self) -> None:
        feed = self._feed
        if feed is not None:
            entries = feed.entries(self.stop_event)
        elif getattr(self.source, "read_apart", False):  # the application's frames, asked for on their own thread
            entries = self.source.items(self.cfg.frames, stop=AnyOf(self.stop_event, self.abort),
                                        on_thread=getattr(self.backend, "make_current", None))
        else:
            entries = self.source.items(self.cfg.frames)
        copiers = None
        if self.cfg.copy_threads > 1:
            from concurrent.futures import ThreadPoolExecutor

            copiers = ThreadPoolExecutor(self.cfg.copy_threads, thread_name_prefix="pipeline-copy")
        self._copiers = copiers
        try:
            for entry in entries:
                if self.stop_event.is_set():
                    break
                if not hasattr(entry, "meta"):  # an audio packet: passed through in order
                    self.q_decoded.put(entry)
                    continue
                with self.nvtx(f"decode {entry.meta.index}"):
                    item = self._into_slot(entry)
                try:
                    self.q_decoded.put(item)
                except Aborted:
                    self._give_back(item)
                    raise
        except SourceStalled as e:
            self._input_error = e  # the frames before the stall still go through; reported at the end
        finally:
            if feed is not None:
                feed.stop()
            if copiers is not None:
                copiers.shutdown(wait=True)

    def _into_slot(self, entry) -> WorkItem:
        in_host = self.processor.memory.in_host
        if in_host is None:  # decoded into device memory: nothing to copy
            self.stats.count_in()
            entry.meta.stamps["slotted"] = time.perf_counter()
            # the item holds the only reference: a live reader decodes on another thread, and the entry
            # kept here would otherwise drop the frame's last reference on this one
            surface, entry.frame = entry.frame, None
            return WorkItem(entry.meta, surface=surface, surface_home=getattr(self.source, "returns", None))
        # Slots are taken here, in frame order: the submit thread consumes frames in order, so copy
        # threads racing for slots could leave it waiting on a frame that has none.
        slot = wait_for(lambda: in_host.acquire(timeout=0.05), self.abort)
        self.stats.count_in()
        item = WorkItem(entry.meta, in_slot=slot)
        with self._given_back_on_failure(item):
            if self._copiers is not None:
                item.copying = self._copiers.submit(self._copy, entry, slot)
            else:
                self._copy(entry, slot)
        return item

    @contextlib.contextmanager
    def _given_back_on_failure(self, item: WorkItem):
        """A frame whose work in this thread fails gives back what it holds (its slots, its device buffers
        once the work it issued has completed, its decoder surface): memory shared with other runs (run_many,
        a batch worker) would otherwise lose them for good, one frame per failed run."""
        try:
            yield
        except BaseException:
            self._give_back(item)
            raise

    def _copy(self, entry, slot) -> None:
        t0 = time.perf_counter()
        self.source.copy_into(entry.frame, slot.array)
        t1 = time.perf_counter()
        entry.meta.decode_s += t1 - t0
        entry.meta.stamps["slotted"] = t1

    def _submit_stage(self) -> None:
        keep = self.sink is None or self.sink.residence == "device"
        while (item := self.q_decoded.get()) is not _END:
            if isinstance(item, WorkItem):
                with self._given_back_on_failure(item):
                    if item.copying is not None:
                        item.copying.result()  # the copy into its slot (raises what the copy raised)
                        item.copying = None
                    with self.nvtx(f"submit {item.meta.index}"):
                        self.processor.submit(item, keep_device=keep)
            try:
                self.q_submitted.put(item)
            except Aborted:
                if isinstance(item, WorkItem):  # the run stopped while this frame was on its way
                    self._give_back(item)
                raise

    def _encode_stage(self) -> None:
        sink, lent = self.sink, self._lent
        latency = self.latency
        stats = self.stats

        def on_packets(times) -> None:
            now = time.perf_counter()
            stats.first_output(now)
            latency.packets(times, now)

        if hasattr(sink, "on_packets"):
            sink.on_packets = on_packets
        while (item := self.q_submitted.get()) is not _END:
            if not isinstance(item, WorkItem):
                self._write_audio(item)
                continue
            with self.nvtx(f"encode {item.meta.index}"), self._given_back_on_failure(item):
                self._encode_frame(item, lent)

    def _write_audio(self, entry) -> None:
        if self.sink.write_audio(entry.packet):
            self.stats.audio_packets += 1
        elif self.cfg.strict and getattr(self.sink, "audio_dropped", 0):
            raise InputError(f"{self.cfg.input}: damaged audio packet at dts {entry.packet.dts} (--strict)")

    def _complete(self, item: WorkItem, watch: Callable[[], None] | None = None) -> tuple[dict[str, float], float]:
        """Wait for the frame (its ``done`` event only; ``watch``: see Processor.wait_done); record its GPU
        hop times. Returns its stage times and the host time it was handed on."""
        meta = item.meta
        self.processor.wait_done(item, watch)
        gpu_stamps = self.backend.clock.stamps(item.ctx)  # read before the context's events are reused
        timings = self.processor.hand_back(item)
        t0 = time.perf_counter()
        self.latency.handed(meta.index, meta.seconds, {"decoded": meta.decoded_at, **meta.stamps, **gpu_stamps,
                                                        "encoder": t0})
        return timings, t0

    def _encode_frame(self, item: WorkItem, lent: deque) -> None:
        meta, sink = item.meta, self.sink
        timings, t0 = self._complete(item)
        if self.abort.is_set():  # the run ended while this frame was awaited (a stall: the sink is closed)
            raise Aborted  # the frame is given back on the way out
        if sink.residence == "device":
            sink.write_video(self.processor.output_array(item), meta)
            self.processor.release(item)
        else:
            slot, item.out_slot = item.out_slot, None
            # Lent before the write: an encoder that fails part-way may still hold a frame wrapping the slot,
            # which then goes back only once the encoder is closed (Teardown._return_lent).
            lent.append(slot)
            sink.write_video(slot.lend(*self._out_shape()), meta)
            if self.preview is not None and self.preview.wants_frame():
                from .preview import eight_bit_i420

                self.preview.offer(eight_bit_i420(slot.array, item.out_format), self._caption(meta, t0))
            if slot.in_use_elsewhere:
                sink.zero_copy = False  # this encoder keeps frames: copy from now on, never wait on it
            while lent and not lent[0].in_use_elsewhere:
                self.processor.memory.out_host.release(lent.popleft())
        self._count_out(meta, timings, t0)

    def _out_shape(self) -> tuple[tuple[int, ...], Any]:
        """The shape and sample type the sink takes the output in."""
        from .convert import layout_dtype, layout_shape

        return layout_shape(self.plan.out_layout, self.plan.out_format), layout_dtype(self.plan.out_layout)

