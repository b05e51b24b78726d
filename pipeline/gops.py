"""Several NVDEC sessions on one file: its GOPs handed out in turn, their frames back in order.

One NVDEC session decodes 1080p H.264 at about 520 fps and 4K at 100-180 fps on the H200, whatever else is
idle; four sessions on four files reach about 1,460 and 310 together (PEERS.md). A GOP, from a keyframe to
the next, decodes without the pictures before it, so one file's GOPs can go to several sessions at once:
the demuxer (the source's own loop, on the decode thread) reads every packet once and sends each segment
(one GOP, or several short ones) to the next session in turn; each session decodes on its own thread
(PyAV releases the GIL inside FFmpeg) into a bounded queue; the decode thread takes the frames back
segment by segment, so they come out in the order one session would have produced them, bit for bit
(decoding is exact).

Open GOPs: pictures after a keyframe in decode order but shown before it (leading pictures) refer to the
GOP before. They go to the previous segment's session together with the keyframe, which that session
decodes as a reference only (its picture is not kept); the next session starts at the keyframe without
them. A closed GOP (libx264's default) costs nothing extra.

Memory: each session holds at most ``lookahead`` decoded surfaces that the pipeline has not taken yet,
besides its decoder's own.

Surfaces go back to a session's pool only on that session's thread: returning one on another thread while
the session allocates can deadlock (see :class:`pipeline.decode.FrameReturns`). A session keeps a
reference to every frame it decoded and lets it go once it holds the last one, so however the pipeline
and the decode thread drop theirs (handed back, cut by a span, left in a queue), the last reference goes on
the session's thread.
"""

from __future__ import annotations

import collections
import sys
import threading
import time
import weakref
from typing import Callable, Iterator

import av


# A keyframe starts a new segment only after this many packets: all-intra input would otherwise flush
# a decoder after every picture.
MIN_SEGMENT = 16
_END = "end"
FIRST_FRAME_WAIT_S = 0.5
# Packets a session may have waiting: within one long GOP the demuxer waits for the decoder beyond this.
MAX_BACKLOG = 64


def _sole_count() -> int:
    """What getrefcount says of an object only a list holds, seen as _Session._release sees it (3 on
    CPython 3.11-3.13: the list, the loop's name, the argument; less where loads borrow references)."""
    probe = [object()]
    return [sys.getrefcount(f) for f in probe][0]


_SOLE = _sole_count()


