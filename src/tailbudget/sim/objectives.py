"""Objectives (the budget's typed model) measured on simulated requests.

`e2e` (end to end), `ttft`, `tpot` ((e2e - ttft) / (output tokens - 1)) come from the
simulation; a stage objective reads the copied request's logged stage time. TPOT's
percentiles leave out one-token answers, as vLLM's `bench serve` and the audit do (the
fit table too); goodput counts their TPOT as 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from tailbudget._units import min_rows
from tailbudget._verdict import Verdict, judge, verdicts
from tailbudget.budget.model import Budget
from tailbudget.budget.objectives import Objective, Objectives, parse_objectives
from tailbudget.errors import TailbudgetError
from tailbudget.sim.records import ObjectiveRecord
from tailbudget.sim.trace import SimTrace

if TYPE_CHECKING:
    from tailbudget.sim.records import ObjectiveRecord

__all__ = [
    "SIMULATED",
    "Objective",
    "ObjectiveResult",
    "measure",
    "metric_values",
    "objectives_for",
    "order_stat",
]

SIMULATED = ("e2e", "ttft", "tpot")
"""Metrics the simulator produces per request; a stage objective reads the copied row."""


@dataclass(frozen=True)
class ObjectiveResult:
    """An objective measured on the simulated requests."""

    objective: Objective
    measured_ms: float | None
    attainment: float | None
    """Share of the 1-minute windows (with served requests) not in breach."""
    minutes_in_breach: int
    """Minutes whose own requests prove a breach (the one verdict rule, `judge`)."""
    n: int | None = None
    """Simulated requests the figure rests on (None: not counted)."""
    over: int | None = None
    """How many of them are over the target (the verdict rule's k)."""
    minutes_inconclusive: int = 0
    """Minutes the rule leaves inconclusive: too few requests to pass, or over the target
    by less than they prove. Neither met nor in breach; counted apart, never hidden."""

    @property
    def judged(self) -> Verdict:
        """The one verdict rule (tailbudget._verdict) on the simulated requests."""
        o = self.objective
        return judge(o.percentile, o.target_ms, self.measured_ms, self.n or 0, self.over)

    @property
    def thin(self) -> bool:
        """Fewer requests than the audit asks for a pass on this percentile."""
        return self.n is not None and self.n < min_rows(self.objective.percentile)

    @property
    def verdict(self) -> Literal["pass", "breach", "inconclusive"]:
        """pass | breach (proved by the requests over the target, however few) |
        inconclusive (no requests served, or not settled: the audit's rule)."""
        got = self.judged.verdict
        return "inconclusive" if got == "no_data" else got

    @property
    def note(self) -> str:
        """Why the figure is not settled or missing; empty when it is neither."""
        o = self.objective
        if self.measured_ms is None:
            return f"no simulated request has a {o.metric} value"
        got = self.judged
        if got.verdict == "inconclusive":
            return f"simulated: {got.reason}"
        return ""

    def record(self) -> ObjectiveRecord:
        """The audit's objective shape, plus attainment and minutes in breach."""

        o = self.objective
        return ObjectiveRecord(
            metric=o.metric,
            percentile=o.percentile,
            target_ms=o.target_ms,
            measured_ms=None if self.measured_ms is None else round(self.measured_ms, 3),
            verdict=self.verdict,
            gated=o.gated,
            attainment=None if self.attainment is None else round(self.attainment, 4),
            minutes_in_breach=self.minutes_in_breach,
            minutes_inconclusive=self.minutes_inconclusive,
            n=self.n,
            over=self.over,
            confidence=self.judged.confidence,
            note=self.note,
        )


def objectives_for(budget: Budget | None, slo_text: str | Objectives | None) -> Objectives:
    """The SLO (a string or Objectives) when given (every objective gates), else the
    budget's objectives."""
    if isinstance(slo_text, Objectives):
        objs = slo_text
    elif slo_text:
        objs = parse_objectives(slo_text)
    elif budget is not None:
        objs = budget.objectives
    else:
        raise TailbudgetError(
            "slo: no objectives; give a budget file or slo such as p95=MS (a service) "
            "or ttft.p95=MS,tpot.p99=MS (an LLM)",
            param="slo",
        )
    for o in objs:
        if o.metric == "itl":
            raise TailbudgetError(
                f"{o.key}: the simulator does not model every inter-token gap; "
                "use tpot objectives (the mean gap per request)"
            )
        if o.output_tokens is not None:
            raise TailbudgetError(
                f"{o.key}: e2e for an N-token answer is not simulated; use ttft and tpot objectives"
            )
    if not len(objs):
        raise TailbudgetError(
            "slo: no latency objectives to simulate; give e.g. slo p95=2800", param="slo"
        )
    return objs


def _stage(
    trace: SimTrace, metric: str, stages: Mapping[str, npt.NDArray[np.float64]] | None
) -> npt.NDArray[np.float64]:
    if not stages or metric not in stages:
        known = ", ".join(sorted(stages or {})) or "none"
        raise TailbudgetError(f"objective on stage {metric!r}: the log has no such stage ({known})")
    out = np.asarray(stages[metric], dtype=np.float64)[trace.src]
    return np.where(np.isfinite(trace.done_s), out, np.nan)


def metric_values(
    trace: SimTrace,
    metric: str,
    stages: Mapping[str, npt.NDArray[np.float64]] | None = None,
    *,
    one_token_as_zero: bool = False,
) -> npt.NDArray[np.float64]:
    """Per-request values (ms) of `metric`, NaN where the request was not served.

    A stage's value is the copied request's logged stage time: queueing in the
    simulation is not attributed to any stage. TPOT of a one-token answer is NaN (left
    out of percentiles, as the audit does) unless `one_token_as_zero` (goodput).
    """
    e2e = trace.e2e_ms
    if metric == "e2e":
        return e2e
    if metric not in SIMULATED:
        return _stage(trace, metric, stages)
    if trace.ttft_s is None or trace.output_tokens is None:
        raise TailbudgetError(
            f"objective {metric} needs an LLM model (logs with ttft and output tokens)"
        )
    ttft = (trace.ttft_s - trace.arrival_s) * 1000.0
    if metric == "ttft":
        return ttft
    steps = trace.output_tokens - 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        one = 0.0 if one_token_as_zero else np.nan
        return np.where(steps > 0, (e2e - ttft) / np.maximum(steps, 1.0), one)


def order_stat(values: npt.NDArray[np.float64], q: float) -> float:
    """The q-quantile as the order statistic at ceil(q x n) (no interpolation; one
    partition, for the many small per-minute and per-window figures)."""
    k = min(values.size - 1, max(0, int(np.ceil(q * values.size)) - 1))
    return float(np.partition(values, k)[k])


def measure(
    trace: SimTrace,
    objectives: Iterable[Objective],
    stages: Mapping[str, npt.NDArray[np.float64]] | None = None,
    minute_s: float = 60.0,
) -> list[ObjectiveResult]:
    """Each objective over the whole run and per minute of arrivals."""
    out = []
    for o in objectives:
        v = metric_values(trace, o.metric, stages)
        ok = np.isfinite(v)
        if not ok.any():
            out.append(ObjectiveResult(o, None, None, 0, 0))
            continue
        overall = float(np.quantile(v[ok], o.q))
        minute = np.floor((trace.arrival_s[ok] - trace.arrival_s.min()) / minute_s).astype(int)
        vals = v[ok]
        order = np.argsort(minute, kind="stable")
        minute, vals = minute[order], vals[order]
        cuts = np.flatnonzero(np.diff(minute)) + 1
        groups = [g for g in np.split(vals, cuts) if g.size]
        # each minute by the one verdict rule on its own requests: a breach the minute's
        # requests prove, however few; too few to pass is inconclusive, not a breach
        got = verdicts(
            o.percentile,
            o.target_ms,
            np.asarray([order_stat(g, o.q) for g in groups]),
            np.asarray([g.size for g in groups]),
            np.asarray([int((g > o.target_ms).sum()) for g in groups]),
        )
        breach, unsure = int((got == 1).sum()), int((got == 2).sum())
        n, over = int(ok.sum()), int((vals > o.target_ms).sum())
        out.append(ObjectiveResult(o, overall, 1.0 - breach / len(groups), breach, n, over, unsure))
    return out
