"""`tailbudget.simulate` and `tailbudget.capacity`: a service model fitted from logs, run."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from tailbudget import _fmt as fmt
from tailbudget._api.inputs import (
    BudgetLike,
    Data,
    Slo,
    budget_of,
    classes_of,
    objectives_of,
    sources_of,
)
from tailbudget.errors import TailbudgetError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tailbudget._api.inputs import Source
    from tailbudget.budget.classes import ClassSet
    from tailbudget.budget.model import Budget
    from tailbudget.budget.objectives import Objectives
    from tailbudget.budget.policy import Policy
    from tailbudget.logs.options import ReadOptions
    from tailbudget.sim.arrivals import ArrivalSpec
    from tailbudget.sim.capacity import CapacityReport
    from tailbudget.sim.classes import SimClasses
    from tailbudget.sim.fitting import Fitted
    from tailbudget.sim.run import SimReport

__all__ = ["capacity", "simulate"]


@dataclass(frozen=True)
class _Inputs:
    fitted: Fitted
    objectives: Objectives
    budget: Budget | None
    policy: Policy
    signal: str
    """What the budget policy's Controller watches: e2e, or ttft (LLM default)."""
    classes: ClassSet | None = None
    """The classes (the budget's `classes:`, `class_by`, `CLASS:OBJECTIVE` slo parts)
    when the logs hold their column; None: no classes."""
    mix: tuple[tuple[str, float], ...] = ()
    """A stated share per class (`class_mix`)."""


@dataclass(frozen=True)
class _ClassArgs:
    """What says the classes: the column, and a stated share per class."""

    class_by: str | None = None
    class_mix: str | Mapping[str, float] | None = None


@dataclass(frozen=True)
class _ModelKnobs:
    """The model's stated values (each None: fitted from the logs)."""

    events: str | Path | None = None
    cold_window_min: float | None = None
    cold_factor: float | None = None
    provision_delay: str | None = None
    concurrency: int | None = None
    logging_overhead_ms: float | None = None
    unit: str | None = None
    """The logs' latency unit when they do not say it (ms, s or us)."""
    prefix_hit_rate: float | None = None
    """Share of prompt tokens a prefix cache serves (LLM model)."""
    prefix_cache_blocks: int | None = None
    """KV-cache blocks (512 tokens) a replica's prefix cache holds (a trace's block hashes)."""


def _policy(budget: Budget | None, objectives: Objectives) -> tuple[Policy, str]:
    """The policy replay and serve run for the same objectives (one resolution): the
    budget's, else the default for the objectives given (the LLM default with a ttft
    objective). Its rules read their own series (ttft.p95 from each request's TTFT), so
    the Controller's main window holds end-to-end times."""
    # Deferred (start-up): `import tailbudget` and a first `tb.<name>` load only what
    # that name needs (bench/startup.py); every import inside a function in this
    # module is deferred for the same reason.
    from tailbudget.budget.policy import policy_for, resolve_policy

    if budget is not None:
        return resolve_policy(budget), "e2e"
    return policy_for("default", objectives), "e2e"


