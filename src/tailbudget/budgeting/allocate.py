"""Reallocating slices to what a log measures, per gated percentile.

The rule, in the budget's own arithmetic (sequences add, a parallel group takes its
slowest branch, plus `overhead_ms`): a stage that measures under its slice keeps what
it uses and its unused room goes to the stages over theirs; when every stage at its
measured figure still does not fit `(1 - headroom) x SLO`, the stages over budget share
what is left in proportion to what they measure (each needs the same relative
speed-up) and the shortfall is the speed-up still needed. A stage whose own objective
passes on the log (the `ttft` stage under a passing ttft.p95) keeps what it measures
while the other stages can take the cut: its slice is cut below that only when they
cannot. The framework's trade:
fetch 55 ms against a 40 ms slice, inference 22 ms against 30: inference's 8 unused ms
go to fetch, and 7 ms of speed-up remain (17 ms at 10% headroom).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tailbudget._units import PERCENTILES, quantile_of
from tailbudget.budget import model as m
from tailbudget.budget.compose import budget_tree, stage_points

Values = Callable[[Any], float]


@dataclass(frozen=True)
class Allocation:
    """New slices at one gated percentile, and what is still missing."""

    percentile: str
    target_ms: float
    """What the stages may use: (1 - headroom) x SLO - overhead_ms."""
    old_ms: float
    """The budget's additive figure over the stages (no overhead)."""
    measured_ms: float
    """The same sum over the stages' measured percentiles."""
    slices: dict[str, float]
    speedup_needed_ms: float
    """Measured minus target, when positive: no reallocation can close it."""


def old_slices(budget: m.Budget) -> dict[str, dict[str, float]]:
    """Each stage's slice at every percentile, as `plan`'s additive figure reads it."""
    _, fits = budget_tree(budget)
    out: dict[str, dict[str, float]] = {}
    for _, stage in budget.stages():
        points = stage_points(stage, budget.gated)
        out[stage.name] = {
            p: points[p] if p in points else float(fits[stage.name].ppf(quantile_of(p)))
            for p in PERCENTILES
        }
    return out


def tree_value(items: Sequence[Any], leaf: Callable[[m.Stage], float]) -> float:
    """The budget arithmetic over `items` (a sequence) with `leaf` giving each stage."""
    return sum(_value(i, leaf) for i in items)


def _value(item: Any, leaf: Callable[[m.Stage], float]) -> float:
    if isinstance(item, m.Stage):
        return leaf(item)
    if isinstance(item, m.Parallel):
        return max(_value(i, leaf) for i in item.parallel)
    return tree_value(item.sequence, leaf)


def allocate(
    budget: m.Budget,
    percentile: str,
    slo_ms: float,
    old: dict[str, dict[str, float]],
    measured: dict[str, float],
    keep: frozenset[str] = frozenset(),
) -> Allocation:
    """New slices at `percentile`; `measured` maps stage -> ms (missing: keeps its slice).
    Stages in `keep` (their objective passes) are cut last, after every other stage."""

    def old_of(s: m.Stage) -> float:
        return old[s.name][percentile]

    def meas_of(s: m.Stage) -> float:
        return measured.get(s.name, old_of(s))

    target = (1.0 - budget.headroom) * slo_ms - budget.overhead_ms
    slices: dict[str, float] = {}
    _sequence(budget.pipeline, target, old_of, meas_of, slices, keep)
    total_measured = tree_value(budget.pipeline, meas_of)
    return Allocation(
        percentile=percentile,
        target_ms=target,
        old_ms=tree_value(budget.pipeline, old_of),
        measured_ms=total_measured,
        slices=slices,
        speedup_needed_ms=max(0.0, total_measured - target),
    )


def _sequence(
    items: Sequence[Any],
    target: float,
    old_of: Values,
    meas_of: Values,
    out: dict[str, float],
    keep: frozenset[str],
) -> None:
    olds = [_value(i, old_of) for i in items]
    meas = [_value(i, meas_of) for i in items]
    kept = [isinstance(i, m.Stage) and i.name in keep for i in items]
    if sum(meas) <= target:
        shares = _with_room(olds, meas, target)
    else:
        shares = _short(olds, meas, target, kept)
    for item, share in zip(items, shares, strict=True):
        _assign(item, share, old_of, meas_of, out, keep)


def _with_room(olds: list[float], meas: list[float], target: float) -> list[float]:
    # Everything fits: raise the stages over budget to what they measure, then take the
    # excess from the others' unused room, in proportion to that room.
    wanted = [max(o, x) for o, x in zip(olds, meas, strict=True)]
    excess = sum(wanted) - target
    if excess <= 0:
        return wanted
    room = [w - x for w, x in zip(wanted, meas, strict=True)]
    total_room = sum(room)
    return [w - excess * r / total_room for w, r in zip(wanted, room, strict=True)]


def _short(olds: list[float], meas: list[float], target: float, kept: list[bool]) -> list[float]:
    # Even at their measured figures the stages do not fit: those within budget keep what
    # they measure, those over it share the rest in proportion to what they measure. With
    # none over its slice, the stages whose objective does not pass share the cut.
    over = [x > o and not k for o, x, k in zip(olds, meas, kept, strict=True)]
    if not any(x > 0 for x, is_over in zip(meas, over, strict=True) if is_over):
        over = [not k for k in kept]
    rest = target - sum(x for x, is_over in zip(meas, over, strict=True) if not is_over)
    over_total = sum(x for x, is_over in zip(meas, over, strict=True) if is_over)
    if rest <= 0 or over_total <= 0:
        scale = target / sum(meas) if sum(meas) > 0 else 0.0
        return [x * scale for x in meas]
    return [x * rest / over_total if is_over else x for x, is_over in zip(meas, over, strict=True)]


def _assign(
    item: Any,
    share: float,
    old_of: Values,
    meas_of: Values,
    out: dict[str, float],
    keep: frozenset[str],
) -> None:
    if isinstance(item, m.Stage):
        out[item.name] = share
    elif isinstance(item, m.Parallel):
        # A branch may use the whole group's share; it is not given more than it needs.
        for branch in item.parallel:
            wanted = max(_value(branch, old_of), _value(branch, meas_of))
            _assign(branch, min(share, wanted), old_of, meas_of, out, keep)
    else:
        _sequence(item.sequence, share, old_of, meas_of, out, keep)
