"""Host ring, arena sub-allocator, device pool and per-frame strategies: plain Python, with fake events."""

from __future__ import annotations

import gc
import itertools
import queue
import threading

import numpy as np
import pytest

from pipeline.errors import GPUError
from pipeline.memory.arena import ALIGN, ArenaAllocator, Block, align_up
from pipeline.memory.device_pool import BufferSpec, DevicePool, NumpyBacking, frame_bytes
from pipeline.memory.host_ring import HostRing, HostSlot
from pipeline.memory.strategies import Memory, PerFrameDevice, PerFrameHost


class FakeEvent:
    """A CUDA event stand-in: ``done`` is set by the test or by ``synchronize()``, which is recorded."""

    def __init__(self, done: bool = False, name: str = ""):
        self.done = done
        self.name = name
        self.sync_calls = 0

    def synchronize(self) -> None:
        self.sync_calls += 1
        self.done = True


def _ring(size: int = 2, nbytes: int = 64) -> HostRing:
    return HostRing(size, nbytes, lambda n: np.zeros(n, np.uint8))


# --- HostRing ---------------------------------------------------------------------------------------


def test_ring_allocates_once():
    calls = []
    ring = HostRing(3, 100, lambda n: calls.append(n) or np.zeros(n, np.uint8))
    assert calls == [100, 100, 100]
    assert ring.bytes_reserved == 300 and ring.free_count() == 3
    assert all(s.array.nbytes == 100 for s in ring.slots)
    for _ in range(10):
        ring.release(ring.acquire())
    assert len(calls) == 3 and ring.acquires == 10


def test_ring_rejects_size_zero():
    with pytest.raises(ValueError, match=r"Invalid ring size \(0\)"):
        _ring(size=0)


def test_slot_is_reused_only_after_its_event():
    ring = _ring(size=2)
    first = ring.acquire()
    pending = FakeEvent(done=False)
    ring.release(first, after=pending)
    second = ring.acquire()
    assert second is not first and pending.sync_calls == 0  # a free slot is preferred to waiting
    again = ring.acquire()
    assert again is first
    assert pending.sync_calls == 1 and pending.done  # waited on that event before handing it out
    assert first.last_use is None


def test_done_event_is_not_waited_on():
    ring = _ring(size=1)
    done = FakeEvent(done=True)
    ring.release(ring.acquire(), after=done)
    ring.acquire()
    assert done.sync_calls == 0


def test_acquire_blocks_when_all_slots_are_out():
    ring = _ring(size=2)
    a, b = ring.acquire(), ring.acquire()
    with pytest.raises(queue.Empty):
        ring.acquire(timeout=0.05)
    assert ring.waits == 0  # a wait is counted once it is served, so retries count once
    ring.release(b)
    assert ring.acquire(timeout=0.05) is b
    assert a is not b


def test_acquire_wakes_when_another_thread_releases():
    ring = _ring(size=1)
    slot = ring.acquire()
    got = []
    waiter = threading.Thread(target=lambda: got.append(ring.acquire(timeout=10)))
    waiter.start()
    ring.release(slot, after=FakeEvent(done=False))
    waiter.join(10)
    assert not waiter.is_alive() and got == [slot]


def _lazy_ring(size: int = 4, fail_after: int | None = None) -> tuple[HostRing, list[int]]:
    made: list[int] = []

    def allocate(n: int) -> np.ndarray:
        if fail_after is not None and len(made) >= fail_after:
            raise MemoryError("no more pinned memory")
        made.append(n)
        return np.full(n, len(made), np.uint8)

    return HostRing(size, 64, allocate, eager=1), made


def test_a_lazy_ring_starts_with_one_slot_and_a_run_that_needs_one_stays_there():
    ring, made = _lazy_ring()
    assert made == [64] and ring.bytes_reserved == 64
    for _ in range(20):
        ring.release(ring.acquire(), after=FakeEvent(done=True))
    assert len(made) == 1 and ring.allocs == 0 and ring.waits == 0 and ring.acquires == 20