def _inputs(
    data: Data | Sequence[Data],
    budget: BudgetLike,
    slo: Slo,
    knobs: _ModelKnobs,
    max_events: int | None = None,
    given: _ClassArgs = _ClassArgs(),
) -> _Inputs:
    """Read and fit; a bad value is a one-line TailbudgetError."""
    from tailbudget._units import parse_duration_s
    from tailbudget.logs import ReadOptions
    from tailbudget.sim.fit import ModelOptions, read_event_times
    from tailbudget.sim.fitting import fit_logs
    from tailbudget.sim.objectives import objectives_for

    b = budget_of(budget)
    slo, cs = classes_of(slo, b, given.class_by)
    if budget is not None and slo is not None:
        raise TailbudgetError("give a budget or an slo, not both", param="slo")
    mix = _mix(given.class_mix, cs)
    conc, cold = knobs.concurrency, knobs.cold_factor
    if conc is not None and conc < 1:
        raise TailbudgetError(
            f"concurrency must be a whole number >= 1, got {conc}", param="concurrency"
        )
    if cold is not None and not cold >= 1:
        raise TailbudgetError(
            f"cold_factor must be >= 1 (a slowdown), got {cold:g}", param="cold_factor"
        )
    objectives = objectives_for(b, objectives_of(slo))
    hits = _hit_rate(knobs.prefix_hit_rate, b)
    delay = knobs.provision_delay
    delay_s = (
        None
        if delay is None
        else parse_duration_s(delay, field="provision_delay", param="provision_delay")
    )
    _check_knobs(knobs, delay_s)
    opts = ModelOptions(
        concurrency=conc,
        provision_delay_s=delay_s,
        cold_factor=cold,
        cold_window_s=None if knobs.cold_window_min is None else knobs.cold_window_min * 60.0,
        events_s=read_event_times(Path(knobs.events)) if knobs.events is not None else (),
        logging_overhead_ms=knobs.logging_overhead_ms,
        prefix_hit_rate=hits,
        prefix_cache_blocks=_cache_blocks(knobs.prefix_cache_blocks),
    )
    read = ReadOptions.from_budget(b, unit=knobs.unit)
    sources = sources_of(data)
    held = _class_share(sources, read, cs, explicit=given.class_by is not None)
    if held is not None:  # the log holds the class column: each drawn request keeps its class
        if held[0] is not None:
            opts = replace(opts, low_priority_share=held[0], low_priority_note=held[1])
        assert cs is not None
        read = read.with_(cohorts=(*read.cohorts, cs.by))
    if mix and held is None:
        raise TailbudgetError(
            f"class_mix: the log holds no {cs.by if cs else 'class'} column to copy each "
            "class's requests from",
            param="class_mix",
        )
    fitted = fit_logs(sources, read, opts, max_events=max_events, classes=held is not None)
    policy, signal = _policy(b, objectives)
    return _Inputs(fitted, objectives, b, policy, signal, cs if held is not None else None, mix)


def _mix(
    given: str | Mapping[str, float] | None, cs: ClassSet | None
) -> tuple[tuple[str, float], ...]:
    """The stated share per class; it needs the class column (class_by or classes.by)."""
    from tailbudget.sim.classes import parse_class_mix

    mix = parse_class_mix(given)
    if mix and cs is None:
        raise TailbudgetError(
            "class_mix: say which log column holds each request's class (class_by, or "
            "a budget's classes.by)",
            param="class_mix",
        )
    return mix


def _class_share(
    sources: list[Source], read: ReadOptions, cs: ClassSet | None, *, explicit: bool
) -> tuple[float | None, str] | None:
    """With classes: the share of the logs' requests in the class shed_load sheds first
    (the highest priority number; None without listed classes), the share the simulated
    shedding drops; None when the logs do not hold the class column (refused when the
    column was named by `class_by`)."""
    from tailbudget.logs import read_log
    from tailbudget.logs.engine import arrow_result

    if cs is None:
        return None
    first = cs.shed_order()[0] if cs.classes else None
    shed = total = 0
    for source in sources:
        try:
            log = read_log(source, read.with_(cohorts=(*read.cohorts, cs.by)))
        except TailbudgetError as exc:
            missing = str(exc).startswith(f"cohorts: column {cs.by!r}")
            if explicit and missing:
                text = str(exc).removeprefix("cohorts: ")
                raise TailbudgetError(f"class_by: {text}", param="class_by") from None
            return None  # no class column: the default share, said in the model
        col = log.table[log.cohorts[-1]].cast("string")
        row = arrow_result(
            log.table.aggregate(n=log.table.count(), k=(col == (first or "")).sum()),
            log.backend,
        ).to_pylist()[0]
        total, shed = total + int(row["n"] or 0), shed + int(row["k"] or 0)
    if not total or first is None:
        return (None, "") if total else None
    note = (
        f"the share of class {first} ({shed:,} of {total:,} requests), the lowest priority: "
        "shed_load sheds its arrivals first"
    )
    return shed / total, note


