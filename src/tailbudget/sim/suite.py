"""A policy suite: every scaling policy on real and generated traces, under two objective sets.

One row is a trace under an objective set; each policy runs closed loop on the
same arrivals from one replica (the budget's reactive default, the model
policy at its defaults, HPA on concurrency, fixed counts) beside the hindsight
floor. The objective sets come from the model and the trace, never from one
file's figures: the *unloaded* figures are the trace run on more replicas than
it can use (what no count beats), *loose* is TTFT p95 at 3x its unloaded figure
and TPOT p99 at 1.5x, *tight* TTFT p95 at 2x and TPOT p99 at 1.15x (near the
decode step floor, where a tightened target would multiply replicas).
`bench/policies.py` prints the table; tests pin a fast subset.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tailbudget.budget.objectives import Objectives, parse_objectives
from tailbudget.budget.policy import Policy, policy_for
from tailbudget.budget.policy_model import ModelMode
from tailbudget.sim.engines import run_once
from tailbudget.sim.floor import Floor, hindsight_floor
from tailbudget.sim.model import ServiceModel
from tailbudget.sim.objectives import measure
from tailbudget.sim.policies import FixedPolicy, parse_policy_spec
from tailbudget.sim.run import Context, RunResult, run_policies
from tailbudget.sim.trace import Arrivals

__all__ = [
    "DEFAULTS",
    "SETS",
    "Outcome",
    "Row",
    "as_arrivals",
    "assemble",
    "fixed_clean",
    "floor_and_clean",
    "objective_sets",
    "run_policy",
    "run_row",
]

SETS = {"loose": (3.0, 1.5), "tight": (2.0, 1.15)}
"""Objective set -> (TTFT p95, TPOT p99) as multiples of the trace's unloaded figures."""
DEFAULTS = ("budget", "model")
"""The policies a user gets without tuning: the reactive default and the model policy."""
PEERS = ("hpa:concurrency=8",)
MAX_REPLICAS = 32
UNLOADED = 64
"""Replicas for the unloaded figures (more than any trace of the suite can use)."""
FIXED_MAX = 24


@dataclass(frozen=True)
class Outcome:
    """One policy on one row."""

    policy: str
    breach_minutes: int
    replica_hours: float
    vs_floor: float | None


@dataclass(frozen=True)
class Row:
    """A trace under an objective set: the floor, every policy, the cheapest clean count."""

    trace: str
    objective_set: str
    objectives: str
    floor: Floor
    outcomes: list[Outcome]
    fixed_clean: Outcome | None
    """The fewest fixed replicas with no minute in breach (None: none up to FIXED_MAX)."""

    def of(self, policy: str) -> Outcome:
        """The outcome of `policy`."""
        return next(o for o in self.outcomes if o.policy == policy)


def objective_sets(model: ServiceModel, arrivals: Arrivals, horizon_s: float) -> dict[str, str]:
    """The loose and tight objectives of a trace (see the module docstring)."""
    probe = parse_objectives("ttft.p95=1e9,tpot.p99=1e9")
    trace = run_once(model, arrivals, FixedPolicy(UNLOADED), replicas=UNLOADED, end_s=horizon_s)
    got = {r.objective.metric: r.measured_ms for r in measure(trace, probe)}
    ttft, tpot = float(got["ttft"] or 0.0), float(got["tpot"] or 0.0)
    return {
        name: f"ttft.p95={ttft * a:.0f},tpot.p99={tpot * b:.1f}" for name, (a, b) in SETS.items()
    }


def _budget(objectives: Objectives) -> Policy:
    policy = policy_for("default", objectives)
    bounds = policy.replicas.model_copy(update={"min": 1, "max": MAX_REPLICAS})
    return policy.model_copy(update={"replicas": bounds})


def _breach(run: RunResult) -> int:
    return max((o.minutes_in_breach for o in run.objectives if o.objective.gated), default=0)


def _clean(
    model: ServiceModel, objectives: Objectives, arrivals: Arrivals, horizon_s: float
) -> Callable[[int], tuple[bool, float]]:
    """n -> (n fixed replicas spend no minute in breach, their replica-hours), remembered."""
    seen: dict[int, tuple[bool, float]] = {}

    def clean(n: int) -> tuple[bool, float]:
        if n not in seen:
            trace = run_once(model, arrivals, FixedPolicy(n), replicas=n, end_s=horizon_s)
            res = measure(trace, objectives, model.samples.stages)
            worst = max((r.minutes_in_breach for r in res if r.objective.gated), default=0)
            seen[n] = (worst == 0, trace.replica_s / 3600.0)
        return seen[n]

    return clean


