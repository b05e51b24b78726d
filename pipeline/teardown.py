"""How a run ends: frames still queued give back what they hold, the device's work is drained, the output
is finished or removed, the memory and the source are closed, and the run's error (or the stop that ended
it) is raised once everything is let go.

Mixed into :class:`pipeline.engine.Pipeline`, as :class:`pipeline.stages.Stages` and
:class:`pipeline.tally.Tally` are.
"""

from __future__ import annotations

import contextlib
import time

from .checks import as_pipeline_error
from .encoders import is_hardware
from .errors import GPUError, GPUStalled, InputError, PipelineError, SourceStalled
from .log import log
from .startup import trim_heap
from .video import WorkItem

# Sources left open for the process's exit to free (RunControl.process_ends): held here so that nothing
# frees them piece by piece before it.
_LEFT_TO_EXIT: list = []


class Teardown:
    """The tear-down side of a run."""

    def _drain_leftovers(self) -> None:
        """Frames still queued when a run stopped early: their slots and buffers go back, so memory that
        outlives the run (shared, or counted right after) holds nothing of it."""
        for channel in (self.q_decoded, self.q_submitted):
            for item in channel.clear():
                if isinstance(item, WorkItem):
                    self._give_back(item)

    def _give_back(self, item: WorkItem) -> None:
        """Everything a frame holds, once the work it issued has completed: its context, its slots, its device
        buffers, its decoder surface. Each part on its own, best effort: the run is ending or failing already
        (its error, a CUDA one too, is the one to report), and a part that cannot go back keeps none of the
        others; memory shared with other runs (run_many, a batch worker) would lose them for good."""
        memory = self.processor.memory
        parts = (lambda: self.processor.abandon(item), lambda: release_in_slot(memory.in_host, item),
                 lambda: self.processor.release(item), lambda: self._release_out_slot(item), item.give_back_surface)
        for give_back in parts:
            with contextlib.suppress(Exception):
                give_back()

    def _release_out_slot(self, item: WorkItem) -> None:
        if item.out_slot is not None:
            self.processor.memory.out_host.release(item.out_slot)
            item.out_slot = None

    def _finish(self, consumer_left: bool = False) -> None:
        self.stats.finish()
        try:
            self._close_parts(consumer_left)
        finally:
            self.stats.finish_ms = round((time.perf_counter() - self.stats.started - self.stats.wall_s) * 1e3, 1)

    def _close_parts(self, consumer_left: bool) -> None:
        self._count_damage()
        if self._stalled is not None:
            # Threads are stuck in CUDA calls: nothing on the device is waited for or given back (each would
            # wait forever); the output keeps the frames done, as for any GPU failure mid-run, unless its
            # encoder is on the GPU too (flushing it would wait as well).
            if self.sink is not None and is_hardware(self.cfg.codec or ""):
                self.sink.abort()
                raise GPUStalled(f"{self._stalled}; no output written")
            self._end_sink(self._stalled)  # raises it
        try:
            self._drain_and_end(consumer_left)
        finally:
            # After the sink: a closed encoder holds none of the slots its frames wrapped, so each goes
            # back whole (to a shared pinned pool, for the next stream).
            self._return_lent()
            self._give_memory_back()
            trim_heap()

    def _drain_and_end(self, consumer_left: bool) -> None:
        error = self._error
        try:
            self._drain_leftovers()
            self.processor.close()
            self._memory.drain()  # frees still pending on an event: the counters below show what is held
        except Exception as e:  # a CUDA error surfacing at the final sync
            error = error or GPUError(f"CUDA error while draining: {e}")
        except BaseException:  # the API caller's Ctrl-C meanwhile: no temporary file left, the name let go
            if self.sink is not None:
                self.sink.abort()
            raise
        self.stats.memory = {**self._memory.counters(), **self._decoder_counters()}
        error = as_pipeline_error(error) if error is not None else self._input_error
        if consumer_left and error is not None and not isinstance(error, GPUError):
            # frames(): the caller stopped (a break, its own exception) before taking the frame that failed;
            # raising here would replace the caller's exception with one about a frame it never saw. A GPU
            # failure is raised all the same: the device may be unusable for what the caller does next.
            log.warning(f"{error} (after the caller stopped taking frames)")
            error = None
        if not (consumer_left and error is None):  # frames(): the caller stopped; nothing to finalise
            self._end_sink(error)

    def _end_sink(self, error: BaseException | None) -> None:
        done, sink = self.stats.frames_out, self.sink
        # Read once: a stop that comes while a complete output is being finished (its trailer written, the
        # file moved into place) ends nothing, and must not report that output as stopped (a batch then
        # removed the file it had just put in place of the user's).
        stopped = self.stop_event.is_set()
        # Keep a playable file of the frames done when stopped on purpose, by the GPU mid-run or by a
        # live source that stalled; any other failure (bad input, write error, a bug) leaves no output.
        keep = done > 0 and (error is None or isinstance(error, (GPUError, SourceStalled)))
        keep = keep and (self.control.keep_partial or (error is None and not stopped))
        if sink is not None:
            if not keep:
                sink.abort()
            else:
                try:
                    sink.finish()
                except PipelineError as e:  # the output could not be kept: why the run had ended still counts
                    if error is None:
                        raise
                    e.args = (f"{e} (the run had ended: {error})",)
                    raise e from error
        self.latency.finish()
        target = sink.target if sink is not None else "the output"
        if error is not None:
            if keep and sink is not None:  # frames() has no output to speak of
                error.args = (f"{error}; {target} holds the {done} frames done",)
            raise error
        if stopped:
            if sink is None:  # frames(): the frames went to the caller, there is no output to speak of
                kept = f"{done} frames processed"
            else:
                kept = f"{target} holds the {done} frames done" if keep else "no output written"
            raise self.control.stop_error(kept)
        if not keep:
            raise InputError(f"{self.source.info.name}: no frames decoded; no output written")

    def _return_lent(self) -> None:
        out_host = self.processor.memory.out_host if self.processor is not None else None
        while self._lent and out_host is not None:
            out_host.release(self._lent.popleft())

    def _give_memory_back(self) -> None:
        if self._owns_memory and self._memory is not None:
            self._memory.close()

    def _close_source(self) -> None:
        if self._stalled is not None:  # the decoder thread may be stuck inside the codec: leave it alone
            return
        if self.control.process_ends and self._feed is None and getattr(self.source, "frees_slowly", False):
            # NVDEC's sessions free their surfaces one cudaFree at a time, holding the interpreter's lock
            # (0.25 s for 4 sessions at 1080p on the H200): the process's exit frees them all at once.
            _LEFT_TO_EXIT.append(self.source.leave_to_exit())
            return
        if self._feed is None or self._feed.close():
            self.source.close()  # else the reader, still in a read, closes it when that returns


def release_in_slot(ring, item: WorkItem) -> None:
    """A frame's input slot back to its ring, once no copy thread writes it."""
    if item.copying is not None:
        item.copying.exception()  # a copy thread may still be writing the slot
    if item.in_slot is not None:
        ring.release(item.in_slot)
        item.in_slot = None