def test_a_lazy_ring_grows_when_every_slot_is_out_and_never_past_its_size():
    ring, made = _lazy_ring(size=3)
    held = [ring.acquire() for _ in range(3)]
    assert len({id(s) for s in held}) == 3 and len(made) == 3 and ring.allocs == 2
    with pytest.raises(queue.Empty):  # full: now it waits, as a ring allocated whole does
        ring.acquire(timeout=0.05)
    ring.release(held[1])
    assert ring.acquire(timeout=0.05) is held[1] and len(made) == 3 and ring.bytes_reserved == 3 * 64


def test_a_lazy_ring_adds_a_slot_rather_than_wait_for_a_copy_in_flight():
    ring, made = _lazy_ring(size=2)
    first = ring.acquire()
    copying = FakeEvent(done=False)
    ring.release(first, after=copying)
    second = ring.acquire()
    assert second is not first and copying.sync_calls == 0 and len(made) == 2
    ring.release(second, after=FakeEvent(done=False))
    again = ring.acquire()  # the ring is whole: the oldest slot, once its copy has completed
    assert again is first and copying.sync_calls == 1


def test_a_lazy_ring_that_cannot_allocate_goes_on_with_the_slots_it_has(caplog):
    ring, made = _lazy_ring(size=4, fail_after=2)
    a, b = ring.acquire(), ring.acquire()
    with caplog.at_level("WARNING", logger="pipeline"):
        with pytest.raises(queue.Empty):
            ring.acquire(timeout=0.05)
    assert len(made) == 2 and ring.size == 2 and "slot 3 of 4 failed" in caplog.text
    ring.release(a)
    assert ring.acquire(timeout=0.05) is a


def test_a_lazy_ring_under_many_threads_hands_no_slot_out_twice_and_allocates_each_once():
    """Random holds and releases from four threads: a slot is never held twice at once, and the ring
    allocates at most its size, however many frames pass (nothing per frame)."""
    ring, made = _lazy_ring(size=5)
    held: set[int] = set()
    lock = threading.Lock()
    errors = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        mine = []
        for _ in range(300):
            if mine and (len(mine) > 1 or rng.random() < 0.5):
                slot = mine.pop(int(rng.integers(len(mine))))
                with lock:
                    held.discard(slot.index)
                ring.release(slot, after=FakeEvent(done=bool(rng.random() < 0.5)))
            else:
                try:
                    slot = ring.acquire(timeout=1)
                except queue.Empty:
                    continue
                with lock:
                    if slot.index in held:
                        errors.append(slot.index)
                    held.add(slot.index)
                mine.append(slot)
        for slot in mine:
            with lock:
                held.discard(slot.index)
            ring.release(slot)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and len(made) <= 5 and ring.allocs == len(made) - 1 and ring.acquires > 300
    assert ring.free_count() == len(ring.slots)


def test_a_lazy_ring_that_cannot_reach_two_slots_fails_as_a_whole_ring_would():
    """One slot is not enough where a consumer holds a frame while the next is filled: the allocation's
    error goes to the run instead of a wait that might never end."""
    ring, made = _lazy_ring(size=4, fail_after=1)
    ring.acquire()
    with pytest.raises(MemoryError, match="no more pinned memory"):
        ring.acquire(timeout=0.05)
    assert len(made) == 1 and ring.size == 4


def test_a_closed_lazy_ring_allocates_no_more():
    ring, made = _lazy_ring()
    slot = ring.acquire()
    ring.release(slot)
    ring.close()
    assert ring._grow() is None and len(made) == 1


def test_lend_tracks_the_view():
    slot = HostSlot(0, np.zeros(24, np.uint8))
    assert not slot.in_use_elsewhere
    view = slot.lend((6, 4))
    assert view.shape == (6, 4) and np.shares_memory(view, slot.array)
    assert slot.in_use_elsewhere
    del view
    gc.collect()
    assert not slot.in_use_elsewhere


