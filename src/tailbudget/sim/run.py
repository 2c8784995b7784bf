"""`simulate`: the fitted model, one arrival sequence, every policy side by side."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from tailbudget._report_base import ReportBase
from tailbudget._verdict import judge_share
from tailbudget.budget.objectives import Objectives
from tailbudget.budget.policy import Policy
from tailbudget.control.class_shedding import ClassDecision
from tailbudget.control.decision import Decision
from tailbudget.control.replay_record import ShedStep
from tailbudget.sim.arrivals import ArrivalSpec, make_arrivals
from tailbudget.sim.batch_engine import BLOCK_TOKENS
from tailbudget.sim.classes import (
    ClassResult,
    SimClasses,
    class_results,
    draw_by_class,
    shed_by_class,
)
from tailbudget.sim.engines import run_once
from tailbudget.sim.floor import hindsight_floor
from tailbudget.sim.hit_levels import offered_rate, share_for
from tailbudget.sim.model import ServiceModel
from tailbudget.sim.model_policy import ModelPolicy, model_headroom
from tailbudget.sim.objectives import (
    Objective,
    ObjectiveResult,
    measure,
    metric_values,
    order_stat,
)
from tailbudget.sim.policies import BudgetPolicy, PolicySpec, make_policy
from tailbudget.sim.records import (
    ArrivalsRecord,
    GoodputRecord,
    LogFigureRecord,
    RequestsRecord,
    RunRecord,
    SimDecisionRecord,
    SimDocument,
    TimelinePointRecord,
    TimelineRecord,
)
from tailbudget.sim.trace import Arrivals, RunPolicy, SimTrace

if TYPE_CHECKING:
    from tailbudget.budget.policy_model import ModelMode
    from tailbudget.sim.floor import Floor

__all__ = [
    "Context",
    "RunResult",
    "SimReport",
    "TimelinePoint",
    "run_once",
    "run_policies",
    "simulate",
]


@dataclass(frozen=True)
class TimelinePoint:
    """One policy evaluation: the fleet and the watched percentile over the last minute."""

    t_offset_s: float
    ready: int
    alive: int
    shed: bool
    trim: bool
    value_ms: float | None


@dataclass(frozen=True)
class RunResult:
    """One policy's run."""

    policy: str
    start_replicas: int
    objectives: list[ObjectiveResult]
    goodput: float | None
    goodput_thresholds: dict[str, float]
    goodput_min: float | None
    replica_hours: float
    arrived: int
    served: int
    shed: int
    unfinished: int
    cold_starts: int
    decisions: list[Decision]
    timeline: list[TimelinePoint]
    watched: str
    """The objective the timeline plots (the tightest gated one)."""
    peak_replicas: int
    replica_hours_vs_floor: float | None = None
    """replica_hours over the hindsight floor's (None when no floor was computed)."""
    classes: list[ClassResult] | None = None
    """Each listed class on its own simulated requests (None: no classes simulated)."""

    @property
    def shedding(self) -> list[ShedStep] | None:
        """With classes: each shed_load and stop_shedding with the class it sheds or
        restores (replay's `shedding[]`); None without classes."""
        return None if self.classes is None else _shedding(self.decisions)

    def record(self) -> RunRecord:
        """The JSON contract's per-run block."""
        return RunRecord(
            policy=self.policy,
            start_replicas=self.start_replicas,
            objectives=[o.record() for o in self.objectives],
            goodput=GoodputRecord(
                share=None if self.goodput is None else round(self.goodput, 4),
                min=self.goodput_min,
                thresholds=self.goodput_thresholds,
                verdict=None
                if self.goodput_min is None or self.goodput is None
                else judge_share(
                    round(self.goodput * self.arrived), self.arrived, self.goodput_min
                ),
            ),
            replica_hours=round(self.replica_hours, 4),
            replica_hours_vs_floor=None
            if self.replica_hours_vs_floor is None
            else round(self.replica_hours_vs_floor, 4),
            peak_replicas=self.peak_replicas,
            requests=RequestsRecord(
                arrived=self.arrived,
                served=self.served,
                shed=self.shed,
                unfinished=self.unfinished,
            ),
            cold_starts=self.cold_starts,
            minutes_in_breach=max(
                (o.minutes_in_breach for o in self.objectives if o.objective.gated), default=0
            ),
            decisions=[_decision(d) for d in self.decisions],
            timeline=TimelineRecord(
                watched=self.watched,
                points=[TimelinePointRecord(**vars(p)) for p in self.timeline],
            ),
            classes=None if self.classes is None else [c.record() for c in self.classes],
            shedding=self.shedding,
        )

    def to_dict(self) -> dict[str, Any]:
        """The per-run block as plain values."""
        return self.record().model_dump(mode="json")


