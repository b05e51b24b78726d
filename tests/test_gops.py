"""Several decoders sharing one file's GOPs (pipeline.gops), checked with CPU decoders: the frames come back
in the order, with the timestamps and the pixels one decoder gives, for closed and open GOPs, B-frames,
all-intra input and a single GOP; the look-ahead bound holds; frames are let go on the sessions' threads.
The NVDEC sessions themselves are exercised on the GPU in test_nvdec.py."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import av
import pytest

from pipeline import gops
from pipeline import sample as make_sample


def clip(tmp_path: Path, name: str, frames: int, **options) -> Path:
    opts = {k: str(v) for k, v in options.items()}
    return make_sample.make_clip(tmp_path / f"{name}.mp4", width=160, height=96, frames=frames, fps=30,
                                 audio=False, seed=5, options=opts)


def digest(frame) -> tuple:
    return frame.pts, hashlib.md5(frame.to_ndarray(format="yuv420p").tobytes()).hexdigest()


def sequential(path: Path) -> list[tuple]:
    with av.open(str(path)) as c:
        return [digest(f) for f in c.decode(c.streams.video[0])]


def split(path: Path, sessions: int, lookahead: int = 8, keep: list | None = None) -> list[tuple]:
    """The file's frames through ``sessions`` decoders fed by one demuxer, as the source feeds them."""
    main = av.open(str(path))
    extra = [av.open(str(path)) for _ in range(sessions - 1)]
    contexts = [c.streams.video[0].codec_context for c in [main, *extra]]
    decoders = gops.GopDecoders(contexts, lookahead=lookahead, make_current=lambda: None)
    out = []
    try:
        for packet in main.demux(main.streams.video[0]):
            outputs = decoders.finish() if packet.size == 0 else decoders.feed(packet)
            for kind, frame, _ in outputs:
                assert kind == "frame"
                out.append(digest(frame))
                if keep is not None:
                    keep.append(frame)
        out_of_finish = list(decoders.finish())  # a second finish has nothing left
        assert out_of_finish == []
    finally:
        decoders.close()
        for c in [main, *extra]:
            c.close()
    return out


@pytest.mark.parametrize("options", [
    {"g": 20, "bf": 3},  # closed GOPs with B-frames (libx264's default kind)
    {"g": 20, "bf": 3, "x264-params": "open-gop=1"},  # open GOPs: leading pictures refer to the GOP before
    {"g": 1, "bf": 0},  # all intra: segments of MIN_SEGMENT pictures, not one each
    {"g": 500, "bf": 2},  # one GOP: one session does it all
], ids=["closed", "open", "intra", "one-gop"])
@pytest.mark.parametrize("sessions", [2, 3])
def test_frames_come_back_as_one_decoder_gives_them(tmp_path, options, sessions):
    path = clip(tmp_path, "c", 90, **options)
    reference = sequential(path)
    assert len(reference) == 90 and len({d for _, d in reference}) > 80  # a moving picture, not a still
    assert split(path, sessions) == reference


def test_an_open_gop_clip_has_leading_pictures(tmp_path):
    """The open-GOP case above is what it claims: pictures after a keyframe in decode order shown before it."""
    path = clip(tmp_path, "open", 90, g=20, bf=3, **{"x264-params": "open-gop=1"})
    with av.open(str(path)) as c:
        packets = [p for p in c.demux(c.streams.video[0]) if p.size]
    keyframes = [i for i, p in enumerate(packets) if p.is_keyframe]
    leading = [i for k in keyframes[1:] for i in range(k + 1, len(packets))
               if packets[i].pts < packets[k].pts and not any(k < j <= i for j in keyframes if j != k)]
    assert len(keyframes) >= 4 and leading


def test_sessions_hold_at_most_their_lookahead(tmp_path, monkeypatch):
    path = clip(tmp_path, "c", 120, g=20, bf=0)
    peak = []
    put = gops._Session._put

    def watched(self, item):
        peak.append(self._frames_out)
        return put(self, item)

    monkeypatch.setattr(gops._Session, "_put", watched)
    assert split(path, 3, lookahead=4) == sequential(path)
    assert max(peak) <= 4


def test_frames_are_let_go_on_the_sessions_threads(tmp_path, monkeypatch):
    """However long the consumer keeps a frame, its last reference goes on the thread that decoded it (or
    once that thread has ended): a surface returned to a decoder's pool elsewhere can deadlock."""
    path = clip(tmp_path, "c", 80, g=20, bf=2)
    released, decoding = [], set()
    release = gops._Session._release

    def watched(self):
        decoding.add(threading.get_ident())
        before = len(self._alive)
        release(self)
        released.append((threading.get_ident(), before - len(self._alive)))

    monkeypatch.setattr(gops._Session, "_release", watched)
    kept: list = []
    assert split(path, 2, keep=kept) == sequential(path)
    assert sum(n for _, n in released) == 0  # the consumer still holds every frame: none let go
    released.clear()
    main = av.open(str(path))
    extra = av.open(str(path))
    decoders = gops.GopDecoders([main.streams.video[0].codec_context, extra.streams.video[0].codec_context],
                                lookahead=4, make_current=lambda: None)
    frames = 0
    for packet in main.demux(main.streams.video[0]):
        for _, frame, _ in (decoders.finish() if packet.size == 0 else decoders.feed(packet)):
            frames += 1
            del frame  # the consumer drops each frame at once, on this thread
    decoders.close()
    main.close(), extra.close()
    assert frames == 80
    assert threading.get_ident() not in decoding
    assert sum(n for _, n in released) >= 60  # the rest were still queued or just decoded when it closed


def test_the_first_frame_comes_before_the_other_sessions_start(tmp_path, monkeypatch):
    """The run's start waits for the first frame: the second segment (another session's decoder to create)
    is sent only once it is out."""
    path = clip(tmp_path, "c", 90, g=20, bf=3)
    out: list = []
    early = []
    send = gops._Session.send

    def watched(self, kind, packet=None, upper=None):
        if self is not sessions[0] and not out:
            early.append(kind)
        send(self, kind, packet, upper)

    monkeypatch.setattr(gops._Session, "send", watched)
    main, extra = av.open(str(path)), av.open(str(path))
    decoders = gops.GopDecoders([main.streams.video[0].codec_context, extra.streams.video[0].codec_context],
                                lookahead=8, make_current=lambda: None)
    sessions = decoders._sessions
    try:
        for packet in main.demux(main.streams.video[0]):
            for item in (decoders.finish() if packet.size == 0 else decoders.feed(packet)):
                out.append(item[1].pts)
    finally:
        decoders.close()
        main.close(), extra.close()
    assert len(out) == 90 and not early
