"""Per-frame latency: host timestamps at every hop, matched to the encoder's packets, in bounded memory.

The hops of one frame, all on the host clock (``time.perf_counter``):

    decoded     the decoder returned it (paced input: its release time, as a camera would deliver it)
    slotted     copied into a (pinned) host slot by the decode stage, ready for the GPU
    uploaded    the H2D copy finished      \\  GPU: the CUDA event's completion, on the host clock
    filtered    the kernels finished        > (see pipeline/gpu/clock.py); CPU backend: when the
    downloaded  the D2H copy finished      /  step returned
    encoder     handed to the encoder (the encode thread had it and the download was complete)
    packet      the encoder returned its packet (later than ``encoder`` by the encoder's look-ahead)

A frame's row is complete once its packet comes out; packets are matched to frames by timestamp
(encoders with B-frames return them out of order). Rows go into fixed-size columns: a run of any
length keeps the last ``capacity`` frames (summaries are over those), so memory never grows.
"""

from __future__ import annotations

import math
from collections import deque
import numpy as np

from .log import log

STAMPS = ("decoded", "slotted", "uploaded", "filtered", "downloaded", "encoder", "packet")
COLUMNS = ("index", "pts_s", *STAMPS)
HOPS = {  # name (ASCII: a key of --stats-json): (from, to)
    "decoded_to_slotted": ("decoded", "slotted"),
    "slotted_to_uploaded": ("slotted", "uploaded"),
    "uploaded_to_filtered": ("uploaded", "filtered"),
    "filtered_to_downloaded": ("filtered", "downloaded"),
    "downloaded_to_encoder": ("downloaded", "encoder"),
    "encoder_to_packet": ("encoder", "packet"),
    "decoded_to_encoder": ("decoded", "encoder"),
    "end_to_end": ("decoded", "packet"),
}
CAPACITY = 1 << 18  # frames kept: 73 minutes at 60 fps, 2 MiB per column
MAX_PENDING = 512  # frames waiting for their packet; more means the encoder dropped some
MATCH_S = 0.005  # a packet's timestamp within this of a frame's is that frame's (time base rounding)


class Ring:
    """The last ``capacity`` values of a series, in float64, allocated once."""

    def __init__(self, capacity: int = CAPACITY):
        self._data = np.empty(capacity, np.float64)
        self.count = 0  # appended in all

    def append(self, value: float) -> None:
        self._data[self.count % len(self._data)] = value
        self.count += 1

    def __len__(self) -> int:
        return min(self.count, len(self._data))

    def values(self) -> np.ndarray:
        """The kept values, oldest first (a copy)."""
        n, cap = self.count, len(self._data)
        if n <= cap:
            return self._data[:n].copy()
        start = n % cap
        return np.concatenate((self._data[start:], self._data[:start]))

    def __getitem__(self, index):
        return self.values()[index]

    def __iter__(self):
        return iter(self.values().tolist())


def summary(values: np.ndarray) -> dict[str, float]:
    """count, mean, p50, p95, p99, max of the finite values (a hop a frame never reached is NaN)."""
    a = np.asarray(values, np.float64)
    a = a[np.isfinite(a)]
    if not a.size:
        return {"count": 0, "mean": 0.0, "p50": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0}
    p50, p95, p99 = np.percentile(a, (50, 95, 99))
    return {"count": int(a.size), "mean": _r(a.mean()), "p50": _r(p50), "p95": _r(p95), "p99": _r(p99),
            "max": _r(a.max())}


def _r(x: float) -> float:
    return round(float(x), 4)


