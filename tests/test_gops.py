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


@pytest.mark.parametrize("first_frame_first", [True, False], ids=["gpu up", "fresh process"])
def test_the_first_frame_comes_before_the_other_sessions_start(tmp_path, monkeypatch, first_frame_first):
    """Where the run's start waits for the first frame (CuPy up before the run), the second segment (another
    session's decoder to create) is sent only once it is out; in a fresh process, where the start waits for
    CuPy's import and the kernels, at once. The frames are the same, in order, either way."""
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
                                lookahead=8, make_current=lambda: None, first_frame_first=first_frame_first)
    sessions = decoders._sessions
    try:
        for packet in main.demux(main.streams.video[0]):
            for item in (decoders.finish() if packet.size == 0 else decoders.feed(packet)):
                out.append(item[1].pts)
    finally:
        decoders.close()
        main.close(), extra.close()
    assert len(out) == 90 and out == sorted(out) and bool(early) != first_frame_first


def through_sessions(path: Path, sessions: int, skip: int = 0, wrap=None, lookahead: int = 8) -> list[tuple]:
    """``path``'s packets after the first ``skip`` through ``sessions`` decoders (``wrap``: around each
    decoder), and what one decoder gives on the same packets."""
    def contexts(n):
        opened = [av.open(str(path)) for _ in range(n)]
        return opened, [c.streams.video[0].codec_context for c in opened]

    results = []
    for n in (1, sessions):
        main = av.open(str(path))
        packets = [p for p in main.demux(main.streams.video[0]) if p.size][skip:]
        opened, ctxs = contexts(n)
        ctxs = [wrap(c) for c in ctxs] if wrap and n > 1 else ctxs
        out = []
        if n == 1:
            for p in [*packets, None]:
                out += [digest(f) for f in ctxs[0].decode(p)]
        else:
            decoders = gops.GopDecoders(ctxs, lookahead=lookahead, make_current=lambda: None)
            try:
                for p in packets:
                    out += [digest(item[1]) for item in decoders.feed(p) if item[0] == "frame"]
                out += [digest(item[1]) for item in decoders.finish() if item[0] == "frame"]
            finally:
                decoders.close()
        for c in [main, *opened]:
            c.close()
        results.append(out)
    return results


def test_a_stream_starting_between_keyframes_keeps_its_order(tmp_path):
    """Packets before the first keyframe (a stream cut mid-GOP) open the first segment; they went to the
    last session, out of order or lost. MPEG-4 Part 2 decodes them (H.264 would drop them)."""
    path = make_sample.make_clip(tmp_path / "m4.mkv", width=160, height=96, frames=90, fps=30, audio=False,
                                 codec="mpeg4", options={"g": "20", "bf": "0"})
    one, many = through_sessions(path, 3, skip=5)
    assert len(one) == 85 and many == one


@pytest.mark.parametrize("codec, suffix", [("libx264", "h264"), ("libx265", "hevc")])
def test_packets_without_timestamps_stay_on_one_session(tmp_path, codec, suffix):
    """A raw Annex B stream has no pts: an open GOP's leading pictures cannot be told apart, so no new
    segment starts (HEVC lost its leading pictures when they did)."""
    path = make_sample.make_clip(tmp_path / f"raw.{suffix}", width=160, height=96, frames=90, fps=30,
                                 audio=False, codec=codec, options={"g": "20", "bf": "3",
                                                                    "x264-params": "open-gop=1"} if
                                 codec == "libx264" else {"g": "20", "bf": "3"})
    one, many = through_sessions(path, 3)
    assert len(one) == 90 and [d for _, d in many] == [d for _, d in one]


class Slow:
    """A decoder that takes its time (the demuxer must wait for it, not read the file into memory)."""

    def __init__(self, ctx, fail_flush: bool = False):
        self.ctx, self.fail_flush, self.flushes = ctx, fail_flush, 0

    def decode(self, packet):
        import time

        time.sleep(0.002)
        frames = self.ctx.decode(packet)
        if packet is None and self.fail_flush and self.flushes == 0:  # drained (at its end), then failed
            self.flushes += 1
            raise av.error.InvalidDataError(22, "a drain that fails")
        return frames

    def flush_buffers(self):
        self.ctx.flush_buffers()


