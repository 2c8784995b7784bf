"""Rolling windows: a ring of sub-window sketches with request and error counts.

A 60 s window evaluated every 10 s is a ring of 6 sub-windows of 10 s; each
holds a `LatencySketch`, a request count and an error count. Stats at time
`now` merge the sub-windows covering [now - window, now). Observations older
than the ring are counted in `late`, never silently dropped.
"""

from __future__ import annotations

import base64
import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tailbudget._units import percentile_name
from tailbudget.control.stats import quantile_rank_bounds, wilson, z_of
from tailbudget.errors import PolicyError
from tailbudget.sketch import LatencySketch
from tailbudget.sketch.rows import add_rows

__all__ = ["RollingWindow", "SlotGroups", "WindowStats", "observe_rows", "slot_groups"]


@dataclass(frozen=True, slots=True)
class WindowStats:
    """What the controller sees of one window; `known` False means "unknown"."""

    count: int
    errors: int
    p50: float | None
    p95: float | None
    p99: float | None
    known: bool
    error_rate_upper: float | None
    """Wilson upper bound of the error rate (None without requests)."""
    error_rate_lower: float | None = None
    """Wilson lower bound of the error rate (the engine computes it when None)."""
    p99_lower: float | None = None
    """Lower confidence bound of the p99 (order statistics), ms."""
    p99_upper: float | None = None
    """Upper confidence bound of the p99 (order statistics), ms."""
    window_s: float | None = None
    source: str = "window"
    """'window' (in-process sketches) or where the figures came from (e.g. 'prometheus')."""
    quantiles: dict[float, tuple[float, float | None, float | None]] = field(default_factory=dict)
    """Further quantiles asked for (e.g. 0.999): (value, lower bound, upper bound), ms."""

    def q(self, q: float) -> float | None:
        """The q-quantile (ms), or None when the window has none."""
        fixed = {0.5: self.p50, 0.95: self.p95, 0.99: self.p99}
        if q in self.quantiles:
            return self.quantiles[q][0]
        return fixed.get(q)

    def q_bounds(self, q: float) -> tuple[float | None, float | None]:
        """Order-statistic (lower, upper) bounds of the q-quantile; Nones when unknown."""
        if q in self.quantiles:
            _, lo, hi = self.quantiles[q]
            return lo, hi
        if q == 0.99:
            return self.p99_lower, self.p99_upper
        return None, None

    @property
    def error_rate(self) -> float | None:
        """errors / count, or None without requests."""
        return self.errors / self.count if self.count > 0 else None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form."""
        return {
            "count": self.count,
            "errors": self.errors,
            "p50": self.p50,
            "p95": self.p95,
            "p99": self.p99,
            "known": self.known,
            "error_rate": self.error_rate,
            "error_rate_lower": self.error_rate_lower,
            "error_rate_upper": self.error_rate_upper,
            "p99_lower": self.p99_lower,
            "p99_upper": self.p99_upper,
            "window_s": self.window_s,
            "source": self.source,
            **{percentile_name(q): v[0] for q, v in sorted(self.quantiles.items())},
        }


UNKNOWN = WindowStats(0, 0, None, None, None, False, None)


def unusable(stats: WindowStats | None, series: Mapping[str, WindowStats] | None) -> str | None:
    """What makes handed-in stats unfit to judge (a non-finite or negative figure), or None.

    Checked before the stats reach a rule: a figure like that would become a
    decision, a journal record and a snapshot value."""
    named = {"e2e": stats, **(series or {})}
    for name, st in named.items():
        if st is None:
            continue
        for key, value in st.to_dict().items():
            if isinstance(value, float) and not (math.isfinite(value) and value >= 0):
                return f"{name} {key} = {value!r} is not a finite figure >= 0"
    return None


@functools.lru_cache(maxsize=8)
def _z(confidence: float) -> float:
    return z_of(confidence)


SlotGroups = list[tuple[int, "npt.NDArray[np.intp] | slice"]]
"""(slot id, the rows in it) in ascending slot order."""


def slot_groups(ts: npt.NDArray[np.float64], width_s: float) -> SlotGroups:
    """The rows of finite, non-empty `ts` by the ring slot (`width_s` wide) they fall in."""
    ids = np.floor(ts / width_s).astype(np.int64)
    lo_id, hi_id = int(ids.min()), int(ids.max())
    if lo_id == hi_id:  # the common case: a batch within one sub-window
        return [(lo_id, slice(None))]
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    cuts = np.flatnonzero(np.diff(sorted_ids)) + 1
    return [
        (int(sorted_ids[part[0]]), order[part])
        for part in np.split(np.arange(sorted_ids.size), cuts)
    ]


class _Slot:
    __slots__ = ("count", "errors", "id", "sketch")

    def __init__(self, slot_id: int, accuracy: float) -> None:
        self.id = slot_id
        self.count = 0
        self.errors = 0
        self.sketch = LatencySketch(accuracy)


class RollingWindow:
    """A ring of `sub_windows` sketches, each `window_s / sub_windows` seconds wide."""

    def __init__(
        self, window_s: float, sub_windows: int, *, accuracy: float = 0.01, sketch: bool = True
    ) -> None:
        if not window_s > 0 or sub_windows < 1:
            raise PolicyError(
                f"a rolling window needs window_s > 0 and sub_windows >= 1, "
                f"got {window_s!r} and {sub_windows!r}"
            )
        self.window_s = float(window_s)
        self.sub_windows = int(sub_windows)
        self.width_s = self.window_s / self.sub_windows
        self.accuracy = accuracy
        self.sketched = sketch
        """False for a window of counts only (e.g. good requests for goodput)."""
        self._slots: dict[int, _Slot] = {}
        self.newest_id: int | None = None
        self.late = 0
        """Observations older than the ring when they arrived (counted, not used)."""
        self.rejected = 0
        """Observations with a non-finite timestamp or latency (counted, not used)."""

    def _slot_id(self, ts_s: float) -> int:
        return math.floor(ts_s / self.width_s)

    def _slot(self, slot_id: int) -> _Slot | None:
        """The slot for `slot_id`, rotating the ring forward; None when too old."""
        if self.newest_id is None or slot_id > self.newest_id:
            self.newest_id = slot_id
            floor_id = slot_id - self.sub_windows + 1
            for old in [k for k in self._slots if k < floor_id]:
                del self._slots[old]
        elif slot_id <= self.newest_id - self.sub_windows:
            return None
        slot = self._slots.get(slot_id)
        if slot is None:
            slot = self._slots[slot_id] = _Slot(slot_id, self.accuracy)
        return slot

    def covered_s(self) -> float:
        """The span the ring's slots cover, from its oldest kept slot to its newest, each
        slot whole: `window_s` once the ring has turned, less while it fills (after a start),
        where a count over the whole window would understate the rate."""
        if not self._slots or self.newest_id is None:
            return self.window_s
        return min(self.window_s, (self.newest_id - min(self._slots) + 1) * self.width_s)

    def observe(self, ts_s: float, total_ms: float, error: bool = False) -> bool:
        """Add one request; False when it was rejected or too old (and counted as such)."""
        try:
            ts, ms = float(ts_s), float(total_ms)
        except (TypeError, ValueError):
            self.rejected += 1
            return False
        if not (math.isfinite(ts) and math.isfinite(ms)):
            self.rejected += 1
            return False
        slot = self._slot(self._slot_id(ts))
        if slot is None:
            self.late += 1
            return False
        slot.sketch.add(max(ms, 0.0))  # timers clamp negative durations
        slot.count += 1
        slot.errors += bool(error)
        return True

    def observe_many(
        self,
        ts_s: npt.ArrayLike,
        total_ms: npt.ArrayLike,
        error: npt.ArrayLike | None = None,
        *,
        groups: SlotGroups | None = None,
    ) -> int:
        """Add a batch (numpy arrays of equal length); returns how many were used.

        `groups`: `slot_groups(ts_s, self.width_s)` of a finite `ts_s`, when the caller
        feeds several windows of one ring from the same timestamps (computed once)."""
        ts = np.asarray(ts_s, dtype=np.float64).ravel()
        ms = np.asarray(total_ms, dtype=np.float64).ravel()
        err = None if error is None else np.asarray(error, dtype=bool).ravel()
        if not ts.size == ms.size == (ts.size if err is None else err.size):
            raise PolicyError(
                f"observe_many needs arrays of one length, got ts {ts.size}, "
                f"total_ms {ms.size}, error {ts.size if err is None else err.size}"
            )
        if ts.size == 0:
            return 0
        if groups is None or not np.isfinite(ms).all():
            ok = np.isfinite(ts) & np.isfinite(ms)
            if not ok.all():
                self.rejected += int(ts.size - np.count_nonzero(ok))
                ts, ms = ts[ok], ms[ok]
                err = None if err is None else err[ok]
            if ts.size == 0:
                return 0
            groups = slot_groups(ts, self.width_s)
        # the newest slot first, so older ones are judged against the rotated ring
        self._slot(groups[-1][0])
        used = 0
        for slot_id, sel in groups:
            slot = self._slot(slot_id)
            part_ms = ms[sel]
            if slot is None:
                self.late += int(part_ms.size)
                continue
            if self.sketched:
                # Negative durations land in the lowest bucket as in `observe` (the
                # sketch clamps what is under its min_value), with no clamped copy.
                slot.sketch.add_many(part_ms)
            slot.count += int(part_ms.size)
            if err is not None:
                slot.errors += int(np.count_nonzero(err[sel]))
            used += int(part_ms.size)
        return used

    def merged(self, now_s: float) -> tuple[LatencySketch, int, int]:
        """The sketch, request count and error count of [now - window, now)."""
        last = math.ceil(now_s / self.width_s) - 1
        first = last - self.sub_windows + 1
        inside = [s for k, s in self._slots.items() if first <= k <= last]
        if not inside:
            return LatencySketch(self.accuracy), 0, 0
        out = LatencySketch.merged([s.sketch for s in inside])
        return out, sum(s.count for s in inside), sum(s.errors for s in inside)

    def counted(self, now_s: float, q: float, target_ms: float) -> tuple[float | None, int, int]:
        """(q-quantile, values, values over `target_ms`) of [now - window, now): what the
        one verdict rule (tailbudget._verdict) judges an objective on. The count over is
        read off the sketch's buckets (within its relative accuracy of the target)."""
        sketch, _, _ = self.merged(now_s)
        n = sketch.count
        if not n or not self.sketched:
            return None, 0, 0
        over = round(n * (1.0 - sketch.rank_fraction(target_ms)))
        return sketch.quantile(q), n, int(over)

    def stats(
        self,
        now_s: float,
        *,
        min_samples: int = 1,
        confidence: float = 0.975,
        qs: Iterable[float] = (),
    ) -> WindowStats:
        """WindowStats of [now - window, now); unknown below `min_samples` requests.

        `qs` asks for further quantiles (with order-statistic bounds) beyond p50/p95/p99.
        """
        sketch, count, errors = self.merged(now_s)
        z = _z(confidence)
        bounds = wilson(errors, count, z)
        p50 = p95 = p99 = p99_lo = p99_hi = None
        extra: dict[float, tuple[float, float | None, float | None]] = {}
        if count and self.sketched:
            lo_q, hi_q = quantile_rank_bounds(0.99, count, z)
            p50, p95, p99, p99_lo, p99_hi = sketch.quantiles((0.5, 0.95, 0.99, lo_q, hi_q))
            for q in sorted(set(qs) - {0.5, 0.95, 0.99}):
                lo, hi = quantile_rank_bounds(q, count, z)
                v, v_lo, v_hi = sketch.quantiles((q, lo, hi))
                if v is not None:
                    extra[q] = (v, v_lo, v_hi)
        return WindowStats(
            count=count,
            errors=errors,
            p50=p50,
            p95=p95,
            p99=p99,
            known=count >= min_samples,
            error_rate_upper=bounds[1] if bounds else None,
            error_rate_lower=bounds[0] if bounds else None,
            p99_lower=p99_lo,
            p99_upper=p99_hi,
            window_s=self.window_s,
            quantiles=extra,
        )

    # ---- persistence ---------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """JSON-able state: the ring's slots with their sketches (base64)."""
        return {
            "window_s": self.window_s,
            "sub_windows": self.sub_windows,
            "newest_id": self.newest_id,
            "late": self.late,
            "rejected": self.rejected,
            "slots": [
                {
                    "id": s.id,
                    "count": s.count,
                    "errors": s.errors,
                    "sketch": base64.b64encode(s.sketch.to_bytes()).decode("ascii"),
                }
                for s in sorted(self._slots.values(), key=lambda s: s.id)
            ],
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore `to_state()` output (ignored when the ring's shape changed)."""
        if (
            float(state.get("window_s", -1)) != self.window_s
            or int(state.get("sub_windows", -1)) != self.sub_windows
        ):
            return
        newest = state.get("newest_id")
        self.newest_id = None if newest is None else int(newest)
        self.late = int(state.get("late", 0))
        self.rejected = int(state.get("rejected", 0))
        self._slots = {}
        for raw in state.get("slots", []):
            slot = _Slot(int(raw["id"]), self.accuracy)
            slot.count = int(raw["count"])
            slot.errors = int(raw["errors"])
            slot.sketch = LatencySketch.from_bytes(base64.b64decode(raw["sketch"]))
            self._slots[slot.id] = slot


def observe_rows(
    windows: list[RollingWindow], rows: npt.NDArray[np.float64], groups: SlotGroups
) -> None:
    """Add row k of `rows` to `windows[k]`, for windows of one ring fed the same batch
    (`groups`: its slot groups); the values are finite. What `observe_many` does for
    each, with every slot's sketches binned in one pass (`add_rows`)."""
    for window in windows:  # the newest slot first, as observe_many does
        window._slot(groups[-1][0])
    for slot_id, sel in groups:
        live: list[tuple[int, _Slot]] = []
        for k, window in enumerate(windows):
            slot = window._slot(slot_id)
            if slot is None:
                window.late += int(rows[k, sel].size)
            else:
                live.append((k, slot))
        if not live:
            continue
        part = rows if len(live) == len(windows) else rows[[k for k, _ in live]]
        part = part[:, sel]
        add_rows([slot.sketch for _, slot in live], part)
        for _, slot in live:
            slot.count += int(part.shape[1])