def _class_by(budget: BudgetLike, slo: Slo, class_by: str | None) -> str | None:
    """The class column an arrival trace may carry (`class_by`, else `classes.by`)."""
    return None if (cs := classes_of(slo, budget_of(budget), class_by)[1]) is None else cs.by


def _sim_classes(inputs: _Inputs) -> SimClasses | None:
    """The classes with each logged request's class, when the logs hold it."""
    from tailbudget.control.class_shedding import class_set_policies
    from tailbudget.sim.classes import SimClasses

    labels = inputs.fitted.model.samples.classes
    if inputs.classes is None or labels is None:
        return None
    # Each class's rules as replay and serve resolve them: the budget's policy (else the
    # default) against the class's objectives.
    spec = "default" if inputs.budget is None else inputs.budget.policy
    policies = tuple(class_set_policies(inputs.classes, inputs.objectives, spec))
    return replace(SimClasses.of(inputs.classes, labels), mix=inputs.mix, policies=policies)


def _check_knobs(knobs: _ModelKnobs, delay_s: float | None) -> None:
    """Every stated model parameter in its range (tailbudget.sim.limits), as a model file's:
    a NaN or negative cold window, an infinite cold factor or logging overhead, a
    provision delay of 1e12 s is one line naming the option, never a run."""
    from tailbudget.sim.limits import RANGES, check_number

    given = (
        ("concurrency", knobs.concurrency, "concurrency", 1.0),
        ("cold_factor", knobs.cold_factor, "cold_factor", 1.0),
        ("cold_window_s", knobs.cold_window_min, "cold_window_min", 60.0),
        ("provision_delay_s", delay_s, "provision_delay", 1.0),
        ("logging_overhead_ms", knobs.logging_overhead_ms, "logging_overhead_ms", 1.0),
    )
    shown = {"provision_delay": knobs.provision_delay}
    for name, value, param, scale in given:
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TailbudgetError(f"{param} must be a number, got {value!r}", param=param)
        if scale != 1.0 and not math.isfinite(value):
            raise TailbudgetError(f"{param} must be a finite number, got {value!r}", param=param)
        try:
            check_number(name, value * scale, param)
        except TailbudgetError:
            unit = " (minutes)" if scale == 60.0 else ""
            rng = RANGES[name]
            raise TailbudgetError(
                f"{param}{unit} must be from {rng.lo / scale:g} to {rng.hi / scale:g}"
                f"{'' if unit else ' ' + rng.unit}, got {shown.get(param, value)!r}",
                param=param,
            ) from None


MAX_LOAD = 10_000.0
"""A load multiple beyond any sweep; the event bound refuses most well before."""
MAX_SEED = 2**63 - 1


def _check_seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise TailbudgetError(
            f"seed must be a whole number from 0 to {MAX_SEED}, got {seed!r}", param="seed"
        )
    return seed


def _check_load(value: float, given: object) -> float:
    if isinstance(value, bool) or not (math.isfinite(value) and 0 < value <= MAX_LOAD):
        raise TailbudgetError(
            f"load takes positive multiples up to {MAX_LOAD:g} such as 1,2,4, got {given!r}",
            param="load",
        )
    return float(value)


def _hit_rate(stated: float | None, budget: Budget | None) -> float | None:
    """The prefix-cache hit share: stated, else the budget's `llm.prefix_hit_rate`."""

    if stated is not None and not (math.isfinite(stated) and 0.0 <= stated < 1.0):
        raise TailbudgetError(
            f"prefix_hit_rate is a share of prompt tokens in [0, 1), got {stated:g}",
            param="prefix_hit_rate",
        )
    if stated is not None or budget is None:
        return stated
    given = [s.llm.prefix_hit_rate for _, s in budget.stages() if s.llm is not None]
    return next((h for h in given if h is not None), None)


