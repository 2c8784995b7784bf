"""Rolling windows of the LLM series (ttft, tpot, itl) and of good requests (goodput).

Observations posted to `serve` (or rows replayed from an LLM log) may carry a
time to first token, a time per output token and inter-token gaps. Each series
gets a `RollingWindow` on the policy's ring, so `ttft.p95` covers the span the
end-to-end `p95` covers. Inter-token gaps all go into one window (`itl.p99` is
the p99 over every gap, as vLLM reports it); a request that sent only a
summary (`itl_ms: {p50, p99}`) contributes its own p99, counted in
`itl_summaries` because the p99 of per-request p99s reads higher than the p99
of every gap.

Goodput is a window of counts: a request is judged when it is an error or
carries every metric a per-request threshold names; it is good when it is not
an error and meets every threshold. Requests missing a thresholded metric are
not judged (counted in `unjudged`), never guessed at.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from tailbudget.budget.metric import LLM_SERIES
from tailbudget.control.columns import StageColumn
from tailbudget.control.named_windows import NamedWindows
from tailbudget.control.windows import RollingWindow, SlotGroups, WindowStats, observe_rows

__all__ = ["GOODPUT", "ITL_SUMMARY", "SeriesWindows", "judge"]

ITL_SUMMARY = "itl_p99"
"""Series name of a request's own p99 gap, when it sent a summary instead of its gaps."""
GOODPUT = "goodput"
"""Key of the good-request window in `stats`."""


class SeriesWindows(NamedWindows):
    """One rolling window per LLM series, plus the good-request counts."""

    def __init__(
        self,
        window_s: float,
        sub_windows: int,
        *,
        thresholds: Mapping[str, float] | None = None,
        goodput: bool = False,
    ) -> None:
        """`goodput` keeps the good-request counts (when a rule reads goodput)."""
        super().__init__(window_s, sub_windows)
        self.thresholds = dict(thresholds or {})
        """Per-request thresholds (ms) by series: e2e, ttft, tpot, itl or a stage."""
        self.good: RollingWindow | None = None
        if goodput:
            self.good = RollingWindow(self.window_s, self.sub_windows, sketch=False)
        self.itl_summaries = 0
        self.unjudged = 0

    def observe(
        self,
        ts: npt.NDArray[np.float64],
        total_ms: npt.NDArray[np.float64],
        error: npt.NDArray[np.bool_],
        series: Mapping[str, StageColumn],
        stages: Mapping[str, StageColumn],
        groups: SlotGroups | None = None,
    ) -> None:
        """Add a batch's series (`ts` is the batch's timestamps, rows by index; `groups`
        their slots, from `groups(ts)`)."""
        dense: dict[str, StageColumn] = {}
        for name, col in series.items():
            if not len(col):
                continue
            key = "itl" if name == ITL_SUMMARY else name
            if key not in LLM_SERIES:
                continue  # a record from a newer writer: nothing here reads it
            if groups is not None and col.dense and key not in dense:
                dense[key] = col  # every row: fed below with the others, at once
            else:
                self._observe(key, ts, col, groups)
            if name == ITL_SUMMARY:
                self.itl_summaries += len(col)
        if dense:
            assert groups is not None
            rows = np.stack([col.ms for col in dense.values()])
            if np.isfinite(rows).all():
                observe_rows([self._window(key) for key in dense], rows, groups)
            else:  # not from a checked batch: each window counts what it rejects
                for key, col in dense.items():
                    self._observe(key, ts, col, groups)
        if self.good is not None:
            self._judge(ts, total_ms, error, series, stages)

    def _judge(
        self,
        ts: npt.NDArray[np.float64],
        total_ms: npt.NDArray[np.float64],
        error: npt.NDArray[np.bool_],
        series: Mapping[str, StageColumn],
        stages: Mapping[str, StageColumn],
    ) -> None:
        assert self.good is not None
        judged, good = judge(total_ms, error, series, stages, self.thresholds)
        self.unjudged += int(judged.size - np.count_nonzero(judged))
        if judged.any():
            self.good.observe_many(ts[judged], np.zeros(int(judged.sum())), ~good[judged])

    def stats(
        self,
        now_s: float,
        *,
        min_samples: int,
        confidence: float,
        qs: Mapping[str, Iterable[float]] | None = None,
    ) -> dict[str, WindowStats]:
        """Each series' window at `now_s` by name (`goodput`: errors = requests not good)."""
        out = super().stats(now_s, min_samples=min_samples, confidence=confidence, qs=qs)
        if self.good is not None:
            out[GOODPUT] = self.good.stats(now_s, min_samples=min_samples, confidence=confidence)
        return out

    def to_state(self) -> dict[str, Any]:
        """JSON-able state: each series' ring, the good-request ring and the counters."""
        return {
            "series": self.windows_state(),
            "good": None if self.good is None else self.good.to_state(),
            "itl_summaries": self.itl_summaries,
            "unjudged": self.unjudged,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore `to_state()` output; rings of another shape (policy changed) are skipped."""
        self.load_windows(dict(state.get("series", {})))
        if self.good is not None and state.get("good"):
            self.good.load_state(state["good"])
        self.itl_summaries = int(state.get("itl_summaries", 0))
        self.unjudged = int(state.get("unjudged", 0))


def judge(
    total_ms: npt.NDArray[np.float64],
    error: npt.NDArray[np.bool_],
    series: Mapping[str, StageColumn],
    stages: Mapping[str, StageColumn],
    thresholds: Mapping[str, float],
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """(judged, good) per request against per-request `thresholds` (ms by series).

    Judged: an error, or carrying every thresholded metric; good: not an error and
    within every threshold (any inter-token gap over the itl limit fails it)."""
    n = int(total_ms.shape[0])
    good = ~error
    judged = np.ones(n, dtype=bool)
    for name, limit in thresholds.items():
        if name == "e2e":
            good &= total_ms <= limit
            continue
        col = _column(name, series, stages)
        if col is None:
            judged[:] = False
            continue
        have = np.zeros(n, dtype=bool)
        have[col.index] = True
        judged &= have
        good[col.index[col.ms > limit]] = False
    return judged | error, good


def _column(
    name: str, series: Mapping[str, StageColumn], stages: Mapping[str, StageColumn]
) -> StageColumn | None:
    if name == "itl" and ITL_SUMMARY in series:
        parts = [c for c in (series.get("itl"), series[ITL_SUMMARY]) if c is not None]
        return StageColumn(
            np.concatenate([c.index for c in parts]), np.concatenate([c.ms for c in parts])
        )
    if name in LLM_SERIES:
        return series.get(name)
    return stages.get(name)