@dataclass(frozen=True)
class SimReport(ReportBase):
    """A whole `simulate` result."""

    model: ServiceModel
    arrivals: str
    requests: int
    duration_s: float
    load: float
    seed: int
    runs: list[RunResult]
    notes: list[str] = field(default_factory=list)
    floor: Floor | None = None
    log_measured: list[LogFigureRecord] = field(default_factory=list)
    """With one LOG: each objective as the audit measures it on that log."""

    def record(self) -> SimDocument:
        """The JSON contract: the first policy's figures at the top, every run in `runs`."""
        runs = [r.record() for r in self.runs]
        first = runs[0]
        return SimDocument(
            objectives=first.objectives,
            goodput=first.goodput,
            replica_hours=first.replica_hours,
            requests=first.requests,
            decisions=first.decisions,
            policy=first.policy,
            model=self.model.record(),
            arrivals=ArrivalsRecord(source=self.arrivals, requests=self.requests, load=self.load),
            duration_s=self.duration_s,
            seed=self.seed,
            runs=runs,
            floor=None if self.floor is None else self.floor.record(),
            notes=self.notes,
            log_measured=self.log_measured,
            classes=first.classes,
            fit=[] if self.model.fit is None else [r.record() for r in self.model.fit.rows],
            reproduces=self.model.reproduces,
        )

    def to_dict(self) -> dict[str, Any]:
        """The document as plain values."""
        return self.record().model_dump(mode="json")

    def json_data(self) -> Any:
        """The `simulate --format json` contract."""
        return self.to_dict()


def _decision(d: Decision) -> SimDecisionRecord:
    return SimDecisionRecord(
        t=f"PT{d.t_s:.3f}S",
        t_offset_s=round(d.t_s, 3),
        action=d.action,
        metric=d.metric,
        value=None if d.value is None else round(float(d.value), 6),
        threshold=None if d.threshold is None else round(float(d.threshold), 6),
        reason=d.reason,
        rule=d.rule,
        replicas=d.replicas,
    )


def _shedding(decisions: Sequence[Decision]) -> list[ShedStep]:
    """The class decisions that shed or restore, as replay lists them (the rule's own
    name: `trigger` says whose it is)."""
    return [
        ShedStep(
            t=f"PT{d.t_s:.3f}S",
            t_offset_s=round(d.t_s, 3),
            action="shed_load" if d.action == "shed_load" else "stop_shedding",
            sheds=d.sheds,
            trigger=d.trigger,
            rule=None if d.rule is None else d.rule.removeprefix(f"{d.trigger}:"),
        )
        for d in decisions
        if isinstance(d, ClassDecision) and d.action in ("shed_load", "stop_shedding")
    ]


def _goodput(
    trace: SimTrace, objectives: Objectives, stages: Mapping[str, np.ndarray]
) -> tuple[float | None, dict[str, float]]:
    """Share of arrivals served without error within every per-request threshold."""
    thresholds = {k: v for k, v in objectives.thresholds().items() if k != "itl"}
    n = trace.arrival_s.size
    if n == 0:
        return None, thresholds
    good = np.isfinite(trace.done_s) & ~trace.error
    for metric, ms in thresholds.items():
        v = metric_values(trace, metric, stages, one_token_as_zero=True)
        good &= np.nan_to_num(v, nan=np.inf) <= ms
    return float(good.sum()) / n, thresholds


def _timeline(
    trace: SimTrace, watched: Objective, window_s: float, stages: Mapping[str, np.ndarray]
) -> list[TimelinePoint]:
    v = metric_values(trace, watched.metric, stages)
    ok = np.isfinite(v)
    done, vals = trace.done_s[ok], v[ok]
    order = np.argsort(done)
    done, vals = done[order], vals[order]
    out = []
    for tk in trace.ticks:
        lo, hi = np.searchsorted(done, [tk.t_s - window_s, tk.t_s], side="right")
        value = order_stat(vals[lo:hi], watched.q) if hi - lo >= 5 else None
        out.append(TimelinePoint(round(tk.t_s, 3), tk.ready, tk.alive, tk.shed, tk.trim, value))
    return out