def _cache_blocks(stated: int | None) -> int | None:
    """The prefix cache's size per replica in 512-token blocks, when stated."""
    if stated is not None and (
        isinstance(stated, bool) or not isinstance(stated, int) or stated < 1
    ):
        raise TailbudgetError(
            f"prefix_cache_blocks is a whole number of 512-token KV-cache blocks >= 1 "
            f"(2048 is about 1M tokens), got {stated!r}",
            param="prefix_cache_blocks",
        )
    return stated


def _loads(load: str | float | Sequence[float]) -> list[float]:
    if isinstance(load, str):
        try:
            out = [float(x) for x in load.split(",") if x.strip()]
        except ValueError:
            raise TailbudgetError(
                f"load takes multiples such as 1,2,4, got {load!r}", param="load"
            ) from None
    else:
        out = [float(load)] if isinstance(load, int | float) else [float(x) for x in load]
    if not out:
        raise TailbudgetError(
            f"load takes positive multiples such as 1,2,4, got {load!r}", param="load"
        )
    return [_check_load(x, load) for x in out]


def _save(inputs: _Inputs, path: str | Path | None) -> None:
    """`save_model`: the fitted model written for `serve --model` (with its classes)."""
    if path is not None:
        from tailbudget.sim.model_file import save_model

        save_model(inputs.fitted.model, path, inputs.classes)


def _horizon(duration: str | float | None) -> float | None:
    """Seconds; zero (or less, or not finite) is refused, it simulates nothing."""
    import math

    from tailbudget._units import parse_duration_s

    if duration is None:
        return None
    seconds = parse_duration_s(duration, field="duration", param="duration")
    if not (seconds > 0 and math.isfinite(seconds)):
        raise TailbudgetError(
            f"duration must be a positive time such as 1h, got {duration!r}", param="duration"
        )
    return seconds


