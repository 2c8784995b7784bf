"""The one-line verdicts of `simulate` and `capacity`, shared by their markdown and HTML so
both open with the same words and figures."""

from __future__ import annotations

from tailbudget import _fmt as fmt
from tailbudget.sim.capacity import CapacityReport
from tailbudget.sim.model import ServiceModel
from tailbudget.sim.run import RunResult, SimReport

__all__ = [
    "MINUTES_RULE",
    "best_run",
    "best_take",
    "capacity_headline",
    "capacity_take",
    "fit_summary",
    "floor_ratio",
    "floor_unmet_note",
    "minutes_cell",
    "refused",
    "simulate_headline",
    "vs_floor",
    "why_none",
]


def _breach_minutes(r: RunResult) -> int:
    return max((o.minutes_in_breach for o in r.objectives), default=0)


def _minutes(n: int) -> str:
    return f"{fmt.count(n)} minute" + ("" if n == 1 else "s")


def best_run(rep: SimReport) -> RunResult:
    """The policy with the fewest minutes in breach, then the fewest replica-hours."""
    return min(rep.runs, key=lambda r: (_breach_minutes(r), r.replica_hours))


def refused(model: ServiceModel) -> str:
    """Why no policy verdict is given: the model does not reproduce its runs ('' if it does
    or was not judged). A model that contradicts the audit on its own log decides nothing."""
    if model.fit is None or model.reproduces is not False:
        return ""
    text = model.fit.refusal()
    return text[0].upper() + text[1:]


def fit_summary(model: ServiceModel) -> str:
    """'The model reproduces its runs: 7 of 7 figures within bounds (...)' or ''."""
    fit = model.fit
    if fit is None:
        return ""
    if not fit.rows:
        return "No fit table: no log has arrival times or a stated rate to replay."
    runs = "; ".join(
        f"{src.rsplit('/', 1)[-1]} at {load} {ok} of {n}" for src, load, ok, n in fit.per_run()
    )
    good = sum(r.ok for r in fit.rows)
    head = "reproduces its runs" if fit.reproduces else "does not reproduce its runs"
    return (
        f"The model {head}: {good} of {len(fit.rows)} figures within bounds (medians 10%, "
        f"tails 20%; each run on its own arrivals): {runs}."
    )


def minutes_cell(r: RunResult) -> str:
    """A run's minutes in breach (the most of any gated objective), with the minutes the
    one verdict rule leaves inconclusive beside them: '48', '48 (+5 inconclusive)'."""
    gated = [o for o in r.objectives if o.objective.gated] or r.objectives
    breach = max((o.minutes_in_breach for o in gated), default=0)
    unsure = max((o.minutes_inconclusive for o in gated), default=0)
    return fmt.count(breach) + (f" (+{fmt.count(unsure)} inconclusive)" if unsure else "")


def vs_floor(rep: SimReport, r: RunResult) -> str:
    """A run's replica-hours over the floor's, '1.20x'; 'n/a' when the floor does not meet
    every minute (a ratio to an unmet floor is no yardstick of cost)."""
    x = r.replica_hours_vs_floor
    if x is None or (rep.floor is not None and rep.floor.unmet_minutes):
        return "n/a"
    return f"{x:.2f}x"


def floor_unmet_note(rep: SimReport) -> str:
    """'' when the floor meets every minute, else why no run is quoted against it."""
    f = rep.floor
    if f is None or not f.unmet_minutes:
        return ""
    return (
        f"No ratio to the floor is given: no replica count meets "
        f"{_minutes(f.unmet_minutes)} of {fmt.count(len(f.per_minute))}, so the floor's "
        "replica-hours are not the cost of meeting the objectives; compare replica-hours "
        "and minutes in breach"
    )


MINUTES_RULE = (
    "A minute is in breach when its own simulated requests prove it (the one verdict rule: "
    "an exact one-sided binomial test at 95%, however few they are); a minute with too few "
    "requests to pass, or over the target by less than its requests prove, is inconclusive: "
    "not in breach, counted apart"
)
"""How simulate counts minutes, said under every table of minutes."""


def floor_ratio(rep: SimReport) -> str:
    """The floor row's ratio: '1x', or 'not met' when some minute no count meets (a floor
    that is not met is no 1.00x yardstick)."""
    return "not met" if rep.floor is not None and rep.floor.unmet_minutes else "1x"


