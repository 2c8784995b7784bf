"""Culprits over the live window of completed traces, by the audit's own ranking.

The traces of the window (and of a baseline window, set by POST /v1/baseline) are
held as rows of total and stage ms; at status time they give the audit's inputs -
slow [p95, p99] vs fast [p40, p50] of total, each stage's growth against the
baseline with a 95% interval, the slow group's critical-path share - and
`audit.culprits.build` ranks them with the audit's wording and `weak` flag.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["TraceRow", "TraceWindow", "culprits"]

MAX_ROWS = 20_000
"""Completed traces held for culprits (the newest; the window's span bounds them too)."""


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One completed trace: when it arrived (s), its total and its stages' ms."""

    t_s: float
    total_ms: float
    stages: dict[str, float]


class TraceWindow:
    """The newest completed traces within `window_s` (not thread-safe: the receiver locks)."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.rows: deque[TraceRow] = deque(maxlen=MAX_ROWS)

    def add(self, row: TraceRow) -> None:
        self.rows.append(row)

    def current(self, now_s: float) -> list[TraceRow]:
        while self.rows and self.rows[0].t_s < now_s - self.window_s:
            self.rows.popleft()
        return list(self.rows)


def _matrix(rows: list[TraceRow], names: list[str]) -> npt.NDArray[np.float64]:
    out = np.zeros((len(rows), len(names)), dtype=np.float64)
    col = {n: j for j, n in enumerate(names)}
    for i, row in enumerate(rows):
        for name, ms in row.stages.items():
            j = col.get(name)
            if j is not None:
                out[i, j] = ms
    return out


def culprits(rows: list[TraceRow], baseline: list[TraceRow]) -> list[dict[str, Any]]:
    """[{stage, score, evidence, figures, weak}] for the window, most likely first."""
    # A start-up guard: ibis, pyarrow, pydantic load on first use, not with this module.
    from tailbudget.audit import culprits as ranking
    from tailbudget.audit.growth import Growth
    from tailbudget.audit.report import Delta, Tail

    if len(rows) < 2:
        return []
    names = sorted({n for r in rows for n in r.stages})
    total = np.array([r.total_ms for r in rows], dtype=np.float64)
    stages = _matrix(rows, names)
    q40, q50, q95, q99 = np.quantile(total, [0.4, 0.5, 0.95, 0.99])
    slow = (total >= q95) & (total <= q99)
    fast = (total >= q40) & (total <= q50)
    if not slow.any() or not fast.any():
        return []
    mean_slow = stages[slow].mean(axis=0)
    mean_fast = stages[fast].mean(axis=0)
    deltas = [
        Delta(stage=n, mean_slow=float(s), mean_fast=float(f), delta=float(s - f))
        for n, s, f in zip(names, mean_slow, mean_fast, strict=True)
    ]
    deltas.sort(key=lambda d: -d.delta)
    n_slow = int(slow.sum())
    tail = Tail(
        driver=deltas[0].stage if deltas and deltas[0].delta > 0 else None,
        deltas=deltas,
        slow_range_ms=[float(q95), float(q99)],
        fast_range_ms=[float(q40), float(q50)],
        n_slow=n_slow,
        n_fast=int(fast.sum()),
        weak=n_slow < ranking.WEAK_SLOW,
    )
    growth: dict[str, Growth] = {}
    if len(baseline) >= 2:
        before = _matrix(baseline, names)
        for j, name in enumerate(names):
            growth[name] = _growth(before[:, j], stages[:, j], Growth)
    inputs = ranking.Inputs(
        tail=tail,
        slow_total_mean=float(total[slow].mean()),
        growth=growth,
        attribution="critical_path",
    )
    return [
        {
            "stage": c.stage,
            "score": c.score,
            "evidence": c.evidence,
            "figures": c.figures,
            "weak": c.weak,
        }
        for c in ranking.build(inputs)
    ]


def _growth(before: npt.NDArray[np.float64], after: npt.NDArray[np.float64], cls: Any) -> Any:
    """Change of the mean with a 95% interval (Welch's standard error)."""
    change = float(after.mean() - before.mean())
    se = math.sqrt(float(after.var(ddof=1)) / len(after) + float(before.var(ddof=1)) / len(before))
    return cls(
        before=float(before.mean()),
        after=float(after.mean()),
        change=change,
        low=change - 1.96 * se,
        high=change + 1.96 * se,
        n_before=len(before),
        n_after=len(after),
        against="baseline",
    )
