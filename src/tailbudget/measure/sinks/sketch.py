"""Rolling-window sketches of request and stage latency, for an in-process controller.

`Recorder()` with no sink keeps only these. The window is split into slots
(`window_s / slots` seconds each), one `LatencySketch` per slot for the total
and per stage; a read merges the slots still inside the window, so old data
ages out slot by slot. Writes happen in the writer thread; reads take a lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypedDict

from tailbudget.errors import TailbudgetError
from tailbudget.measure.sinks.base import Batch, Sink
from tailbudget.sketch import LatencySketch

TOTAL = ""


class _Slot:
    __slots__ = ("count", "errors", "sketches", "start")

    def __init__(self, start: int) -> None:
        self.start = start
        self.count = 0
        self.errors = 0
        self.sketches: dict[str, LatencySketch] = {}


class WindowSnapshot(TypedDict):
    """The rolling window's figures: requests, errors, and p50/p95/p99 in ms (None while
    the window is empty)."""

    count: int
    errors: int
    p50: float | None
    p95: float | None
    p99: float | None


class SketchSink(Sink):
    """Keeps the last `window_s` seconds of latency (total and per stage) as sketches."""

    name = "sketch"

    def __init__(
        self,
        window_s: float = 60.0,
        *,
        slots: int = 6,
        relative_accuracy: float = 0.01,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not window_s > 0 or slots < 1:
            raise TailbudgetError(
                f"window_s must be > 0 and slots >= 1, got {window_s!r} and {slots!r}"
            )
        self.window_s = float(window_s)
        self.slot_s = self.window_s / slots
        self.relative_accuracy = relative_accuracy
        self._clock = clock
        self._lock = threading.Lock()
        self._slots: dict[int, _Slot] = {}

    def _sketch(self, slot: _Slot, key: str) -> LatencySketch:
        sk = slot.sketches.get(key)
        if sk is None:
            sk = slot.sketches[key] = LatencySketch(self.relative_accuracy)
        return sk

    def write(self, batch: Batch) -> None:
        grouped: dict[int, dict[str, list[float]]] = {}
        errors: dict[int, int] = {}
        epoch_ns = batch.clock.epoch_ns
        for r, row in zip(batch.records, batch.rows, strict=True):
            idx = int(epoch_ns(r.start_ns) / 1e9 // self.slot_s)
            values = grouped.setdefault(idx, {})
            values.setdefault(TOTAL, []).append(row["total_ms"])
            if row["error"]:
                errors[idx] = errors.get(idx, 0) + 1
            for key, value in row.items():
                if key.endswith("_ms") and key != "total_ms" and isinstance(value, float):
                    values.setdefault(key[:-3], []).append(value)
        oldest = int(self._clock() // self.slot_s) - round(self.window_s / self.slot_s)
        with self._lock:
            for idx, values in grouped.items():
                slot = self._slots.get(idx)
                if slot is None:
                    slot = self._slots[idx] = _Slot(idx)
                slot.count += len(values[TOTAL])
                slot.errors += errors.get(idx, 0)
                for key, vals in values.items():
                    self._sketch(slot, key).add_many(vals)
            for idx in [i for i in self._slots if i < oldest]:
                del self._slots[idx]

    def _live(self, now: float | None) -> list[_Slot]:
        t = self._clock() if now is None else now
        newest = int(t // self.slot_s)
        oldest = newest - round(self.window_s / self.slot_s) + 1
        return [s for i, s in self._slots.items() if oldest <= i <= newest]

    def window(self, stage: str | None = None, *, now: float | None = None) -> LatencySketch:
        """A merged sketch (ms) of the window's totals, or of one stage."""
        out = LatencySketch(self.relative_accuracy)
        with self._lock:
            for slot in self._live(now):
                sk = slot.sketches.get(stage or TOTAL)
                if sk is not None:
                    out.merge(sk)
        return out

    def snapshot(self, *, now: float | None = None) -> WindowSnapshot:
        """count, errors, p50, p95, p99 (ms or None) of the window's requests."""
        with self._lock:
            live = self._live(now)
            count = sum(s.count for s in live)
            errors = sum(s.errors for s in live)
        sk = self.window(now=now)
        p50, p95, p99 = sk.quantiles([0.5, 0.95, 0.99]) if sk.count else (None, None, None)
        return {"count": count, "errors": errors, "p50": p50, "p95": p95, "p99": p99}
