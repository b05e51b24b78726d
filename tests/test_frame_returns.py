"""Decoded surfaces go back to the decoder's pool from the thread that decodes (pipeline.decode.FrameReturns).

FFmpeg allocates a hardware decoder's surfaces holding its pool's lock and may log meanwhile, which takes
the GIL; a frame freed on another thread takes that lock holding the GIL. The last reference to a decoded
frame must therefore be dropped by the decoding thread, or after decoding has ended.
"""

from __future__ import annotations

import threading

from pipeline.decode import FrameReturns
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