def test_the_demuxer_waits_for_a_long_gop(tmp_path, monkeypatch):
    backlog = []
    send = gops._Session.send

    def watched(self, kind, packet=None, upper=None):
        send(self, kind, packet, upper)
        backlog.append(self.backlog())

    monkeypatch.setattr(gops._Session, "send", watched)
    one, many = through_sessions(clip(tmp_path, "long", 200, g=500, bf=2), 2, wrap=Slow)
    assert many == one and max(backlog) <= gops.MAX_BACKLOG + 2


def test_a_failed_drain_does_not_wedge_its_session(tmp_path):
    """A session whose flush fails still decodes its next segments (it was left at its end, refusing all)."""
    one, many = through_sessions(clip(tmp_path, "c", 120, g=20, bf=0), 2, wrap=lambda c: Slow(c, fail_flush=True))
    assert set(many) <= set(one) and len(many) >= len(one) - 20


def test_sessions_dropped_without_close_end(tmp_path):
    import gc
    import time

    path = clip(tmp_path, "c", 40, g=20, bf=0)
    main = av.open(str(path))
    decoders = gops.GopDecoders([main.streams.video[0].codec_context, av.open(str(path)).streams.video[0].codec_context],
                                lookahead=4, make_current=lambda: None)
    for packet in list(main.demux(main.streams.video[0]))[:5]:
        list(decoders.feed(packet))
    del decoders
    gc.collect()
    deadline = time.monotonic() + 5
    while any(t.name.startswith("pipeline-nvdec") for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("pipeline-nvdec")]
    main.close()


def test_a_long_stretch_without_frames_does_not_stall_the_demuxer(tmp_path):
    """H.264 cut far before its next keyframe decodes to nothing for a long while: the demuxer waiting for
    room must not wait for a frame (it would wait for ever)."""
    one, many = through_sessions(clip(tmp_path, "long", 200, g=150, bf=0), 2, skip=10, wrap=Slow)
    assert many == one and len(one) == 50


def test_decoders_a_run_let_go_cleanly_serve_the_next_file_exactly(tmp_path):
    """A decoder pool (pipeline.nvdec.DecoderPool) hands one file's decoders to the next file of the same
    parameter sets: its frames come out as fresh decoders give them, also after a run stopped part-way
    (the decoders are flushed as they stop). A session whose frame is still held elsewhere does not give
    its decoder back."""
    from pipeline.nvdec import DecoderPool

    first, second = (make_sample.make_clip(tmp_path / f"{n}.mp4", width=160, height=96, frames=90, fps=30,
                                           audio=False, seed=seed, options={"g": "20", "bf": "3"})
                     for n, seed in (("a", 5), ("b", 9)))
    pool, held = DecoderPool(), []

    def through(path: Path, reused: list, keep: bool = False, packets: int | None = None) -> tuple[list, tuple]:
        with av.open(str(path)) as c:
            video = c.streams.video[0]
            key = pool.key(video.codec_context, None)
            made = [av.CodecContext.create(video.codec_context.name, "r") for _ in range(3 - len(reused))]
            for ctx in made:
                ctx.extradata = video.codec_context.extradata
            decoders = gops.GopDecoders(reused + made, lookahead=8, make_current=lambda: None)
            out = []
            for n, packet in enumerate(c.demux(video)):
                if packets is not None and n == packets:
                    break  # stopped mid-segment: the sessions hold undecoded packets and reordered pictures
                for kind, frame, _ in decoders.finish() if packet.size == 0 else decoders.feed(packet):
                    out.append(digest(frame))
                    if keep and not held:
                        held.append(frame)  # the pipeline still holds this one: its session is not clean
                frame = None
            pool.give(key, decoders.close())
            return out, key

    frames, key = through(first, [], keep=True)
    assert frames == sequential(first)
    reused = pool.take(key, 3)
    assert len(reused) == 2 and pool.reused == 2  # the session of the held frame kept its decoder out
    frames, _ = through(second, reused)
    assert frames == sequential(second) and len({d for _, d in frames}) > 80
    for packets in (30, 65):  # part-way through a segment of the first, then the second file whole
        through(first, pool.take(key, 3), packets=packets)
        frames, _ = through(second, pool.take(key, 3))
        assert frames == sequential(second)
    assert pool.take(("other",), 3) == [] and pool.take(key, 3) == []  # another stream's run freed them