def simulate(
    data: Data | Sequence[Data],
    slo: Slo = None,
    *,
    budget: BudgetLike = None,
    arrivals: str | None = None,
    duration: str | float | None = None,
    replicas: int | None = None,
    concurrency: int | None = None,
    prefix_hit_rate: float | None = None,
    prefix_cache_blocks: int | None = None,
    policy: str | Sequence[str] = ("budget", "fixed"),
    policies: Sequence[str] | None = None,
    load: float = 1.0,
    requests: int | None = None,
    events: str | Path | None = None,
    cold_window_min: float | None = None,
    cold_factor: float | None = None,
    provision_delay: str | None = None,
    logging_overhead_ms: float | None = None,
    seed: int = 0,
    save_model: str | Path | None = None,
    max_events: int | None = None,
    unit: str | None = None,
    class_by: str | None = None,
    class_mix: str | Mapping[str, float] | None = None,
) -> SimReport:
    """Fit a service model from the log(s) and run each policy closed loop on the same
    arrivals (`tailbudget simulate`). `policy` (or its alias `policies`) lists budget,
    model, fixed, fixed:N, hpa:concurrency=X, hpa:utilization=U; `duration` is "1h" or seconds.
    A call implying more than `max_events` simulated events a run (default 4,000,000;
    20x that in all) is refused before it starts (sim/bounds.py). `class_by` names the
    log column of each request's class (docs/classes.md); `class_mix`
    ("premium=0.2,batch=0.8") states the share of arrivals per class."""
    from tailbudget.sim.arrivals import parse_arrivals
    from tailbudget.sim.bounds import parse_max_events
    from tailbudget.sim.estimate import Given, check_simulate
    from tailbudget.sim.policies import parse_policy_spec
    from tailbudget.sim.run import simulate as run

    _check_seed(seed)
    if isinstance(load, str) or not isinstance(load, int | float):
        raise TailbudgetError(f"load must be a number such as 2, got {load!r}", param="load")
    load = _check_load(load, load)
    if replicas is not None and replicas < 1:
        raise TailbudgetError(
            f"replicas must be a whole number >= 1, got {replicas}", param="replicas"
        )
    if requests is not None and requests < 1:
        raise TailbudgetError(
            f"requests must be a whole number >= 1, got {requests}", param="requests"
        )
    if logging_overhead_ms is not None and not logging_overhead_ms >= 0:
        raise TailbudgetError(
            f"logging_overhead_ms must be >= 0, got {logging_overhead_ms:g}",
            param="logging_overhead_ms",
        )
    chosen = policies if policies is not None else policy
    names = [chosen] if isinstance(chosen, str) else list(chosen)
    specs = [parse_policy_spec(p) for p in (names or ["budget", "fixed"])]
    bound = parse_max_events(max_events)
    spec = _classed(parse_arrivals(arrivals, bound, _class_by(budget, slo, class_by)), class_mix)
    horizon = _horizon(duration)
    knobs = _ModelKnobs(
        events,
        cold_window_min,
        cold_factor,
        provision_delay,
        concurrency,
        logging_overhead_ms,
        unit,
        prefix_hit_rate,
        prefix_cache_blocks,
    )
    # Read once: a RecordBatchReader or a relation is spooled here, and the fit and the
    # log's own figures (_beside_log) both read the spooled copy.
    sources = sources_of(data)
    inputs = _inputs(sources, budget, slo, knobs, bound, _ClassArgs(class_by, class_mix))
    if arrivals is None:
        spec = _own(inputs.fitted, horizon)
    start = replicas or max(1, inputs.policy.replicas.min)
    given = Given(
        arrivals, None if duration is None else str(duration),
        None if load == 1 else f"{load:g}", replicas, concurrency, tuple(names), requests,
    )  # fmt: skip
    check_simulate(
        inputs.fitted, inputs.policy, spec, specs, start=start, load=load, duration_s=horizon,
        given=given, max_events=bound,
    )  # fmt: skip
    _save(inputs, save_model)
    report = run(
        inputs.fitted.model,
        inputs.objectives,
        arrivals=spec,
        policies=specs,
        budget_policy=inputs.policy,
        replicas=start,
        duration_s=horizon,
        load=load,
        max_requests=requests,
        seed=seed,
        log_times=inputs.fitted.log_times,
        signal=inputs.signal,
        headroom=0.0 if inputs.budget is None else inputs.budget.headroom,
        classes=_sim_classes(inputs),
    )
    if len(sources) == 1:
        report = _beside_log(report, sources[0], inputs, unit, own=arrivals is None)
    rate = _offered(spec, load, report.requests, report.duration_s) / start
    report = _class_noted(report, inputs, spec)
    return _ranged(_noted(report, inputs.budget), [(rate, "the simulated load")])


def _classed(spec: ArrivalSpec, mix: object) -> ArrivalSpec:
    """An arrival trace that carries a class per arrival takes no stated class_mix too."""
    if mix is not None and spec.trace is not None and spec.trace.classes is not None:
        raise TailbudgetError(
            f"class_mix: the arrival trace {spec.trace.source} carries each arrival's class; "
            "give the trace or class_mix, not both",
            param="class_mix",
        )
    return spec


def _own(fitted: Fitted, horizon: float | None) -> ArrivalSpec:
    """The first log's own arrivals; with a stated duration, a benchmark's rate for that
    long (not its count of prompts)."""
    from dataclasses import replace

    spec = fitted.own_arrivals()
    if horizon is not None and spec.kind == "poisson":
        return replace(spec, count=0, in_order=False)
    return spec


def _offered(spec: ArrivalSpec, load: float, requests: int, duration_s: float) -> float:
    """Requests/s the arrivals offer (inf: all at once)."""
    if spec.kind == "burst":
        return float("inf")
    if spec.kind == "poisson":
        return spec.rate * load
    return requests / duration_s if duration_s > 0 else float("inf")


