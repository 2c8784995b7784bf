"""`capacity`: the fewest replicas meeting every gated objective, at the log's load and multiples.

Each candidate count runs the model with that many replicas held fixed on
the same arrivals (one seed). The count needed at load 1 then carries to the
search for where to scale before breach: the load at which the tightest
gated objective (the service's, or a class's on its own requests) reaches 90% of its
target on that many replicas.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tailbudget._report_base import ReportBase
from tailbudget.budget.objectives import Objectives
from tailbudget.errors import TailbudgetError
from tailbudget.sim.arrivals import ArrivalSpec, make_arrivals
from tailbudget.sim.classes import ClassResult, SimClasses, class_results, draw_by_class
from tailbudget.sim.engines import run_once
from tailbudget.sim.model import ServiceModel
from tailbudget.sim.objectives import ObjectiveResult, measure
from tailbudget.sim.policies import FixedPolicy
from tailbudget.sim.records import (
    CapacityDocument,
    CapacityPointRecord,
    ScaleAt,
    ScaleNever,
)

__all__ = [
    "CapacityPoint",
    "CapacityReport",
    "ScaleBeforeBreach",
    "capacity_curve",
    "fewest_replicas",
    "knee_replicas",
]

SCALE_BEFORE = 0.9
_MAX_REPLICAS = 512


@dataclass(frozen=True)
class CapacityPoint:
    """The replicas a load needs, and the objectives measured with them."""

    load: float
    replicas: int | None
    """None when even the maximum searched did not meet every gated objective."""
    objectives: list[ObjectiveResult]
    utilization: float | None
    classes: list[ClassResult] | None = None
    """Each class on its own requests with these replicas (None: no classes)."""
    set_by: str | None = None
    """With classes: the class whose objectives set the count ("service" when the
    service-wide objectives do), the one furthest over target one replica fewer."""

    def record(self) -> CapacityPointRecord:
        """The curve entry of the JSON contract."""
        return CapacityPointRecord(
            load=self.load,
            replicas=self.replicas,
            utilization=None if self.utilization is None else round(self.utilization, 4),
            objectives=[o.record() for o in self.objectives],
            classes=None if self.classes is None else [c.record() for c in self.classes],
            set_by=self.set_by,
        )


@dataclass(frozen=True)
class ScaleBeforeBreach:
    """Where to scale: the load at which the tightest gated objective reaches 90% of its
    target on the replicas load 1 needs (None when it stays below up to `note`'s load)."""

    objective: str
    load: float | None
    replicas: int
    note: str | None = None
    share_of_target: float = SCALE_BEFORE

    def record(self) -> ScaleAt | ScaleNever:
        """The `scale_before_breach` entry of the JSON contract: the load and the share of
        target it is at, or no load and a note saying how far the search went."""
        if self.load is None:
            return ScaleNever(
                objective=self.objective, load=None, replicas=self.replicas, note=self.note
            )
        return ScaleAt(
            objective=self.objective,
            load=self.load,
            replicas=self.replicas,
            share_of_target=self.share_of_target,
        )


@dataclass(frozen=True)
class CapacityReport(ReportBase):
    """The curve, where to scale before breach, and the model behind it."""

    model: ServiceModel
    arrivals: str
    curve: list[CapacityPoint]
    scale_before_breach: ScaleBeforeBreach | None
    notes: list[str] = field(default_factory=list)

    def record(self) -> CapacityDocument:
        """The capacity report's JSON contract."""
        scale = self.scale_before_breach
        return CapacityDocument(
            curve=[p.record() for p in self.curve],
            scale_before_breach=None if scale is None else scale.record(),
            arrivals=self.arrivals,
            model=self.model.record(),
            notes=self.notes,
            fit=[] if self.model.fit is None else [r.record() for r in self.model.fit.rows],
            reproduces=self.model.reproduces,
        )

    def json_data(self) -> Any:
        """The `capacity --format json` contract."""
        return self.record().model_dump(mode="json")


@dataclass(frozen=True)
class _Setup:
    model: ServiceModel
    objectives: Objectives
    arrivals: ArrivalSpec
    duration_s: float | None
    seed: int
    log_times: np.ndarray | None
    classes: SimClasses | None = None


_Outcome = tuple[list[ObjectiveResult], float | None, list[ClassResult] | None]


def _worst(results: Sequence[ObjectiveResult]) -> float:
    """Largest measured/target over gated objectives (inf when one is unmeasured)."""
    gated = [r for r in results if r.objective.gated] or list(results)
    return max(
        math.inf if r.measured_ms is None else r.measured_ms / r.objective.target_ms for r in gated
    )


def _ratios(res: _Outcome) -> dict[str, float]:
    """Measured over target of the worst gated objective: the service's and each class's."""
    out = {"service": _worst(res[0])}
    for c in res[2] or []:
        if c.objectives and any(o.objective.gated for o in c.objectives):
            out[c.name] = _worst(c.objectives) if c.requests else 0.0
    return out


def _run(s: _Setup, load: float, replicas: int) -> _Outcome:
    rng = np.random.default_rng(s.seed)
    arr, horizon = make_arrivals(
        s.arrivals,
        pool=s.model.samples.size,
        load=load,
        duration_s=s.duration_s,
        max_requests=None,
        low_share=0.0,
        rng=rng,
        log_times=s.log_times,
    )
    if s.classes is not None:  # each arrival of a class copies a logged request of it
        arr = draw_by_class(arr, s.classes, rng)
    trace = run_once(s.model, arr, FixedPolicy(replicas), replicas=replicas, end_s=horizon)
    util = None
    if s.model.kind == "queue" and horizon > 0:
        work = float(np.sum(s.model.samples.work_ms[arr.src])) / 1000.0
        util = work / (horizon * replicas * s.model.concurrency.value)
    stages = s.model.samples.stages
    classes = None if s.classes is None else class_results(trace, s.classes, s.objectives, stages)
    return measure(trace, s.objectives, stages), util, classes


def fewest_replicas(ok: Callable[[int], bool], start: int, most: int = _MAX_REPLICAS) -> int | None:
    """The smallest count `ok` accepts: double up from `start`, then bisect (None when
    `most` does not do). The one search `capacity` and the model policy share."""
    lo, hi = 0, max(1, min(start, most))
    while not ok(hi):
        if hi >= most:
            return None
        lo = hi
        hi = min(2 * hi, most)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def _needed(s: _Setup, load: float, start: int) -> CapacityPoint:
    """Smallest count meeting every gated objective: double up, then bisect."""
    cache: dict[int, _Outcome] = {}

    def ok(n: int) -> bool:
        if n not in cache:
            cache[n] = _run(s, load, n)
        return max(_ratios(cache[n]).values()) <= 1.0

    n = fewest_replicas(ok, start)
    res, util, classes = cache[max(cache) if n is None else n]
    set_by = None
    if classes is not None:
        # One replica fewer fails: the class furthest over target there sets the count.
        below = cache.get((n or max(cache)) - 1, cache[max(cache) if n is None else n])
        ratios = _ratios(below)
        set_by = max(ratios, key=lambda k: ratios[k])
    return CapacityPoint(load, n, res, util, classes, set_by)


def _tightest(res: list[ObjectiveResult], classes: list[ClassResult] | None) -> tuple[float, str]:
    """The tightest gated objective's measured/target and its name: the service's, or a
    listed class's on its own requests (named `premium:e2e.p95`, as `--slo` writes it)."""
    gated = [r for r in res if r.objective.gated] or res
    named = [(_worst([r]), r.objective.key) for r in gated]
    named += [
        (_worst([r]), f"{c.name}:{r.objective.key}")
        for c in classes or []
        if c.listed and c.requests
        for r in c.objectives
        if r.objective.gated
    ]
    return max(named, key=lambda pair: pair[0])


def _breach_load(s: _Setup, replicas: int, top: float) -> ScaleBeforeBreach | None:
    """Load where the tightest gated objective reaches 90% of its target on `replicas`."""

    def ratio(load: float) -> tuple[float, str]:
        res, _, classes = _run(s, load, replicas)
        return _tightest(res, classes)

    lo, hi = 0.05, max(top, 1.0) * 2.0
    r_lo, _ = ratio(lo)
    if r_lo >= SCALE_BEFORE:
        return None
    r_hi, name = ratio(hi)
    if r_hi < SCALE_BEFORE:
        return ScaleBeforeBreach(name, None, replicas, f"below 90% of target up to load {hi:g}")
    for _ in range(10):
        mid = (lo + hi) / 2.0
        r, name_mid = ratio(mid)
        if r >= SCALE_BEFORE:
            hi, name = mid, name_mid
        else:
            lo = mid
    return ScaleBeforeBreach(name, round(hi, 3), replicas)


def knee_replicas(
    model: ServiceModel,
    objectives: Objectives,
    *,
    arrivals: ArrivalSpec,
    seed: int = 0,
    log_times: np.ndarray | None = None,
) -> tuple[int, list[ObjectiveResult]] | None:
    """When no count meets the objectives: the fewest replicas that win 90% of what
    unlimited replicas would on the tightest gated objective, and the objectives there."""
    s = _Setup(model, objectives, arrivals, None, seed, log_times)
    runs: dict[int, list[ObjectiveResult]] = {}

    def worst(n: int) -> float:
        if n not in runs:
            runs[n] = _run(s, 1.0, n)[0]
        return _worst(runs[n])

    n = 1
    while n < _MAX_REPLICAS and worst(2 * n) < worst(n) * 0.99:
        n *= 2
    floor, first = worst(min(2 * n, _MAX_REPLICAS)), worst(1)
    if not (math.isfinite(floor) and math.isfinite(first)):
        return None
    goal = floor + 0.1 * (first - floor)
    lo, hi = 0, min(2 * n, _MAX_REPLICAS)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if worst(mid) <= goal else (mid, hi)
    return hi, runs[hi]


def capacity_curve(
    model: ServiceModel,
    objectives: Objectives,
    *,
    arrivals: ArrivalSpec,
    loads: Sequence[float],
    duration_s: float | None = None,
    seed: int = 0,
    log_times: np.ndarray | None = None,
    scale_before: bool = True,
    classes: SimClasses | None = None,
) -> CapacityReport:
    """Replicas needed at each load multiple, and (unless `scale_before` is False) where
    to scale before breach."""
    if not loads or any(not (x > 0 and math.isfinite(x)) for x in loads):
        raise TailbudgetError(
            f"loads: positive multiples such as 1,2,4, got {list(loads)}", param="load"
        )
    s = _Setup(model, objectives, arrivals, duration_s, seed, log_times, classes)
    curve, start = [], 1
    for load in sorted(loads):
        point = _needed(s, load, start)
        curve.append(point)
        start = point.replicas or start
    base = next((p for p in curve if p.replicas is not None), None)
    sbb = None
    if base is not None and scale_before:
        sbb = _breach_load(s, base.replicas or 1, max(loads))
    notes = [
        "each count is simulated held fixed on the same arrivals (one seed); "
        "requests queued when arrivals end are served late and count in the percentiles",
    ]
    if model.unidentified:
        notes.append(f"stated defaults used for: {', '.join(model.unidentified)}")
    return CapacityReport(model, arrivals.label, curve, sbb, notes)