def _result(
    spec: PolicySpec,
    start: int,
    trace: SimTrace,
    objectives: Objectives,
    stages: Mapping[str, np.ndarray],
    classes: SimClasses | None = None,
) -> RunResult:
    gated = [o for o in objectives if o.gated] or list(objectives)
    measured = measure(trace, objectives, stages)
    tight = max(
        (r for r in measured if r.objective in gated),
        key=lambda r: -1.0 if r.measured_ms is None else r.measured_ms / r.objective.target_ms,
    )
    goodput, thresholds = _goodput(trace, objectives, stages)
    served = int(np.isfinite(trace.done_s).sum())
    shed = int(trace.shed.sum())
    return RunResult(
        policy=spec.label if spec.kind != "fixed" else f"fixed:{start}",
        start_replicas=start,
        objectives=measured,
        goodput=goodput,
        goodput_thresholds=thresholds,
        goodput_min=objectives.goodput.min if objectives.goodput is not None else None,
        replica_hours=trace.replica_s / 3600.0,
        arrived=int(trace.arrival_s.size),
        served=served,
        shed=shed,
        unfinished=int(trace.arrival_s.size) - served - shed,
        cold_starts=trace.cold_starts,
        decisions=trace.decisions,
        timeline=_timeline(trace, tight.objective, 60.0, stages),
        watched=tight.objective.key,
        peak_replicas=max([start, *(t.alive for t in trace.ticks)]),
        classes=None if classes is None else class_results(trace, classes, objectives, stages),
    )


def _runnable(
    spec: PolicySpec,
    ctx: Context,
    arr: Arrivals,
    replicas: int,
) -> tuple[RunPolicy, int]:
    """The runnable policy: `make_policy`'s, or the model policy with its reactive guard."""
    model_mode = spec.kind == "budget" and ctx.budget_policy.mode == "model"
    if spec.kind != "model" and not model_mode:
        classes = () if ctx.classes is None else ctx.classes.policies
        return make_policy(spec, ctx.budget_policy, replicas, ctx.signal, classes)
    guard, start = make_policy(PolicySpec("budget"), ctx.budget_policy, replicas, ctx.signal)
    assert isinstance(guard, BudgetPolicy)
    opts = ctx.model_options or ctx.budget_policy.model
    bounds = guard.controller.policy.replicas
    policy = ModelPolicy(
        ctx.model,
        ctx.objectives,
        arr,
        guard,
        opts=opts,
        headroom=model_headroom(opts, ctx.headroom),
        bounds=(bounds.min, bounds.max),
        seed=ctx.seed,
    )
    return policy, start


def _watched(policy: Policy, signal: str) -> str:
    # What the rules read: a ttft.p95 rule reads each request's TTFT, not its total.
    if signal == "ttft" or any(r.ref.series == "ttft" for r in policy.rules):
        return "time to first token"
    return "end-to-end time"


@dataclass(frozen=True)
class Context:
    """What every policy of one comparison shares: the model, objectives, budget policy."""

    model: ServiceModel
    objectives: Objectives
    budget_policy: Policy
    signal: str
    seed: int
    headroom: float
    model_options: ModelMode | None
    classes: SimClasses | None = None
    """The budget's classes and each logged request's class (None: no classes)."""


def simulate(
    model: ServiceModel,
    objectives: Objectives,
    *,
    arrivals: ArrivalSpec,
    policies: Sequence[PolicySpec],
    budget_policy: Policy,
    replicas: int,
    duration_s: float | None = None,
    load: float = 1.0,
    max_requests: int | None = None,
    seed: int = 0,
    log_times: np.ndarray | None = None,
    signal: str = "e2e",
    headroom: float = 0.0,
    model_options: ModelMode | None = None,
    floor: bool = True,
    classes: SimClasses | None = None,
) -> SimReport:
    """Every policy on the same arrivals (same seed), side by side; the budget policy's
    Controller watches `signal` (e2e, or ttft for an LLM service). `floor` adds the
    hindsight floor and each run's replica-hours over it; `headroom` (the budget's) and
    `model_options` configure the `model` policy. With `classes`, each drawn request keeps
    its logged class, shed_load sheds the class shed first, and each run judges every class."""
    rng = np.random.default_rng(seed)
    arr, horizon = make_arrivals(
        arrivals,
        pool=model.samples.size,
        load=load,
        duration_s=duration_s,
        max_requests=max_requests,
        low_share=float(model.low_priority_share.value),
        rng=rng,
        log_times=log_times,
    )
    if classes is not None:
        arr = shed_by_class(draw_by_class(arr, classes, rng), classes)
    ctx = Context(model, objectives, budget_policy, signal, seed, headroom, model_options, classes)
    return run_policies(ctx, arr, horizon, policies, replicas=replicas, load=load, floor=floor)