def _ranged(report: _R, rates: list[tuple[float, str]]) -> _R:
    """The report, flagging each rate outside the fitted runs' range (LLM model)."""
    from dataclasses import replace

    from tailbudget.sim.fit_table import outside_note

    if report.model.fit is None or not report.model.fit.rows:
        return report
    flags: list[str] = [outside_note(report.model.load_levels, r, w) for r, w in rates]
    flagged: list[str] = [f for f in flags if f]
    return replace(report, notes=[*flagged, *report.notes]) if flagged else report


def _beside_log(
    report: SimReport, source: Source, inputs: _Inputs, unit: str | None, *, own: bool
) -> SimReport:
    """The report with each objective as the audit measures it on the one LOG, and, at
    the log's own arrivals, how far the prediction is from it (same objective, two
    figures: both said, each with what it is)."""
    from dataclasses import replace

    from tailbudget.audit import metrics
    from tailbudget.audit.profile import profile_of
    from tailbudget.logs import ReadOptions, read_log
    from tailbudget.logs.units import check_log_unit
    from tailbudget.sim.records import LogFigureRecord

    read = ReadOptions.from_budget(inputs.budget, unit=unit)
    profile = profile_of(check_log_unit(read_log(source, read)))
    rows: list[LogFigureRecord] = []
    for o in (r.objective for r in report.runs[0].objectives):
        got, judged = metrics.measured(profile, o), metrics.judged(profile, o)
        verdict = "not_measured" if got is None else judged.verdict  # the audit's, one rule
        rows.append(LogFigureRecord(objective=o.key, measured_ms=got, verdict=verdict))
    notes = list(report.notes)
    first = report.runs[0]
    off = [
        f"{o.objective.key} {fmt.ms(o.measured_ms)} ms predicted, {fmt.ms(r.measured_ms)} ms "
        "recorded"
        # Near a target the two verdicts can differ within the model's stated error: said,
        # so a predicted pass never reads as the log's own.
        + ("" if o.verdict == r.verdict else f" ({o.verdict} predicted, {r.verdict} recorded)")
        for o, r in zip(first.objectives, rows, strict=True)
        if o.measured_ms is not None and r.measured_ms is not None
    ]
    if own and off:
        notes.insert(
            0,
            f"the log as recorded (the audit's figures) is the last row; at the log's own "
            f"arrivals the model, run by {first.policy}, differs from it: {'; '.join(off)} "
            "(docs/simulate.md, Accuracy)",
        )
    return replace(report, log_measured=rows, notes=notes)