class _Session:
    """One decoder on its own thread: packets in, (frame, decode seconds) out, segment by segment."""

    def __init__(self, index: int, ctx, lookahead: int, make_current: Callable[[], None]):
        self.ctx = ctx
        self._alive: list = []  # every frame decoded here that someone may still hold (see the module's notes)
        self._inbox: collections.deque = collections.deque()
        self._outbox: collections.deque = collections.deque()
        self._frames_out = 0  # decoded frames in the outbox
        self._lookahead = lookahead
        self._cv = threading.Condition()
        self._stopped = False
        self._failed = False  # its thread died: its decoder serves no other run
        self._make_current = make_current
        self._thread = threading.Thread(target=self._run, name=f"pipeline-nvdec{index}", daemon=True)
        self._thread.start()

    # -- the decode thread's side -------------------------------------------------------------------

    def send(self, kind: str, packet: av.Packet | None = None, upper: int | None = None) -> None:
        """``kind``: "packet" (decoded and kept), "reference" (decoded, its picture and later ones from
        ``upper`` on dropped), or _END (the segment is complete: flush)."""
        with self._cv:
            self._inbox.append((kind, packet, upper))
            self._cv.notify_all()

    def take(self, block: bool, timeout: float | None = None) -> tuple | None:
        """The next output: ("frame", frame, seconds), ("error", exception, pts) or (_END,); None if
        ``block`` is false and nothing is ready, or nothing came within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while not self._outbox:
                left = None if deadline is None else deadline - time.monotonic()
                if not block or self._stopped or (left is not None and left <= 0):
                    return None
                self._cv.wait(left)
            item = self._outbox.popleft()
            if item[0] == "frame":
                self._frames_out -= 1
                self._cv.notify_all()
            return item

    def backlog(self) -> int:
        """Packets sent and not decoded yet."""
        with self._cv:
            return len(self._inbox)

    def wait_for_room(self, limit: int, timeout: float) -> None:
        """Until at most ``limit`` packets wait, the session stops, or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while len(self._inbox) > limit and not self._stopped and (left := deadline - time.monotonic()) > 0:
                self._cv.wait(left)

    def ask_to_stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify_all()

    def stop(self) -> bool:
        """End the session's thread; True when no frame it decoded is still held elsewhere, so its decoder
        (flushed here) can serve another run without a surface of its pool coming back on another thread."""
        self.ask_to_stop()
        self._thread.join()
        # The session's thread has ended, so nothing allocates from its pool any more: these may go anywhere.
        self._outbox.clear()
        alive, self._alive = self._alive, []
        clean = not self._failed and not [f for f in alive if sys.getrefcount(f) > _SOLE]  # as _release counts
        del alive
        if clean:
            self.ctx.flush_buffers()  # stopped mid-segment: what it held is dropped, as after a seek
        return clean

    # -- the session's own thread ------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._make_current()  # FFmpeg's calls run in CuPy's context, which this thread must hold
            self._decode_all()
        except BaseException as e:  # never leave the decode thread waiting for a session that has died
            self._failed = True
            with self._cv:
                self._outbox.append(("failed", e))
                self._cv.notify_all()

    def _decode_all(self) -> None:
        upper = None
        while (work := self._next()) is not None:
            kind, packet, limit = work
            if kind == "reference":
                upper = limit
            t0 = time.perf_counter()
            try:
                frames = self.ctx.decode(packet if kind != _END else None)
            except av.error.FFmpegError as e:
                self._put(("error", e, packet.pts if packet is not None else None))
                frames = []
            finally:
                if kind == _END:  # even after a failed drain: a decoder left at its end refuses every packet
                    self.ctx.flush_buffers()
            dt = (time.perf_counter() - t0) / max(1, len(frames))
            self._alive.extend(frames)
            for frame in frames:
                if upper is not None and frame.pts is not None and frame.pts >= upper:
                    continue  # the next segment's keyframe, decoded here as a reference only
                if not self._put(("frame", frame, dt)):
                    return
            del frames
            if kind == _END:
                upper = None
                self._put((_END,))

    def _next(self) -> tuple | None:
        self._release()
        with self._cv:
            while not self._inbox and not self._stopped:
                self._cv.wait(0.05)
                self._release_unlocked()
            if self._stopped:
                return None
            self._cv.notify_all()  # room for the demuxer (wait_for_room)
            return self._inbox.popleft()

    def _release(self) -> None:
        """Let go of the frames nobody else holds any more: their surfaces return to the pool here."""
        alive = self._alive
        if alive:
            self._alive = [f for f in alive if sys.getrefcount(f) > _SOLE]
            del alive

    def _release_unlocked(self) -> None:
        self._cv.release()
        try:
            self._release()
        finally:
            self._cv.acquire()

    def _put(self, item: tuple) -> bool:
        """Queue ``item``; a frame waits while ``lookahead`` frames are queued. False once stopped."""
        with self._cv:
            while item[0] == "frame" and self._frames_out >= self._lookahead and not self._stopped:
                self._cv.wait(0.02)
                self._release_unlocked()
            if self._stopped:
                return False
            self._outbox.append(item)
            self._frames_out += item[0] == "frame"
            self._cv.notify_all()
            return True


