"""Objectives a simulation is judged by, and their measurement on simulated requests.

A small interface of its own (metric, percentile, target, gated) so the
simulator does not depend on how a budget spells them: `e2e` (end to end),
`ttft`, `tpot` ((e2e - ttft) / (output tokens - 1), 0 for one-token answers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tailbudget._units import quantile_of
from tailbudget.budget.model import Budget
from tailbudget.errors import TailbudgetError
from tailbudget.sim.trace import SimTrace

__all__ = [
    "ObjectiveResult",
    "SimObjective",
    "measure",
    "metric_values",
    "objectives_for",
    "order_stat",
    "parse_slo_text",
]

METRICS = ("e2e", "ttft", "tpot")


@dataclass(frozen=True)
class SimObjective:
    """One latency objective: `metric`'s `percentile` must stay at or below `target_ms`."""

    metric: str
    percentile: str
    target_ms: float
    gated: bool = True

    @property
    def q(self) -> float:
        """The percentile as a quantile in (0, 1)."""
        return quantile_of(self.percentile)

    @property
    def name(self) -> str:
        """e.g. 'ttft.p95'."""
        return f"{self.metric}.{self.percentile}"


@dataclass(frozen=True)
class ObjectiveResult:
    """An objective measured on the simulated requests."""

    objective: SimObjective
    measured_ms: float | None
    attainment: float | None
    """Share of the policy's 1-minute windows (with requests) meeting the objective."""
    minutes_in_breach: int

    @property
    def verdict(self) -> str:
        """pass | breach | inconclusive (no requests served)."""
        if self.measured_ms is None:
            return "inconclusive"
        return "pass" if self.measured_ms <= self.objective.target_ms else "breach"

    def to_dict(self) -> dict[str, Any]:
        """The audit's objective shape, plus attainment and minutes in breach."""
        o = self.objective
        return {
            "metric": o.metric,
            "percentile": o.percentile,
            "target_ms": o.target_ms,
            "measured_ms": None if self.measured_ms is None else round(self.measured_ms, 3),
            "verdict": self.verdict,
            "gated": o.gated,
            "attainment": None if self.attainment is None else round(self.attainment, 4),
            "minutes_in_breach": self.minutes_in_breach,
        }


def parse_slo_text(text: str) -> list[SimObjective]:
    """'p95=2800,ttft.p95=500,e2e.p99=9000' -> objectives (every one gated)."""
    out: list[SimObjective] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        bits = name.strip().split(".", 1)
        metric, pct = ("e2e", bits[0]) if len(bits) == 1 else (bits[0], bits[1])
        if not sep or metric not in METRICS:
            raise TailbudgetError(
                f"--slo takes e.g. p95=2800,ttft.p95=500,tpot.p99=60 "
                f"(metrics {', '.join(METRICS)}), got {part!r}"
            )
        quantile_of(pct)
        try:
            ms = float(value)
        except ValueError:
            ms = float("nan")
        if not (ms > 0 and np.isfinite(ms)):
            raise TailbudgetError(f"--slo {name.strip()} must be a positive number of ms, got {value!r}")
        out.append(SimObjective(metric, pct, ms))
    if not out:
        raise TailbudgetError("--slo is empty: give e.g. --slo p95=2800,p99=5200")
    return out


def objectives_for(budget: Budget | None, slo_text: str | None) -> list[SimObjective]:
    """`--slo` when given, else the budget's end-to-end SLO gated by its environment."""
    if slo_text:
        return parse_slo_text(slo_text)
    if budget is None:
        raise TailbudgetError("no objectives: pass --budget FILE or --slo p95=MS,...")
    gated = set(budget.gated) if budget.environment else set(budget.slo.given())
    return [
        SimObjective("e2e", name, ms, name in gated) for name, ms in budget.slo.given().items()
    ]


def metric_values(trace: SimTrace, metric: str) -> npt.NDArray[np.float64]:
    """Per-request values (ms) of `metric`, NaN where the request was not served."""
    e2e = trace.e2e_ms
    if metric == "e2e":
        return e2e
    if trace.ttft_s is None or trace.output_tokens is None:
        raise TailbudgetError(
            f"objective {metric} needs an LLM model (logs with ttft and output tokens)"
        )
    ttft = (trace.ttft_s - trace.arrival_s) * 1000.0
    if metric == "ttft":
        return ttft
    steps = trace.output_tokens - 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(steps > 0, (e2e - ttft) / np.maximum(steps, 1.0), 0.0)


def order_stat(values: npt.NDArray[np.float64], q: float) -> float:
    """The q-quantile as the order statistic at ceil(q x n) (no interpolation; one
    partition, for the many small per-minute and per-window figures)."""
    k = min(values.size - 1, max(0, int(np.ceil(q * values.size)) - 1))
    return float(np.partition(values, k)[k])


def measure(
    trace: SimTrace, objectives: Sequence[SimObjective], minute_s: float = 60.0
) -> list[ObjectiveResult]:
    """Each objective over the whole run and per minute of arrivals."""
    out = []
    for o in objectives:
        v = metric_values(trace, o.metric)
        ok = np.isfinite(v)
        if not ok.any():
            out.append(ObjectiveResult(o, None, None, 0))
            continue
        overall = float(np.quantile(v[ok], o.q))
        minute = np.floor((trace.arrival_s[ok] - trace.arrival_s.min()) / minute_s).astype(int)
        vals = v[ok]
        order = np.argsort(minute, kind="stable")
        minute, vals = minute[order], vals[order]
        cuts = np.flatnonzero(np.diff(minute)) + 1
        per = [order_stat(g, o.q) for g in np.split(vals, cuts) if g.size]
        breach = sum(1 for p in per if p > o.target_ms)
        out.append(ObjectiveResult(o, overall, 1.0 - breach / len(per), breach))
    return out