def capacity(
    data: Data | Sequence[Data],
    slo: Slo = None,
    *,
    budget: BudgetLike = None,
    load: str | Sequence[float] = (1, 2, 4),
    loads: Sequence[float] | None = None,
    arrivals: str | None = None,
    duration: str | float | None = None,
    concurrency: int | None = None,
    prefix_hit_rate: float | None = None,
    prefix_cache_blocks: int | None = None,
    events: str | Path | None = None,
    cold_window_min: float | None = None,
    cold_factor: float | None = None,
    provision_delay: str | None = None,
    seed: int = 0,
    save_model: str | Path | None = None,
    max_events: int | None = None,
    unit: str | None = None,
    class_by: str | None = None,
    class_mix: str | Mapping[str, float] | None = None,
) -> CapacityReport:
    """The fewest replicas meeting every gated objective at each multiple of the log's
    load (`tailbudget capacity`); `load` (or its alias `loads`) is "1,2,4" or a list.
    A search implying more than `max_events` simulated events a run (20x that in all)
    is refused before it starts (sim/bounds.py). With classes (`class_by`, the budget's
    `classes:`), the count meets every class too and names the class that sets it;
    `class_mix` states the share of arrivals per class."""
    from tailbudget.sim.arrivals import parse_arrivals
    from tailbudget.sim.bounds import parse_max_events
    from tailbudget.sim.capacity import capacity_curve
    from tailbudget.sim.estimate import Given, check_capacity

    _check_seed(seed)
    bound = parse_max_events(max_events)
    multiples = _loads(loads if loads is not None else load)
    spec = _classed(parse_arrivals(arrivals, bound, _class_by(budget, slo, class_by)), class_mix)
    horizon = _horizon(duration)
    knobs = _ModelKnobs(
        events, cold_window_min, cold_factor, provision_delay, concurrency, unit=unit,
        prefix_hit_rate=prefix_hit_rate, prefix_cache_blocks=prefix_cache_blocks,
    )  # fmt: skip
    given_classes = _ClassArgs(class_by, class_mix)
    inputs = _inputs(sources_of(data), budget, slo, knobs, bound, given_classes)
    if arrivals is None:
        spec = _own(inputs.fitted, horizon)
    stated = load if isinstance(load, str) and load != "1,2,4" and loads is None else None
    given = Given(
        arrivals, None if duration is None else str(duration), stated, None, concurrency,
    )  # fmt: skip
    check_capacity(
        inputs.fitted, inputs.policy, spec, multiples, duration_s=horizon, given=given,
        max_events=bound,
    )  # fmt: skip
    _save(inputs, save_model)
    curve = capacity_curve(
        inputs.fitted.model,
        inputs.objectives,
        arrivals=spec,
        loads=multiples,
        duration_s=horizon,
        seed=seed,
        log_times=inputs.fitted.log_times,
        classes=_sim_classes(inputs),
    )
    base = _offered(spec, 1.0, inputs.fitted.logs[0].total_ms.size, _span(inputs.fitted))
    rates = [
        (
            base * p.load / p.replicas,
            f"at {p.load:g}x the log's load on {p.replicas} replica{'s' if p.replicas > 1 else ''}",
        )
        for p in curve.curve
        if p.replicas
    ]
    curve = _class_noted(curve, inputs, spec)
    return _ranged(_noted(curve, inputs.budget), rates)


def _class_noted(report: _R, inputs: _Inputs, spec: ArrivalSpec) -> _R:
    """The report, saying where each arrival's class came from (with classes)."""
    if inputs.classes is None:
        return report
    by = inputs.classes.by
    if spec.trace is not None and spec.trace.classes is not None:
        note = f"each arrival's class is the arrival trace's {by} value"
    elif inputs.mix:
        shares = ", ".join(f"{n} {fmt.share(v)}" for n, v in inputs.mix)
        note = f"each arrival's class is drawn at the stated shares ({shares})"
    else:
        note = f"each arrival copies a logged request and keeps its {by} (the log's class mix)"
    if not note.startswith("each arrival copies"):
        note += "; it copies a logged request of that class"
    return replace(report, notes=[*report.notes, note])


def _span(fitted: Fitted) -> float:
    """The first log's span (s): its times, else its requests at its stated rate."""
    first = fitted.logs[0]
    if first.ts_s is not None and first.ts_s.size > 1:
        return float(first.ts_s[-1] - first.ts_s[0]) or 1.0
    rate = first.rate_per_s
    if rate is not None and rate > 0:
        return first.total_ms.size / rate
    return first.duration_s or 1.0


_R = TypeVar("_R", "SimReport", "CapacityReport")


def _noted(report: _R, budget: Budget | None) -> _R:
    """The report, saying plainly that a budget's llm: blocks do not feed the model."""
    from dataclasses import replace

    named = [s.name for _, s in budget.stages() if s.llm is not None] if budget else []
    if not named:
        return report
    note = (
        f"the budget's llm: block ({', '.join(named)}) is not used here but for its "
        "prefix_hit_rate: the service model is fitted from the logs (their TTFT, TPOT and "
        "answer lengths, under the simulated load); `plan` reads the block"
    )
    return replace(report, notes=[*report.notes, note])