def _llm_notes(model: ServiceModel, arr: Arrivals, replicas: int) -> list[str]:
    """What an LLM run adds: trim_logging does nothing, and the prefix-cache share taken at
    this load between the fitted runs' (when the model has several)."""
    if model.llm is None:
        return []
    out = ["trim_logging has no modelled effect on LLM steps"]
    p = model.llm
    if p.hit_levels and p.prefix_hit_rate.source != "stated" and arr.blocks is None:
        rate = offered_rate(arr.t_s, replicas)
        where = "a burst" if rate == float("inf") else f"{rate:.3g} requests/s a replica"
        runs = ", ".join(
            f"{f'a burst ({r:,.0f}/s taken in)' if b else f'{r:g}/s'} {h:.0%}"
            for r, h, b in p.hit_levels
        )
        out.append(
            f"prefix-cache hit share {share_for(p, arr.t_s, replicas):.0%} of prompt tokens at "
            f"{where} (the starting fleet), between the fitted runs' ({runs})"
        )
    return out


def run_policies(
    ctx: Context,
    arr: Arrivals,
    horizon: float,
    policies: Sequence[PolicySpec],
    *,
    replicas: int,
    load: float = 1.0,
    floor: bool = True,
) -> SimReport:
    """Every policy on these arrivals, side by side, and the floor (see `simulate`)."""
    model, objectives, budget_policy, signal = (
        ctx.model, ctx.objectives, ctx.budget_policy, ctx.signal,
    )  # fmt: skip
    runs, hits = [], None
    for spec in policies:
        policy, start = _runnable(spec, ctx, arr, replicas)
        trace = run_once(model, arr, policy, replicas=start, end_s=horizon)
        hits = trace.prefix_hits if hits is None else hits
        run = _result(spec, start, trace, objectives, model.samples.stages, ctx.classes)
        if spec.kind == "budget" and policy.name == "model":  # the budget says mode: model
            run = replace(run, policy="budget (model)")
        runs.append(run)
    notes = [
        "closed loop: each policy's decisions change the simulated service "
        "(replicas after the provisioning delay, shedding, logging)",
        f"budget policy: {budget_policy.source}, "
        f"on each request's {_watched(budget_policy, signal)}",
    ]
    if any(s.kind == "model" for s in policies):
        notes.append(
            "model policy: the fewest replicas meeting every gated objective with headroom at "
            "the load forecast (Holt's linear smoothing) one provisioning delay ahead, by "
            "capacity's search on the same model; the budget's rules guard drift"
        )
    if any(d.action == "rollback" for r in runs for d in r.decisions):
        notes.append("rollback decisions are recorded, not simulated (no previous version)")
    notes += _llm_notes(model, arr, replicas)
    if hits is not None:
        assert model.llm is not None
        size = model.llm.prefix_cache_blocks
        notes.append(
            f"prefix cache from the trace's block hashes ({BLOCK_TOKENS} tokens a block, an "
            f"LRU of {size.value:,.0f} blocks per replica, {size.source}): {hits:.1%} of "
            f"prompt tokens hit "
            f"({runs[0].policy}'s run), instead of the model's prefix_hit_rate"
        )
    base = None
    if floor:
        base = hindsight_floor(model, objectives, arr, horizon, minimum=replicas)
        if base.replica_hours > 0:
            runs = [
                replace(r, replica_hours_vs_floor=r.replica_hours / base.replica_hours)
                for r in runs
            ]
    return SimReport(model, arr.description, arr.size, horizon, load, ctx.seed, runs, notes, base)