class LatencyLog:
    """Frames handed to the encoder wait here for their packet; then their row is stored."""

    def __init__(self, t0: float, *, budget_ms: float | None = None,
                 capacity: int = CAPACITY):
        self.t0 = t0
        self.columns = {name: Ring(capacity) for name in COLUMNS}
        self._pending: deque[tuple[float | None, int, dict[str, float]]] = deque()
        self.budget_ms = budget_ms
        self.over_budget = 0
        self.unmatched = 0  # frames whose packet never came (an encoder that drops frames)

    def handed(self, index: int, pts_s: float | None, stamps: dict[str, float]) -> None:
        """A frame goes to the encoder now; ``stamps`` holds its earlier hops (host seconds)."""
        self._pending.append((pts_s, index, stamps))
        if len(self._pending) > MAX_PENDING:
            self.unmatched += 1
            self._store(*self._pending.popleft())

    def packets(self, times: list[float | None], now: float) -> None:
        """The encoder returned packets with these timestamps (seconds) at ``now``."""
        for t in times:
            entry = self._match(t)
            if entry is not None:
                entry[2]["packet"] = now
                self._store(*entry)

    def _match(self, t: float | None):
        if not self._pending:
            return None
        head = self._pending[0][0]
        if t is None or head is None or abs(head - t) <= MATCH_S:  # in order: the usual case
            return self._pending.popleft()
        best = min(range(len(self._pending)), key=lambda i: abs((self._pending[i][0] or 0.0) - t))
        if abs((self._pending[best][0] or 0.0) - t) > MATCH_S:
            return None
        entry = self._pending[best]
        del self._pending[best]
        return entry

    def finish(self) -> None:
        """End of run: frames still waiting never got a packet (the encoder kept or dropped them)."""
        while self._pending:
            self.unmatched += 1
            self._store(*self._pending.popleft())

    def _store(self, pts_s: float | None, index: int, stamps: dict[str, float]) -> None:
        cols = self.columns
        cols["index"].append(index)
        cols["pts_s"].append(math.nan if pts_s is None else pts_s)
        for name in STAMPS:
            t = stamps.get(name)
            cols[name].append(math.nan if t is None else (t - self.t0) * 1e3)
        self._check_budget(stamps, index)

    def _check_budget(self, stamps: dict[str, float], index: int) -> None:
        if self.budget_ms is None:
            return
        end = stamps.get("packet", stamps.get("encoder"))
        if end is None or "decoded" not in stamps:
            return
        total = (end - stamps["decoded"]) * 1e3
        if total <= self.budget_ms:
            return
        self.over_budget += 1
        if self.over_budget == 1:
            hop, ms = worst_hop(stamps)
            log.warning(f"frame {index} took {total:.1f} ms from decode to packet, over the "
                         f"{self.budget_ms:g} ms budget (largest hop: {hop_label(hop)} {ms:.1f} ms); "
                         "further frames over budget are counted in the summary")

    def hops(self) -> dict[str, dict[str, float]]:
        """Summary of every hop, in ms, over the kept frames."""
        return {name: summary(self.column(b) - self.column(a)) for name, (a, b) in HOPS.items()}

    def column(self, name: str) -> np.ndarray:
        return self.columns[name].values()

    def series(self) -> dict[str, list]:
        """The per-frame series for --stats-json: ms since the run started (null where unknown), in frame order
        (frames are recorded as their packets come, which an encoder that reorders gives out of order)."""
        order = np.argsort(self.column("index"), kind="stable")
        out: dict[str, list] = {}
        for name in COLUMNS:
            values = self.column(name)[order]
            if name == "index":
                out[name] = [int(v) for v in values]
            else:
                out[name] = [None if not math.isfinite(v) else round(float(v), 4 if name != "pts_s" else 6)
                             for v in values]
        return out


def hop_label(name: str) -> str:
    """A hop's name for people: ``decoded→slotted``, ``end to end``."""
    return "end to end" if name == "end_to_end" else name.replace("_to_", "→")


def worst_hop(stamps: dict[str, float]) -> tuple[str, float]:
    """The single hop (of the six consecutive ones) that took longest for this frame."""
    best, best_ms = "?", -1.0
    for name, (a, b) in list(HOPS.items())[:6]:
        if a in stamps and b in stamps and (ms := (stamps[b] - stamps[a]) * 1e3) > best_ms:
            best, best_ms = name, ms
    return best, best_ms


class HostClock:
    """The CPU backend's contexts hold host times already (its steps run synchronously)."""

    def stamps(self, ctx) -> dict[str, float]:
        s = ctx.stamps
        return {"uploaded": s["uploaded"], "filtered": s["filtered"], "downloaded": s["done"]}
