"""The events a `simulate` or `capacity` call implies, checked before any run.

The arguments are named as Python writes them (`duration='10000h'`, `errors.said`) and
listed in the refusal's `mentions`, so the command line spells them as its flags
(`--duration 10000h`): the refusal says which one to lower.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tailbudget.errors import said
from tailbudget.sim.bounds import (
    CAPACITY_BREACH_RUNS,
    CAPACITY_MAX_REPLICAS,
    CAPACITY_RUNS_PER_LOAD,
    Estimate,
    RunShape,
    arrivals_per_run,
    check_estimate,
    run_total,
)

if TYPE_CHECKING:
    from tailbudget.budget.policy import Policy
    from tailbudget.sim.arrivals import ArrivalSpec
    from tailbudget.sim.fitting import Fitted
    from tailbudget.sim.policies import PolicySpec


@dataclass(frozen=True)
class Given:
    """The arguments as written (None when not given) and how the caller spells them."""

    arrivals: str | None = None
    duration: str | None = None
    load: str | None = None
    replicas: int | None = None
    concurrency: int | None = None
    policies: tuple[str, ...] = ()
    requests: int | None = None


def _said(pairs: list[tuple[str, object]]) -> tuple[str, tuple[str, ...]]:
    """Arguments as Python writes them, space-separated, and their names."""
    return " ".join(said(n, v) for n, v in pairs), tuple(dict.fromkeys(n for n, _ in pairs))


def _blame(given: Given, spec: ArrivalSpec) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """What sets each part of a run, as written, and the arguments each names."""
    given_flow = [("arrivals", given.arrivals), ("duration", given.duration), ("load", given.load)]
    flow, flow_names = _said([(n, v) for n, v in given_flow if v is not None])
    where = "the trace's" if spec.kind == "trace" else "the log's"
    held: list[tuple[str, object]] = [
        ("replicas", given.replicas),
        ("concurrency", given.concurrency),
    ]
    held += [("policy", p) for p in given.policies if p.startswith("fixed:")]
    slots, slot_names = _said([(n, v) for n, v in held if v is not None])
    ticks, tick_names = _said([("duration", given.duration)] if given.duration else [])
    text = {
        "steps": f"{where} output tokens" + (f" at {flow}" if flow else ""),
        "arrivals": flow or f"{where} own arrivals",
        "ticks": ticks or f"{where} time span",
        "slots": slots or "the budget policy's replicas.max",
        "raise": said("max_events"),
    }
    names = {"steps": flow_names, "arrivals": flow_names, "ticks": tick_names,
             "slots": slot_names, "raise": ("max_events",)}  # fmt: skip
    return text, names


def _recorded(spec: ArrivalSpec, fitted: Fitted) -> tuple[int, float]:
    t = spec.trace.t_s if spec.trace is not None else fitted.log_times
    if t is None or t.size == 0:
        return 0, 0.0
    return int(t.size), float(t[-1] - t[0])


def _shape(
    spec: ArrivalSpec,
    fitted: Fitted,
    policy: Policy,
    *,
    load: float,
    duration_s: float | None,
    requests: int | None,
    replicas: int,
) -> RunShape:
    recorded, span = _recorded(spec, fitted)
    n, horizon = arrivals_per_run(
        spec, load=load, duration_s=duration_s, max_requests=requests, recorded=recorded,
        span_s=span,
    )  # fmt: skip
    every = policy.evaluate_every_s
    slots = float(replicas) * max(1.0, float(fitted.model.concurrency.value))
    return RunShape(n, horizon / every, slots, _decode_steps(spec, fitted, n))


def _decode_steps(spec: ArrivalSpec, fitted: Fitted, arrivals: float) -> float:
    """Decode steps an LLM run takes at least: every answer's tokens, batch_limit at a
    time, and never fewer than the longest answer (its tokens are sequential)."""
    model = fitted.model
    if model.llm is None:
        return 0.0
    out = spec.trace.output_tokens if spec.trace is not None else None
    if out is None:
        out = model.samples.output_tokens
    if out is None or out.size == 0:
        return 0.0
    batch = max(1.0, float(model.llm.batch_limit.value))
    return max(float(out.max()), arrivals * float(out.mean()) / batch)


def check_simulate(
    fitted: Fitted,
    policy: Policy,
    spec: ArrivalSpec,
    policies: Sequence[PolicySpec],
    *,
    start: int,
    load: float,
    duration_s: float | None,
    given: Given,
    max_events: int,
) -> None:
    """Refuse a `simulate` run above the bound, before its arrivals are drawn."""
    shapes = []
    for p in policies:
        peak = max(start, p.replicas or 0)
        if p.kind != "fixed":
            peak = max(peak, policy.replicas.max)
        shapes.append(
            _shape(spec, fitted, policy, load=load, duration_s=duration_s, requests=given.requests,
                   replicas=peak)
        )  # fmt: skip
    worst = max(shapes, key=lambda s: s.events)
    est = Estimate(len(shapes), worst, run_total(shapes), *_blame(given, spec))
    check_estimate(est, max_events, "simulate")


def check_capacity(
    fitted: Fitted,
    policy: Policy,
    spec: ArrivalSpec,
    loads: Sequence[float],
    *,
    duration_s: float | None,
    given: Given,
    max_events: int,
) -> None:
    """Refuse a `capacity` search above the bound (counted at its most runs)."""
    shapes = []
    for load in loads:
        one = _shape(spec, fitted, policy, load=load, duration_s=duration_s, requests=None,
                     replicas=CAPACITY_MAX_REPLICAS)  # fmt: skip
        shapes += [one] * CAPACITY_RUNS_PER_LOAD
    top = _shape(spec, fitted, policy, load=2.0 * max(loads), duration_s=duration_s, requests=None,
                 replicas=CAPACITY_MAX_REPLICAS)  # fmt: skip
    shapes += [top] * CAPACITY_BREACH_RUNS
    worst = max(shapes, key=lambda s: s.events)
    est = Estimate(len(shapes), worst, run_total(shapes), *_blame(given, spec))
    check_estimate(est, max_events, "capacity")