def fixed_clean(
    model: ServiceModel, objectives: Objectives, arrivals: Arrivals, horizon_s: float, floor: Floor
) -> tuple[int, float] | None:
    """(the fewest fixed replicas with no minute in breach, their replica-hours), None when
    FIXED_MAX breaches.

    The search starts at the floor's peak, the count its busiest minute needs judged alone,
    warm and empty (a fixed run's minute also carries its predecessor's work, so it rarely
    needs less): from there down while one fewer is clean, else up by galloping (+1, +2,
    +4, ... capped at FIXED_MAX) and bisecting. Breach minutes are not strictly monotone in
    the count (a minute's verdict rests on its own requests, and one more replica reorders
    who waits), so a bisection could step over a clean count lying below a breaching one:
    what is reported is a clean count whose one-fewer neighbour was run and breaches, the
    claim of the table's column, in about log2 of the runs of a scan from one replica.
    """
    clean = _clean(model, objectives, arrivals, horizon_s)
    n = min(floor.peak or FIXED_MAX, FIXED_MAX)
    if clean(n)[0]:
        while n > 1 and clean(n - 1)[0]:
            n -= 1
        return n, clean(n)[1]
    bad, step = n, 1
    while True:
        good = min(bad + step, FIXED_MAX)
        if clean(good)[0]:
            break
        if good == FIXED_MAX:
            return None
        bad, step = good, 2 * step
    while good - bad > 1:  # bad breaches, good is clean
        mid = (bad + good) // 2
        bad, good = (bad, mid) if clean(mid)[0] else (mid, good)
    return good, clean(good)[1]


def run_policy(
    model: ServiceModel,
    arrivals: Arrivals,
    horizon_s: float,
    slo: str,
    policy: str,
    model_options: ModelMode | None = None,
) -> tuple[int, float]:
    """(breach minutes, replica-hours) of one policy on `arrivals` under `slo`, from one
    replica (each policy's run is its own: the rows' cells can be run apart)."""
    objectives = parse_objectives(slo)
    ctx = Context(model, objectives, _budget(objectives), "e2e", 0, 0.0, model_options)
    rep = run_policies(
        ctx, arrivals, horizon_s, [parse_policy_spec(policy)], replicas=1, floor=False
    )
    run = rep.runs[0]
    return _breach(run), run.replica_hours


def floor_and_clean(
    model: ServiceModel, arrivals: Arrivals, horizon_s: float, slo: str
) -> tuple[Floor, tuple[int, float] | None]:
    """The hindsight floor from one replica, and the cheapest clean fixed count."""
    objectives = parse_objectives(slo)
    floor = hindsight_floor(model, objectives, arrivals, horizon_s, minimum=1)
    return floor, fixed_clean(model, objectives, arrivals, horizon_s, floor)


def assemble(
    trace: str,
    objective_set: str,
    slo: str,
    floor: Floor,
    cells: Sequence[tuple[str, tuple[int, float]]],
    clean: tuple[int, float] | None,
) -> Row:
    """A row from its cells: (policy, (breach minutes, replica-hours)) each, priced
    against the floor."""
    paid = floor.replica_hours

    def vs(hours: float) -> float | None:
        return hours / paid if paid else None

    outcomes = [Outcome(p, b, h, vs(h)) for p, (b, h) in cells]
    fixed = None if clean is None else Outcome(f"fixed:{clean[0]}", 0, clean[1], vs(clean[1]))
    return Row(trace, objective_set, slo, floor, outcomes, fixed)


def run_row(
    model: ServiceModel,
    trace: str,
    arrivals: Arrivals,
    horizon_s: float,
    objective_set: str,
    slo: str,
    policies: Sequence[str] = (*DEFAULTS, *PEERS),
    model_options: ModelMode | None = None,
) -> Row:
    """Every policy on `arrivals` under `slo`, from one replica, beside the floor."""
    cells = [(p, run_policy(model, arrivals, horizon_s, slo, p, model_options)) for p in policies]
    floor, clean = floor_and_clean(model, arrivals, horizon_s, slo)
    return assemble(trace, objective_set, slo, floor, cells, clean)


def as_arrivals(t_s: np.ndarray, tin: np.ndarray | None, tout: np.ndarray | None) -> Arrivals:
    """A trace's times and tokens as arrivals (each copies sample row 0 for what it lacks)."""
    return Arrivals(
        t_s=np.asarray(t_s, dtype=np.float64),
        src=np.zeros(t_s.size, dtype=np.int64),
        low_priority=np.zeros(t_s.size, dtype=bool),
        input_tokens=tin,
        output_tokens=tout,
    )