def test_lend_without_shape_and_relend():
    slot = HostSlot(0, np.zeros(8, np.uint8))
    first = slot.lend()
    assert first.shape == (8,) and first is not slot.array
    second = slot.lend()
    del second
    # The slot tracks the most recent loan only.
    assert not slot.in_use_elsewhere
    del first


# --- ArenaAllocator ---------------------------------------------------------------------------------


def test_align_up():
    assert [align_up(n) for n in (0, 1, 255, 256, 257, 512)] == [0, 256, 256, 256, 512, 512]
    assert align_up(5, 4) == 8


def test_alloc_is_aligned():
    arena = ArenaAllocator(4096)
    blocks = [arena.alloc(n) for n in (1, 300, 0, 256, 17)]
    assert all(b.offset % ALIGN == 0 and b.size % ALIGN == 0 for b in blocks)
    assert [b.size for b in blocks] == [256, 512, 256, 256, 256]
    assert [b.offset for b in blocks] == [0, 256, 768, 1024, 1280]
    assert arena.in_use == 1536 and arena.hits == 5


def test_fragmentation_is_the_free_memory_a_frame_of_all_of_it_could_not_use():
    """Checked against the free bytes counted cell by cell (every 256-byte cell marked in use or free)."""
    rng = np.random.default_rng(3)
    arena = ArenaAllocator(64 * ALIGN)
    assert arena.fragmentation == 0.0 == arena.fragmentation_peak
    held, worst = [], 0.0
    for _ in range(300):
        if held and (rng.random() < 0.45 or arena.in_use > 48 * ALIGN):
            arena.free([held.pop(int(rng.integers(len(held))))])
            continue
        held.append(arena.alloc(int(rng.integers(1, 6)) * ALIGN))
        cells = np.ones(64, bool)  # free
        for b in held:
            cells[b.offset // ALIGN:(b.offset + b.size) // ALIGN] = False
        runs = [len(r) for r in "".join("f" if c else "u" for c in cells).split("u") if r]
        expected = 1 - max(runs) / sum(runs) if runs else 0.0
        assert arena.fragmentation == pytest.approx(expected)
        worst = max(worst, expected)
    assert worst > 0.3 and arena.fragmentation_peak == pytest.approx(worst)
    for b in held:
        arena.free([b])
    assert arena.fragmentation == 0.0  # coalesced back into one block
    pool = DevicePool(4096, NumpyBacking(4096))
    frames = [pool.alloc_frame([BufferSpec((256,), np.uint8)]) for _ in range(3)]
    pool.free_frame(frames[1], None)
    pool.alloc_frame([BufferSpec((256,), np.uint8)] * 2)  # 512 bytes: not in the 256-byte hole
    counters = pool.counters()
    assert counters["fragmentation"] == counters["fragmentation_peak"] == pytest.approx(1 - 2816 / (2816 + 256), abs=1e-4)


def test_first_fit():
    arena = ArenaAllocator(2048)
    a, b, c, d = (arena.alloc(256) for _ in range(4))
    big = arena.alloc(512)
    arena.free([b])
    arena.free([d])
    # A 512-byte request skips the 256-byte holes and takes the tail.
    assert arena.alloc(512).offset == big.offset + big.size
    # A 256-byte request takes the first hole, not the later one.
    assert arena.alloc(256).offset == b.offset
    assert arena.alloc(256).offset == d.offset
    assert a.offset == 0 and c.offset == 512


@pytest.mark.parametrize("seed", range(3))
def test_freeing_everything_coalesces(seed):
    arena = ArenaAllocator(64 * 1024)
    rng = np.random.default_rng(seed)
    blocks = [arena.alloc(int(n)) for n in rng.integers(1, 3000, 20)]
    order = rng.permutation(len(blocks))
    for i in order[:10]:
        arena.free([blocks[i]])
    for i in order[10:]:
        arena.free([blocks[i]])
    assert arena._free == [(0, arena.capacity)]
    assert arena.in_use == 0
    # The whole capacity is usable in one piece again.
    assert arena.alloc(arena.capacity) == Block(0, arena.capacity)


def test_peak_and_in_use():
    arena = ArenaAllocator(4096)
    a = arena.alloc(1000)  # 1024
    b = arena.alloc(500)  # 512
    assert arena.in_use == 1536 and arena.peak == 1536
    arena.free([a])
    assert arena.in_use == 512 and arena.peak == 1536
    c = arena.alloc(2048)
    assert arena.in_use == 2560 and arena.peak == 2560
    arena.free([b, c])
    assert arena.in_use == 0 and arena.peak == 2560


def test_block_freed_with_pending_event_is_not_reused_until_done():
    arena = ArenaAllocator(1024)
    a = arena.alloc(256)
    event = FakeEvent(done=False)
    arena.free([a], after=event)
    assert arena.in_use == 256  # still counted until the event completes
    b = arena.alloc(256)
    assert b.offset != a.offset and event.sync_calls == 0
    event.done = True
    c = arena.alloc(256)
    assert c.offset == a.offset  # reclaimed once done, without waiting
    assert event.sync_calls == 0 and arena.waits == 0


def test_free_with_done_event_is_immediate():
    arena = ArenaAllocator(256)
    a = arena.alloc(256)
    arena.free([a], after=FakeEvent(done=True))
    assert arena.in_use == 0 and arena.alloc(256).offset == 0


def test_exhausted_arena_waits_on_oldest_pending_event():
    arena = ArenaAllocator(768)
    a, b, c = arena.alloc(256), arena.alloc(256), arena.alloc(256)
    older, newer = FakeEvent(name="older"), FakeEvent(name="newer")
    arena.free([b], after=older)
    arena.free([a, c], after=newer)
    got = arena.alloc(200)
    assert got.offset == b.offset
    assert older.sync_calls == 1 and newer.sync_calls == 0
    assert arena.waits == 1
    # Needing 512 contiguous bytes: only the newer event's blocks can give them.
    arena.free([got])
    assert arena.alloc(512).offset == 0
    assert newer.sync_calls == 1 and arena.waits == 2


def test_waits_on_several_events_until_it_fits():
    arena = ArenaAllocator(512)
    a, b = arena.alloc(256), arena.alloc(256)
    e1, e2 = FakeEvent(), FakeEvent()
    arena.free([a], after=e1)
    arena.free([b], after=e2)
    assert arena.alloc(512).offset == 0
    assert e1.sync_calls == e2.sync_calls == 1


def test_exhausted_arena_without_pending_raises():
    arena = ArenaAllocator(512)
    arena.alloc(256)
    arena.alloc(256)
    with pytest.raises(GPUError, match="out of device memory"):
        arena.alloc(1)


def test_request_larger_than_arena_raises():
    arena = ArenaAllocator(1024)
    with pytest.raises(GPUError, match="exceeds"):
        arena.alloc(2048)


def test_drain_waits_for_all_pending():
    arena = ArenaAllocator(1024)
    events = [FakeEvent() for _ in range(3)]
    for e in events:
        arena.free([arena.alloc(256)], after=e)
    arena.drain()
    assert all(e.sync_calls == 1 for e in events)
    assert arena.in_use == 0 and arena._free == [(0, 1024)]


# --- DevicePool over NumpyBacking -----------------------------------------------------------------------

SPECS = [
    BufferSpec((96 * 160 * 3 // 2,), np.uint8),
    BufferSpec((3, 96, 160), np.float32),
    BufferSpec((3, 7, 5), np.float32),
    BufferSpec((13,), np.uint8),
    BufferSpec((3, 96, 160), np.float32),
]


def test_buffer_spec_nbytes_and_frame_bytes():
    assert BufferSpec((3, 4, 5), np.float32).nbytes == 240
    assert frame_bytes([BufferSpec((3, 4, 5), np.float32), BufferSpec((1,), np.uint8)]) == 512


def test_pool_views_have_the_right_shapes_and_dtypes():
    pool = DevicePool.sized_for(frame_bytes(SPECS), 2, 1.0, NumpyBacking)
    buffers = pool.alloc_frame(SPECS)
    for array, spec in zip(buffers.arrays, SPECS):
        assert array.shape == spec.shape and array.dtype == spec.dtype
        assert array.flags.c_contiguous
        assert np.shares_memory(array, pool.backing.buffer)
    assert all(b.offset % ALIGN == 0 for b in buffers.blocks)


def test_pool_views_do_not_overlap():
    pool = DevicePool.sized_for(frame_bytes(SPECS), 3, 1.0, NumpyBacking)
    frames = [pool.alloc_frame(SPECS) for _ in range(3)]
    arrays = [a for f in frames for a in f.arrays]
    for i, a in enumerate(arrays):
        a[...] = i + 1
    for i, a in enumerate(arrays):
        assert (a == i + 1).all(), f"buffer {i} was overwritten"
    for a, b in itertools.combinations(arrays, 2):
        assert not np.shares_memory(a, b)


def test_pool_allocates_once_over_many_frames():
    pool = DevicePool.sized_for(frame_bytes(SPECS), 2, 1.2, NumpyBacking)
    backing_buffer = pool.backing.buffer
    in_flight = []
    for n in range(50):
        event = FakeEvent()
        in_flight.append(event)
        pool.free_frame(pool.alloc_frame(SPECS), after=event)
        if len(in_flight) > 1:  # the frame before this one finishes
            in_flight.pop(0).done = True
    c = pool.counters()
    assert c["device_allocs"] == 1 and c["device_frees"] == 0
    assert c["pool_hits"] == 50  # one arena block per frame
    assert c["pool_waits"] == 0  # two frames in flight fit: nothing ever waited
    assert c["bytes_reserved"] == pool.arena.capacity >= 2 * frame_bytes(SPECS)
    assert c["bytes_peak"] == 2 * frame_bytes(SPECS)
    pool.drain()
    assert pool.counters()["bytes_in_use"] == 0
    assert pool.backing.buffer is backing_buffer


def test_pool_hits_grow_and_waits_show_when_full():
    pool = DevicePool.sized_for(frame_bytes(SPECS), 1, 1.0, NumpyBacking)
    before = pool.counters()["pool_hits"]
    first = FakeEvent()
    pool.free_frame(pool.alloc_frame(SPECS), after=first)
    pool.alloc_frame(SPECS)  # room for one frame only: waits on the first one's event
    c = pool.counters()
    assert c["pool_hits"] == before + 2
    assert c["pool_waits"] >= 1 and first.sync_calls == 1
    assert c["device_allocs"] == 1


def test_sized_for_adds_extra_state_bytes():
    pool = DevicePool.sized_for(1000, 4, 1.5, NumpyBacking, extra=10)
    assert pool.arena.capacity == align_up(6000) + align_up(10)
    assert pool.backing.buffer.nbytes == pool.arena.capacity


# --- per-frame strategies -------------------------------------------------------------------------------


def test_per_frame_device_counts_every_buffer():
    freed = []
    device = PerFrameDevice(lambda s: np.empty(s.shape, s.dtype), freed.append)
    total = sum(s.nbytes for s in SPECS)
    for n in range(1, 6):
        event = FakeEvent()
        buffers = device.alloc_frame(SPECS)
        assert [a.shape for a in buffers.arrays] == [s.shape for s in SPECS]
        assert device.bytes_in_use == total
        device.free_frame(buffers, after=event)
        assert event.sync_calls == 1  # freed only once the frame's work is done
        assert device.device_allocs == device.device_frees == n * len(SPECS)
    c = device.counters()
    assert c["bytes_in_use"] == 0 and c["bytes_peak"] == total and c["pool_hits"] == 0
    assert len(freed) == 5 * len(SPECS)


def test_per_frame_device_frees_on_the_allocating_thread():
    """A frame given back from another thread is freed by the allocating one, before its next allocation."""
    freed_on = []
    device = PerFrameDevice(lambda s: np.empty(s.shape, s.dtype), lambda a: freed_on.append(threading.get_ident()))
    first = device.alloc_frame(SPECS)
    event = FakeEvent()
    giver = threading.Thread(target=device.free_frame, args=(first, event))
    giver.start()
    giver.join()
    assert freed_on == [] and event.sync_calls == 0  # queued, not freed on the consumer's thread
    second = device.alloc_frame(SPECS)
    assert freed_on == [threading.get_ident()] * len(SPECS) and event.sync_calls == 1
    assert device.device_frees == len(SPECS) and device.bytes_in_use == sum(s.nbytes for s in SPECS)
    threading.Thread(target=device.free_frame, args=(second, None)).run()  # run(): on this thread
    giver = threading.Thread(target=device.free_frame, args=(device.alloc_frame(SPECS), None))
    giver.start()
    giver.join()
    device.drain()  # end of run: what other threads gave back is freed
    assert device.device_allocs == device.device_frees == 3 * len(SPECS) and device.bytes_in_use == 0


def test_per_frame_host_allocates_at_every_acquire():
    allocated = []
    host = PerFrameHost(32, lambda n: allocated.append(n) or np.zeros(n, np.uint8))
    slots = [host.acquire() for _ in range(4)]
    assert allocated == [32] * 4 and host.acquires == 4 and host.bytes_reserved == 0
    assert len({id(s.array) for s in slots}) == 4
    for slot in slots:
        host.release(slot)


def test_per_frame_host_frees_only_after_the_event():
    events = {}
    freed = []  # (array, was its event done when it was freed)

    def free(array):
        event = events.get(id(array))
        freed.append((array, event is None or event.done))

    host = PerFrameHost(32, lambda n: np.zeros(n, np.uint8), free)
    slots = [host.acquire() for _ in range(3)]
    for slot in slots:
        events[id(slot.array)] = event = FakeEvent()
        host.release(slot, after=event)
    for event in events.values():
        event.done = True
    host.release(host.acquire(), after=None)  # later traffic gives the completed buffers back
    if hasattr(host, "drain"):
        host.drain()
    assert all(done for _, done in freed), "a buffer was freed while its last copy could still be running"
    assert {id(a) for a, _ in freed} >= {id(s.array) for s in slots}


def test_memory_counters_merge_host_and_device():
    in_ring, out_ring = _ring(2, 100), _ring(2, 50)
    device = DevicePool.sized_for(frame_bytes(SPECS), 1, 1.0, NumpyBacking)
    mem = Memory("pool", in_ring, out_ring, device, pinned=True)
    c = mem.counters()
    assert c["strategy"] == "pool" and c["device_allocs"] == 1
    assert c["host_bytes"] == 300 and c["pinned_bytes"] == 300
    assert Memory("pool", in_ring, out_ring, device, pinned=False).counters()["pinned_bytes"] == 0


def test_pinned_rings_over_the_cap_are_refused_before_allocating():
    from pipeline.errors import GPUError
    from pipeline.gpu.memory import check_pinned
    from pipeline.memory.registry import MemoryRequest

    small = MemoryRequest(1 << 20, 1 << 20, 1 << 20, 0, 8, 4, 1.2, pinned_cap=32 << 20)
    check_pinned(small)  # 16 MiB of rings under a 32 MiB cap
    with pytest.raises(GPUError, match="host rings need 32 MiB, over the cap of 16 MiB"):
        check_pinned(MemoryRequest(2 << 20, 2 << 20, 1 << 20, 0, 8, 4, 1.2, pinned_cap=16 << 20))