class GopDecoders:
    """The segments of one stream spread over ``contexts`` (opened decoders, one per session).

    :meth:`feed` takes the stream's packets in demux order and yields the frames that are ready, in order;
    :meth:`finish` yields the rest. ``returns`` stands for the source's :class:`FrameReturns`."""

    def __init__(self, contexts: list, *, lookahead: int, make_current: Callable[[], None],
                 first_frame_first: bool = True):
        self._sessions = [_Session(i, ctx, lookahead, make_current) for i, ctx in enumerate(contexts)]
        # Hold the other segments until the first frame is out: where the run's start waits for that frame.
        self._first_frame_first = first_frame_first
        self.returns = _Returns()
        self._segment = -1  # the segment being sent
        self._head = 0  # the segment whose frames come out next
        self._count = 0  # packets sent in the current segment
        self._boundary: av.Packet | None = None  # a keyframe held until the packet after it says what it starts
        self._reference_sent = False  # the held keyframe went to the last segment, for its leading pictures
        self.finished = False
        self._first_out = False  # a frame has come out
        self._splits = True  # new segments may start (not once a packet without a timestamp came)
        # A source dropped without close() must not leave its sessions waiting for packets for ever.
        weakref.finalize(self, _ask_to_stop, list(self._sessions))

    @property
    def sessions(self) -> int:
        return len(self._sessions)

    def feed(self, packet: av.Packet) -> Iterator[tuple]:
        """Send one video packet; yield the frames (and decode errors) ready meanwhile, in order."""
        if (self._first_frame_first and not self._first_out and packet.is_keyframe and self._segment == 0
                and self._count >= MIN_SEGMENT):
            # The first frame before the second segment starts: the other sessions' decoders, created at once,
            # would slow it, and the run's start waits for it. Bounded: a first GOP may have no good frame.
            # Not in a fresh process: there the start waits for CuPy's import and the kernels, and the later
            # GOPs' sessions, started after the first frame, came late to the second GOP (docs/benchmarks.md).
            yield from self._ready(block_until=1, timeout=FIRST_FRAME_WAIT_S)
        self._dispatch(packet)
        # Read at most one segment more than the sessions decode at once: the packets wait in memory.
        yield from self._ready(block_until=self._segment - len(self._sessions) - 1)
        while self._segment >= 0 and (sending := self._session(self._segment)).backlog() > MAX_BACKLOG:
            # One long GOP: read on only as fast as it decodes. Its packets may give no frame for a while
            # (a stream cut before a keyframe), so this waits for room, not for a frame.
            ready = list(self._ready(block_until=-1))
            yield from ready
            if not ready:
                sending.wait_for_room(MAX_BACKLOG, timeout=0.05)

    def finish(self) -> Iterator[tuple]:
        """The end of the stream: every session flushed, every frame yielded."""
        if self.finished:
            return
        self.finished = True
        if self._boundary is not None:
            self._start_segment(self._boundary)
        if self._segment >= 0:
            self._session(self._segment).send(_END)
        yield from self._ready(block_until=self._segment + 1)

    def close(self) -> list:
        """Stop every session; the decoders that can serve another run (see :meth:`_Session.stop`)."""
        return [session.ctx for session in self._sessions if session.stop()]

    # -- sending ---------------------------------------------------------------------------------

    def _session(self, segment: int) -> _Session:
        return self._sessions[segment % len(self._sessions)]

    def _dispatch(self, packet: av.Packet) -> None:
        if self._segment < 0:  # the first packet starts the first segment, keyframe or not
            self._start_segment(packet)
            return
        if packet.pts is None:
            # Without timestamps an open GOP's leading pictures cannot be told apart: one session from here.
            self._splits = False
        kf = self._boundary
        if kf is not None and not self._splits:
            self._boundary = None  # not a segment's start after all: the last segment goes on through it
            self._session(self._segment).send("packet", kf)
            self._count += 1
        elif kf is not None:
            if _leads(packet, kf):  # a leading picture of an open GOP: the last segment decodes it
                if not self._reference_sent:
                    self._session(self._segment).send("reference", kf, upper=kf.pts)
                    self._reference_sent = True
                self._session(self._segment).send("packet", packet)
                return
            self._start_segment(kf)
        if packet.is_keyframe and self._splits and packet.pts is not None and self._count >= MIN_SEGMENT:
            self._boundary = packet  # what follows it decides whether the last segment needs it
            return
        self._session(self._segment).send("packet", packet)
        self._count += 1

    def _start_segment(self, keyframe: av.Packet) -> None:
        if self._segment >= 0:
            self._session(self._segment).send(_END)
        self._segment += 1
        self._boundary, self._reference_sent, self._count = None, False, 1
        self._session(self._segment).send("packet", keyframe)

    # -- receiving -------------------------------------------------------------------------------

    def _ready(self, block_until: int, timeout: float | None = None) -> Iterator[tuple]:
        """Outputs of the head segment onwards: waiting while the head is before ``block_until`` (until the
        first frame, with a ``timeout``), then whatever is ready."""
        while self._head <= self._segment:
            session = self._session(self._head)
            wait = self._head < block_until and (timeout is None or not self._first_out)
            item = session.take(block=wait, timeout=timeout)
            if item is None:
                return
            if item[0] == _END:
                self._head += 1
                continue
            if item[0] == "failed":
                raise item[1]
            self._first_out = self._first_out or item[0] == "frame"
            yield item


class _Returns:
    """The source's ``returns`` for frames of several sessions: the pipeline drops its reference, and the
    session that decoded the frame, which holds another, lets it go on its own thread (see the module)."""

    def take(self, item) -> None:
        item.surface = None

    def hand_in(self, frame) -> None:
        pass  # the caller's reference is not the last: the frame's session holds one

    def drop(self) -> None:
        pass

    def close(self) -> None:
        pass


def _ask_to_stop(sessions: list[_Session]) -> None:
    for session in sessions:
        session.ask_to_stop()


def _leads(packet: av.Packet, keyframe: av.Packet) -> bool:
    """A packet after ``keyframe`` in decode order that is shown before it (an open GOP's leading picture)."""
    return packet.pts is not None and keyframe.pts is not None and not packet.is_keyframe and packet.pts < keyframe.pts