def why_none(rep: SimReport) -> str:
    """Why no policy meets the gated objectives, in a clause."""
    f = rep.floor
    if f is None:
        return "no hindsight floor was computed to tell load from the tail"
    if f.unmet_minutes:
        return (
            f"no replica count meets them in {_minutes(f.unmet_minutes)} of "
            f"{fmt.count(len(f.per_minute))} (the floor is not met either): that tail is not "
            "load, and replicas do not fix it"
        )
    return (
        f"the hindsight floor meets every minute with at most {fmt.count(f.peak)} replicas, "
        "so the breach is when and how many replicas the policies asked for, not a tail no "
        "count fixes"
    )


def best_take(rep: SimReport) -> str:
    """The policy with the fewest minutes in breach, saying when even it breaches (none
    named when the model does not reproduce its runs)."""
    if refused(rep.model):
        return "no policy verdict: the model does not reproduce its runs (fit table)"
    best = best_run(rep)
    take = (
        f"{best.policy}: fewest minutes in breach ({_breach_minutes(best)}) at "
        f"{fmt.number(best.replica_hours)} replica-hours"
    )
    return take + ("; no policy meets every gated objective" if _breaches(best) else "")


def _tied(rep: SimReport, best: RunResult) -> str:
    """Who else has as few minutes in breach (the headline names the cheapest of them)."""
    others = [
        r.policy for r in rep.runs if r is not best and _breach_minutes(r) == _breach_minutes(best)
    ]
    if not others:
        return ""
    also = " and ".join(f"{p}'s" for p in others)
    return (
        f" and {also}, {best.policy} at the fewest replica-hours ({fmt.number(best.replica_hours)})"
    )


def _breaches(run: RunResult) -> bool:
    return any(o.verdict == "breach" and o.objective.gated for o in run.objectives)


def simulate_headline(rep: SimReport) -> tuple[str, bool]:
    """(The verdict, whether even the best policy breaches a gated objective). A breaching
    policy is never named best without saying that none meets the objectives, and why; no
    verdict at all when the model does not reproduce its runs."""
    no = refused(rep.model)
    if no:
        return no, True
    best = best_run(rep)
    breached = _breaches(best)
    headline = (
        f"No policy meets every gated objective; the fewest minutes in breach, "
        f"{_minutes(_breach_minutes(best))}, are {best.policy}'s{_tied(rep, best)}: "
        f"{why_none(rep)}"
        if breached
        else f"{best.policy} meets every gated objective at "
        f"{fmt.number(best.replica_hours)} replica-hours"
    )
    unsettled = _unsettled(best)
    if unsettled and not breached:
        # "meets" is a pass: on too few simulated requests the one rule says inconclusive.
        headline = (
            f"{best.policy} breaches no gated objective at "
            f"{fmt.number(best.replica_hours)} replica-hours, but its simulated requests are "
            f"too few to settle {', '.join(unsettled)} (inconclusive)"
        )
    classes = _class_breaches(best)
    if classes and not breached:
        headline = headline.replace("every gated objective", "the service-wide objectives", 1)
    return headline + classes, breached or bool(classes)


def _unsettled(run: RunResult) -> list[str]:
    return [
        o.objective.key for o in run.objectives if o.verdict == "inconclusive" and o.objective.gated
    ]


def _class_breaches(run: RunResult) -> str:
    """'; but class premium breaches e2e.p95 (1,077 ms over 800 ms)' for each class whose
    gated objective breaches on its own requests: the service passing never hides it."""
    said = [
        f"class {c.name} breaches {o.objective.key} ({fmt.ms(o.measured_ms)} ms over "
        f"{fmt.ms(o.objective.target_ms)} ms)"
        for c in run.classes or []
        for o in c.objectives
        if o.verdict == "breach" and o.objective.gated
    ]
    return f"; but {'; '.join(said)}" if said else ""


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
    """(The verdict, whether no replica count meets the objectives at the first load); none
    when the model does not reproduce its runs."""
    no = refused(rep.model)
    if no:
        return no, True
    first = rep.curve[0] if rep.curve else None
    if first is None or first.replicas is None:
        by = first.set_by if first is not None else None
        if by is not None and by != "service":
            return f"No replica count found: class {by}'s objectives are not met", True
        return "No replica count found", True
    meet = "replica meets" if first.replicas == 1 else "replicas meet"
    what = "every gated objective"
    if first.classes is not None:
        by = "the service's" if first.set_by == "service" else f"class {first.set_by}'s"
        what += f" of the service and every class ({by} set the count)"
    return (
        f"{first.replicas} {meet} {what} at {first.load:g}x the log's load; {capacity_take(rep)}",
        not first.replicas,
    )
