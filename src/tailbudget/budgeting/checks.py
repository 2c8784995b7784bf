"""Objectives measured on a log for `rebudget`, with the audit's definitions and verdicts.

Every objective (end to end at any percentile or answer length, TTFT, TPOT, ITL over
every gap, stages by name) gets the audit's figure (metrics.py) and verdict by the one
rule (tailbudget._verdict): breach when the requests over the target prove it, pass on
enough requests, else `inconclusive`; `not_measured` when the log lacks the metric.
Goodput is counted as the audit counts it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tailbudget._verdict import judge_share
from tailbudget.audit import metrics
from tailbudget.audit.profile import Profile
from tailbudget.budget import model as m


@dataclass(frozen=True)
class ObjectiveCheck:
    """An objective measured on the log, beside the slices."""

    objective: str
    target_ms: float
    measured_ms: float | None
    verdict: str
    """pass | breach | inconclusive (not settled by the requests) | not_measured (not in
    the log)."""
    n: int | None = None
    """Values the figure is measured on."""
    over: int | None = None
    """How many of them are over the target."""
    confidence: float | None = None
    """The exact test's confidence in the side the data lean to."""


@dataclass(frozen=True)
class GoodputCheck:
    """Goodput measured on the log as the audit counts it."""

    share: float
    good: int
    requests: int
    min: float | None
    thresholds: dict[str, float]
    verdict: str
    """pass | breach | inconclusive (under the minimum by less than the requests prove)
    | no_minimum (reported, not gated)."""


_PER_REQUEST = ("e2e", "ttft", "tpot", "itl")


def objective_checks(budget: m.Budget, profile: Profile) -> tuple[ObjectiveCheck, ...]:
    # Every objective, with the audit's definitions (metrics.py): e2e from the total, TTFT
    # from the ttft stage, TPOT from the answer lengths, ITL from the gaps, stages by name.
    out: list[ObjectiveCheck] = []
    for o in budget.objectives:
        got = metrics.measured(profile, o)
        stage = profile.times.get(o.metric) if o.metric not in _PER_REQUEST else None
        if stage is not None and stage.size and not (stage > 0).any():
            # No request spent time in it (an empty column): the audit's inconclusive.
            out.append(ObjectiveCheck(o.key, o.target_ms, None, "inconclusive"))
            continue
        if got is None:
            out.append(ObjectiveCheck(o.key, o.target_ms, None, "not_measured"))
            continue
        v = metrics.judged(profile, o)
        out.append(ObjectiveCheck(o.key, o.target_ms, got, v.verdict, v.n, v.over, v.confidence))
    return tuple(out)


def goodput_check(budget: m.Budget, profile: Profile) -> GoodputCheck | None:
    """Goodput on the log (None without a goodput objective or a thresholded metric)."""
    objs = budget.objectives
    thresholds = objs.thresholds()
    if objs.goodput is None or not thresholds:
        return None
    got = metrics.good_share(profile, thresholds, objs.e2e_output_tokens())
    if got is None:
        return None
    share, good, requests = got
    least = objs.goodput.min
    # The audit's rule: the breach side proved by the exact test (tailbudget._verdict).
    verdict = "no_minimum" if least is None else judge_share(good, requests, least)
    return GoodputCheck(share, good, requests, least, thresholds, verdict)
