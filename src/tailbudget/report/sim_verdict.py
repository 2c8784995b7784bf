"""The one-line verdicts of `simulate` and `capacity`, shared by their markdown and HTML so
both open with the same words and figures."""

from __future__ import annotations

from tailbudget import _fmt as fmt
from tailbudget.sim.capacity import CapacityReport
from tailbudget.sim.run import RunResult, SimReport

__all__ = ["best_run", "capacity_headline", "capacity_take", "simulate_headline"]


def _breach_minutes(r: RunResult) -> int:
    return max((o.minutes_in_breach for o in r.objectives), default=0)


def _minutes(n: int) -> str:
    return f"{fmt.count(n)} minute" + ("" if n == 1 else "s")


def best_run(rep: SimReport) -> RunResult:
    """The policy with the fewest minutes in breach, then the fewest replica-hours."""
    return min(rep.runs, key=lambda r: (_breach_minutes(r), r.replica_hours))


def simulate_headline(rep: SimReport) -> tuple[str, bool]:
    """(The verdict, whether even the best policy breaches a gated objective)."""
    best = best_run(rep)
    breached = any(o.verdict == "breach" and o.objective.gated for o in best.objectives)
    headline = (
        f"Every policy breaches; the best, {best.policy}, is in breach "
        f"{_minutes(_breach_minutes(best))}"
        if breached
        else f"{best.policy} meets every gated objective at "
        f"{fmt.number(best.replica_hours)} replica-hours"
    )
    return headline, breached


def capacity_take(rep: CapacityReport) -> str:
    """Where to scale before breach, in a clause."""
    sbb = rep.scale_before_breach
    if sbb is not None and sbb.load is not None:
        return (
            f"scale before {sbb.load:g}x the log's load ({sbb.objective} at "
            f"{fmt.share(sbb.share_of_target, 0)} of target)"
        )
    return "no scale-before-breach load found in the searched range"


def capacity_headline(rep: CapacityReport) -> tuple[str, bool]:
    """(The verdict, whether no replica count meets the objectives at the first load)."""
    first = rep.curve[0] if rep.curve else None
    if first is None or first.replicas is None:
        return "No replica count found", True
    meet = "replica meets" if first.replicas == 1 else "replicas meet"
    return (
        f"{first.replicas} {meet} every gated objective at {first.load:g}x the log's load; "
        f"{capacity_take(rep)}",
        not first.replicas,
    )
