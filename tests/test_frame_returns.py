"""Decoded surfaces go back to the decoder's pool from the thread that decodes (pipeline.decode.FrameReturns).

FFmpeg allocates a hardware decoder's surfaces holding its pool's lock and may log meanwhile, which takes
the GIL; a frame freed on another thread takes that lock holding the GIL. The last reference to a decoded
frame must therefore be dropped by the decoding thread, or after decoding has ended.
"""

from __future__ import annotations

import contextlib
import threading
import time
import types

import pytest

from pipeline.decode import FrameReturns
from pipeline.stages import Stages
from pipeline.video import FrameMeta, WorkItem


class Surface:
    """Stands for a decoded frame: records the thread its last reference was dropped on."""

    def __init__(self, log: list):
        self.log = log

    def __del__(self):
        self.log.append(threading.get_ident())


def item_with_surface(log: list, home) -> WorkItem:
    surface = Surface(log)
    return WorkItem(FrameMeta(index=0, pts=0, time_base=None), surface=surface,
                    surface_planes=(Surface(log), Surface(log)), surface_home=home)


def on_thread(fn) -> int:
    ident = []
    t = threading.Thread(target=lambda: (fn(), ident.append(threading.get_ident())))
    t.start()
    t.join()
    return ident[0]


def test_a_surface_handed_back_elsewhere_is_freed_on_the_decoding_thread():
    returns, log = FrameReturns(), []
    item = item_with_surface(log, returns)
    other = on_thread(item.give_back_surface)
    assert len(log) == 2 and set(log) == {other}  # the views went where the frame's work ended
    assert item.surface is None and item.surface_planes is None and item.surface_home is None
    returns.drop()  # what the decoding thread does before each packet
    assert log[2:] == [threading.get_ident()]


def test_after_decoding_has_ended_surfaces_are_freed_where_handed_back():
    returns, log = FrameReturns(), []
    kept = item_with_surface(log, returns)
    kept.give_back_surface()
    returns.close()  # the one held is freed by the closer
    assert log[-1] == threading.get_ident() and len(log) == 3
    late = item_with_surface(log, returns)
    other = on_thread(late.give_back_surface)
    assert log[3:] == [other, other, other]


def test_a_surface_without_a_home_is_dropped_at_once():
    log = []
    item = item_with_surface(log, None)
    item.give_back_surface()
    assert len(log) == 3 and item.surface is None


class LiveSource:
    """A live input decoding on the reader thread, as NVDEC does: it drops handed-back frames before each
    frame and records, per freed frame, whether its decoding thread was still running."""

    live, path = True, "rtsp://camera"

    def __init__(self, frames: int, log: list):
        self.returns, self.frames, self.log = FrameReturns(), frames, log
        self.reader: threading.Thread | None = None

    def entries(self):
        from pipeline.decode import DecodedFrame

        self.reader = threading.current_thread()
        for i in range(self.frames):
            self.returns.drop()  # what DecodeLoop._decode_packet does before each packet
            time.sleep(0.004)
            yield DecodedFrame(LoggedSurface(self), FrameMeta(index=i, pts=i, time_base=None))

    def close(self):
        self.returns.close()


class LoggedSurface:
    def __init__(self, source: LiveSource):
        self.source = source

    def __del__(self):
        reader = self.source.reader
        self.source.log.append(threading.current_thread() is reader or not reader.is_alive())


def decode_stage(source: LiveSource, q_decoded) -> types.SimpleNamespace:
    """The engine's decode stage over a Feed, with what it reads of the engine (frames decoded into
    device memory: no host slot)."""
    from pipeline.live import Feed

    abort = threading.Event()
    stage = types.SimpleNamespace(
        stop_event=threading.Event(), cfg=types.SimpleNamespace(copy_threads=1), q_decoded=q_decoded, source=source,
        processor=types.SimpleNamespace(memory=types.SimpleNamespace(in_host=None)),
        stats=types.SimpleNamespace(count_in=lambda: None), nvtx=lambda name: contextlib.nullcontext(),
        _feed=Feed(source, size=4, policy="drop-oldest", abort=abort, paced=False, limit=None, reconnect=0,
                   timeout=5, on_drop=lambda entry: None))
    stage._into_slot = lambda entry: Stages._into_slot(stage, entry)
    stage._give_back = lambda item: item.give_back_surface()
    return stage


@pytest.mark.parametrize("gpu_ms", [1, 40])  # keeping up; falling behind, so that frames are dropped
def test_a_live_reader_frees_every_surface_it_decoded_even_those_dropped(gpu_ms):
    from pipeline.channels import END, Channel
    from pipeline.engine import _slot_dropper

    log, dropped = [], []
    source = LiveSource(40, log)
    stats = types.SimpleNamespace(drop=dropped.append)
    q_decoded = Channel(2, threading.Event(), policy="drop-oldest", droppable=lambda i: isinstance(i, WorkItem),
                        on_drop=_slot_dropper(None, stats))
    stage = decode_stage(source, q_decoded)

    def gpu():  # the frame's kernels complete, then the processor hands the surface back
        while (item := q_decoded.get()) is not END:
            time.sleep(gpu_ms / 1e3)
            item.give_back_surface()

    threads = [threading.Thread(target=gpu, name="pipeline-encode"),
               threading.Thread(target=lambda: (Stages._decode_stage(stage), q_decoded.put(END)),
                                name="pipeline-decode")]
    stage._feed.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    if stage._feed.close():
        source.close()
    assert len(log) == 40 and all(log), f"{log.count(False)} of 40 freed off the decoding thread while it decoded"
    assert bool(dropped) == (gpu_ms > 10)


def test_an_audio_packet_in_flight_when_the_run_stops_is_let_go_as_it_is():
    """The submit stage hands back what a frame holds when the run stops under it; an audio packet holds
    nothing (it had no ``copying`` to read: an AttributeError replaced the caller's own exception)."""
    from pipeline.channels import Aborted
    from pipeline.decode import AudioPacket

    class Stopped:
        def put(self, item):
            raise Aborted

    given = []
    stage = types.SimpleNamespace(sink=None, q_decoded=types.SimpleNamespace(get=lambda: AudioPacket(object())),
                                  q_submitted=Stopped(), _give_back=given.append)
    with pytest.raises(Aborted):
        Stages._submit_stage(stage)
    assert given == []
