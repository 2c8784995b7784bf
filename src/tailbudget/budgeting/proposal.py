"""`tailbudget rebudget`: a budget that fits the SLO, from what a log measures."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from tailbudget._report_base import ReportBase, rendered
from tailbudget._units import PERCENTILES, min_rows, quantile_of
from tailbudget.audit.fixes import Fix
from tailbudget.audit.gap import LLM_METRICS, Gap, driver, gaps
from tailbudget.audit.profile import Profile
from tailbudget.audit.report import RankedFix
from tailbudget.budget import model as m
from tailbudget.budget.compose import MEASURED_METHOD, by_requests, compose
from tailbudget.budgeting.allocate import Allocation, allocate, old_slices
from tailbudget.budgeting.budget_text import budget_diff as _diff
from tailbudget.budgeting.budget_text import budget_yaml as budget_yaml
from tailbudget.budgeting.checks import (
    GoodputCheck,
    ObjectiveCheck,
    goodput_check,
    objective_checks,
)
from tailbudget.budgeting.options import (
    Option,
    OptionFacts,
    Times,
    additive,
    candidates,
    composed,
    per_request,
)
from tailbudget.budgeting.reasons import passing_stages, reason
from tailbudget.budgeting.rebudget_record import document_of
from tailbudget.errors import TailbudgetError
from tailbudget.logs.columns import UNATTRIBUTED

if TYPE_CHECKING:
    from tailbudget.budgeting.rebudget_record import RebudgetDocument

MIN_SAVING_MS = 0.5
"""Options that save less than this at every gated percentile are not listed."""
MAX_SET = 3
"""The largest set of options searched for the smallest one that closes the gap."""


@dataclass(frozen=True)
class Change:
    """One stage's slices, before and after, and why."""

    stage: str
    from_: dict[str, float]
    to: dict[str, float]
    reason: str


@dataclass(frozen=True)
class PricedOption(OptionFacts):
    """An option as reported: the change, its price, what it saves, and whether chosen."""

    score: float
    chosen: bool


@dataclass(frozen=True)
class Composition:
    """End-to-end percentiles before and after, with how they were composed."""

    method: str
    before: dict[str, float]
    after: dict[str, float]


@dataclass(frozen=True)
class Rebudget(ReportBase):
    """The whole proposal; `report.rebudget` renders it."""

    service: str
    source: str
    how: str
    slo: dict[str, float]
    gated: tuple[str, ...]
    headroom: float
    overhead_ms: float
    fits_now: bool | None
    """None: no gated objective fails, but one is inconclusive (the one verdict rule)."""
    slices_fit: bool
    """Every stage is within its slice at every gated percentile (whatever the verdicts)."""
    measured: dict[str, dict[str, float]]
    measured_e2e: dict[str, float]
    allocations: tuple[Allocation, ...]
    changes: tuple[Change, ...]
    options: tuple[PricedOption, ...]
    closes_gap: bool
    compositions: tuple[Composition, ...]
    objectives: tuple[ObjectiveCheck, ...]
    goodput: GoodputCheck | None
    budget_text: str
    diff: str
    notes: tuple[str, ...]
    gaps: tuple[Gap, ...] = ()
    """Where each breached e2e percentile's gap lies (the stage, long answers or slow tokens)."""
    objective_options: tuple[RankedFix, ...] = ()
    """The audit's ranked fixes of each breached TTFT/TPOT/ITL objective, its figures."""
    class_proposals: tuple[tuple[str, int, Rebudget], ...] = ()
    """Per class (name, its requests, its own proposal on its stages and requests)."""

    def record(self) -> RebudgetDocument:
        """The `rebudget --format json` document as a record."""

        return document_of(self)

    def json_data(self) -> Any:
        """The `rebudget --format json` contract (`from` spelled as the contract does)."""
        return self.record().model_dump(mode="json", by_alias=True)

    def to_text(self) -> str:
        """The proposal for a terminal (`--format text`)."""
        return rendered(self, "text")

    @property
    def speedup_needed_ms(self) -> dict[str, float]:
        """Per gated percentile, ms that must be saved beyond any reallocation."""
        return {a.percentile: round(a.speedup_needed_ms, 3) for a in self.allocations}


def rebudget(budget: m.Budget, profile: Profile, catalog: dict[str, Fix]) -> Rebudget:
    """Compare each slice with the log and propose slices that fit every gated percentile."""
    if profile.used == 0:
        raise TailbudgetError(
            f"{profile.source}: no request without an error to measure ({profile.rows:,} "
            f"rows, {profile.errors:,} errors); re-budgeting needs timed, successful requests"
        )
    profile = with_unattributed(budget, profile)
    slo = budget.objectives.e2e()
    # Stage slices hold p50/p95/p99: other gated percentiles are checked, not re-sliced.
    sliced = tuple(p for p in budget.gated if p in slo and p in PERCENTILES)
    checks = objective_checks(budget, profile)
    # The one verdict rule: a percentile the requests do not settle is inconclusive and
    # does not gate, so no slice is cut for it (plan does not gate on it either); a
    # breach they prove gates however few they are.
    said = {c.objective: c.verdict for c in checks}
    gated = tuple(p for p in sliced if said.get(f"e2e.{p}") != "inconclusive")
    measured = {s: profile.percentiles(s) for s in profile.stages}
    _check_measurable(profile.source, {**measured, "end-to-end": profile.percentiles("total")})
    old = old_slices(budget)
    passing = passing_stages(budget, checks)
    keep = frozenset(passing)
    # A budget that records its log's whole requests is planned (and gated) on them: the
    # slices' sum may reach the SLO over the requests' share of it, as `plan` composes.
    share = by_requests(budget, dict.fromkeys(gated, 1.0)) or {}
    sums = {p: slo[p] / share[p] if share.get(p) else slo[p] for p in gated}

    def allocated(p: str) -> Allocation:
        at = {s: v[p] for s, v in measured.items()}
        got = allocate(budget, p, sums[p], old, at, keep)
        if share.get(p) and got.measured_ms > got.target_ms:
            # Cut slices are written at 0.1 ms (rounded half up): keep that slack off the
            # sum, so the proposal's scaled composition stays within the SLO.
            sums[p] -= 0.05 * len(old)
            got = allocate(budget, p, sums[p], old, at, keep)
        return got

    allocations = tuple(allocated(p) for p in gated)
    slices_fit = _fits_now(budget, allocations, old, measured, gated)
    # A budget the log already meets is the proposal: re-slicing it would only round.
    proposed = budget if slices_fit else _proposed(budget, allocations, measured)
    changes = () if slices_fit else _changes(budget, proposed, old, measured, allocations, passing)
    fits_now = _settled(slices_fit, budget, checks)
    options = _options(budget, profile, catalog, gated, old, allocations)
    chosen = _smallest_set(budget, profile, options, allocations, old)
    priced = tuple(_priced(o, o in chosen) for o in options)
    notes = _notes(budget, profile, sliced, gated) + tuple(
        f"{p}: the slices may add to {sums[p]:,.0f} ms for {slo[p]:,.0f} ms end to end: the "
        f"log's requests measure {share[p]:.0%} of the slices' sum there "
        "(composition.measured), as `plan` composes it"
        for p in gated
        if share.get(p)
    )
    return Rebudget(
        service=budget.service,
        source=profile.source,
        how=profile.how(),
        slo=slo,
        gated=gated,
        headroom=budget.headroom,
        overhead_ms=budget.overhead_ms,
        fits_now=fits_now,
        slices_fit=slices_fit,
        measured=measured,
        measured_e2e=profile.percentiles("total"),
        allocations=allocations,
        changes=changes,
        options=priced,
        closes_gap=_closes(budget, profile, chosen, allocations, old),
        compositions=_compositions(budget, proposed, profile, chosen),
        objectives=checks,
        goodput=goodput_check(budget, profile),
        budget_text=budget_yaml(
            proposed, header=f"proposed by `tailbudget rebudget` from {profile.source}"
        ),
        diff=_diff(budget, proposed),
        notes=notes,
        gaps=gaps(profile, slo, gated, profile.percentiles("total")) + _stage_gaps(profile, checks),
    )


def _stage_gaps(profile: Profile, checks: Sequence[ObjectiveCheck]) -> tuple[Gap, ...]:
    # A breached stage objective gets the audit's driver reading (one function, gap.driver).
    out = []
    for c in checks:
        if c.verdict != "breach" or c.measured_ms is None or c.objective.startswith("e2e."):
            continue
        if c.objective.split(".", 1)[0] in LLM_METRICS:
            continue
        got = driver(profile, c.objective, c.target_ms, c.measured_ms)
        if got is not None:
            out.append(got)
    return tuple(out)


MAX_SLICE_MS = 1e12
"""About 31 years: a figure above it is a unit or data error, and sums of such figures
overflow to infinity, which no budget file can hold."""


def _check_measurable(source: str, measured: dict[str, dict[str, float]]) -> None:
    """Refuse a log whose percentiles cannot be re-sliced (infinite or absurdly large)."""
    for stage, points in measured.items():
        for p, value in points.items():
            if not (abs(value) <= MAX_SLICE_MS):  # NaN fails too
                raise TailbudgetError(
                    f"{source}: {stage!r} measures {p} = {value:.3g} ms, beyond the "
                    f"{MAX_SLICE_MS:.0e} ms a budget can hold; check the log's unit "
                    "and its latency values"
                )


def with_unattributed(budget: m.Budget, profile: Profile) -> Profile:
    """The profile with the budget's `unattributed` stage measured (total - its other stages)."""
    if budget.stage(UNATTRIBUTED) is None or UNATTRIBUTED in profile.times:
        return profile
    others = [i for i in budget.pipeline if not (isinstance(i, m.Stage) and i.name == UNATTRIBUTED)]
    rest = np.clip(profile.total - per_request(others, profile.times, profile.used), 0.0, None)
    return replace(
        profile,
        stages=(*profile.stages, UNATTRIBUTED),
        times={**profile.times, UNATTRIBUTED: rest},
    )


def _fits_now(
    budget: m.Budget,
    allocations: Sequence[Allocation],
    old: dict[str, dict[str, float]],
    measured: dict[str, dict[str, float]],
    gated: Sequence[str],
) -> bool:
    within = all(measured[s][p] <= old[s][p] for s in measured if s in old for p in gated)
    fits = all(a.old_ms <= a.target_ms + 1e-9 for a in allocations)
    return within and fits and all(a.speedup_needed_ms == 0 for a in allocations)


def _settled(slices_fit: bool, budget: m.Budget, checks: Sequence[ObjectiveCheck]) -> bool | None:
    """fits_now by the one verdict rule: never true where a gated objective is a breach
    (False) or inconclusive (None, when nothing else fails)."""
    gated = {o.key for o in budget.objectives.gated()}
    verdicts = {c.verdict for c in checks if c.objective in gated}
    if not slices_fit or "breach" in verdicts:
        return False
    return None if "inconclusive" in verdicts else True


def _proposed(
    budget: m.Budget, allocations: Sequence[Allocation], measured: dict[str, dict[str, float]]
) -> m.Budget:
    new: dict[str, dict[str, float]] = {}
    for _, stage in budget.stages():
        given = stage.budget.given() if stage.budget is not None else {}
        for a in allocations:
            given[a.percentile] = a.slices[stage.name]
        fixed = {a.percentile for a in allocations}
        old = stage.budget.given() if stage.budget is not None else {}
        new[stage.name] = _ordered(given, fixed, measured.get(stage.name, {}), old)
    pipeline = [_rebuild(i, new) for i in budget.pipeline]
    return budget.model_copy(update={"pipeline": pipeline})


def _ordered(
    points: dict[str, float],
    fixed: set[str],
    measured: dict[str, float],
    old: dict[str, float] | None = None,
) -> dict[str, float]:
    # A non-gated point above a lower gated slice comes down to what the stage measures
    # there (never above the slice), so the slices stay p50 <= p95 <= p99. A slice left
    # as the file states it is kept to the digit (no change to report).
    kept = old or {}
    out = {
        p: kept[p]
        if p in kept and math.isclose(points[p], kept[p], rel_tol=1e-6)
        else _tenth(points[p], cut=p in fixed and points[p] < measured.get(p, -math.inf))
        for p in PERCENTILES
        if p in points
    }
    ceiling = float("inf")
    for p in reversed(PERCENTILES):
        if p not in out:
            continue
        if p not in fixed and out[p] > ceiling:
            out[p] = min(_tenth_up(measured.get(p, ceiling)), ceiling)
        elif out[p] > ceiling:
            out[p] = ceiling  # two gated slices crossed by rounding: the lower one gives way
        ceiling = min(ceiling, out[p])
    return {p: max(v, 0.1) for p, v in out.items()}


def _tenth(v: float, *, cut: bool) -> float:
    # A gated slice cut below what its stage measures rounds down: the allocation is the
    # most the slices may add to, and thirty cuts rounded up planned 0.1 ms over the SLO
    # (Nezha 2023-01-29 14:51). Any other slice rounds up, never under its measurement.
    if cut and math.isfinite(v):
        return math.floor(round(v * 10, 6)) / 10
    return _tenth_up(v)


def _tenth_up(v: float) -> float:
    # Up to the tenth of a ms, never below: `init` writes slices to seven digits (448.2486),
    # and rounding to the nearest tenth proposed 448.2, under what the stage measures.
    if not math.isfinite(v):
        return v
    return math.ceil(round(v * 10, 6)) / 10


def _rebuild(item: Any, new: dict[str, dict[str, float]]) -> Any:
    if isinstance(item, m.Stage):
        return item.model_copy(update={"budget": m.Percentiles(**new[item.name])})
    if isinstance(item, m.Parallel):
        return item.model_copy(update={"parallel": [_rebuild(i, new) for i in item.parallel]})
    return item.model_copy(update={"sequence": [_rebuild(i, new) for i in item.sequence]})


def _changes(
    budget: m.Budget,
    proposed: m.Budget,
    old: dict[str, dict[str, float]],
    measured: dict[str, dict[str, float]],
    allocations: Sequence[Allocation],
    passing: dict[str, str],
) -> tuple[Change, ...]:
    out: list[Change] = []
    for (_, before), (_, after) in zip(budget.stages(), proposed.stages(), strict=True):
        was = before.budget.given() if before.budget is not None else {}
        now = after.budget.given() if after.budget is not None else {}
        if was == now:
            continue
        why = reason(before.name, old, measured, allocations, passing)
        out.append(Change(before.name, was, now, why))
    return tuple(out)


def _options(
    budget: m.Budget,
    profile: Profile,
    catalog: dict[str, Fix],
    gated: Sequence[str],
    old: dict[str, dict[str, float]],
    allocations: Sequence[Allocation],
) -> list[Option]:
    before = composed(budget, profile, profile.times)
    out: list[Option] = []
    for fix, stages, rewrite in candidates(
        budget, profile, catalog, _targets(profile, allocations)
    ):
        times = rewrite(profile.times)
        changed = {k: v for k, v in times.items() if v is not profile.times.get(k)}
        after = composed(budget, profile, times)
        saved, csaved = {}, {}
        for a in allocations:
            p = a.percentile
            olds = {s: v[p] for s, v in old.items()}
            saved[p] = a.measured_ms - additive(budget, times, p, olds)
            q = quantile_of(p)
            csaved[p] = float(np.quantile(before, q) - np.quantile(after, q))
        if max([*saved.values(), *csaved.values()], default=0.0) < MIN_SAVING_MS:
            continue
        out.append(
            Option(
                fix.name,
                stages,
                _kind(fix),
                fix.hours,
                fix.risk,
                fix.reversible,
                fix.counterfactual,
                saved,
                csaved,
                changed,
            )
        )
    out.sort(key=lambda o: -o.score)
    return out


def _targets(profile: Profile, allocations: Sequence[Allocation]) -> dict[str, float]:
    # The scale each over-budget stage needs to meet its proposed slice at every gated
    # percentile (the strictest one wins).
    out: dict[str, float] = {}
    for a in allocations:
        for stage, slice_ms in a.slices.items():
            if stage not in profile.times:
                continue
            got = profile.quantile(stage, a.percentile)
            if got > slice_ms > 0:
                out[stage] = min(out.get(stage, 1.0), slice_ms / got)
    return out


def _kind(fix: Fix) -> str:
    return "structural" if fix.kind in {"structure", "degrade"} else "speed_up"


def _apply(options: Sequence[Option], times: Times) -> Times:
    # Options in one set touch distinct stages, so their rewrites merge.
    out = dict(times)
    for o in options:
        out.update(o.changed)
    return out


def _distinct(options: Sequence[Option]) -> bool:
    return len({s for o in options for s in o.stages}) == sum(len(o.stages) for o in options)


def _gaps_left(
    budget: m.Budget,
    profile: Profile,
    chosen: Sequence[Option],
    allocations: Sequence[Allocation],
    old: dict[str, dict[str, float]],
) -> dict[str, float]:
    times = _apply(chosen, profile.times)
    out: dict[str, float] = {}
    for a in allocations:
        olds = {s: v[a.percentile] for s, v in old.items()}
        out[a.percentile] = additive(budget, times, a.percentile, olds) - a.target_ms
    return out


def _closes(
    budget: m.Budget,
    profile: Profile,
    chosen: Sequence[Option],
    allocations: Sequence[Allocation],
    old: dict[str, dict[str, float]],
) -> bool:
    return all(v <= 1e-9 for v in _gaps_left(budget, profile, chosen, allocations, old).values())


def _smallest_set(
    budget: m.Budget,
    profile: Profile,
    options: Sequence[Option],
    allocations: Sequence[Allocation],
    old: dict[str, dict[str, float]],
) -> tuple[Option, ...]:
    """The fewest options (then the fewest hours) that close every gated gap."""
    if all(a.speedup_needed_ms <= 0 for a in allocations) or not options:
        return ()
    pool = list(options[:8])
    best: tuple[Option, ...] = ()
    best_left = float("inf")
    for size in range(1, min(MAX_SET, len(pool)) + 1):
        # One counterfactual per set: what it leaves of each gated gap.
        # Options hold dicts (unhashable): pair each set with its gaps in a list.
        gaps = [
            (c, list(_gaps_left(budget, profile, c, allocations, old).values()))
            for c in itertools.combinations(pool, size)
            if _distinct(c)
        ]
        closing = [c for c, g in gaps if all(v <= 1e-9 for v in g)]
        if closing:
            return min(closing, key=lambda c: sum(o.hours for o in c))
        for c, g in gaps:
            rest = sum(max(v, 0.0) for v in g)
            if rest < best_left:
                best, best_left = c, rest
    # No set closes the gap: what is chosen is the best try, and an option that saves
    # nothing on the log's own requests (the slow ones never call its stage) is no part
    # of it, whatever it takes off the slices' sum.
    useful = tuple(o for o in best if any(v > 0 for v in o.composed_saved_ms.values()))
    return useful or best


def _priced(o: Option, chosen: bool) -> PricedOption:
    facts = {f.name: getattr(o, f.name) for f in fields(OptionFacts)}
    facts["saved_ms"] = {p: round(v, 3) for p, v in o.saved_ms.items()}
    facts["composed_saved_ms"] = {p: round(v, 3) for p, v in o.composed_saved_ms.items()}
    return PricedOption(**facts, score=round(o.score, 4), chosen=chosen)


def _compositions(
    budget: m.Budget, proposed: m.Budget, profile: Profile, chosen: Sequence[Option]
) -> tuple[Composition, ...]:
    q = {p: quantile_of(p) for p in PERCENTILES}
    before = composed(budget, profile, profile.times)
    after = composed(budget, profile, _apply(chosen, profile.times))
    measured = Composition(
        method="measured requests resampled whole (the log's own correlation between stages), "
        "after = with the chosen options applied",
        before={p: float(np.quantile(before, v)) for p, v in q.items()},
        after={p: float(np.quantile(after, v)) for p, v in q.items()},
    )
    old_c, new_c = compose(budget), compose(proposed)
    slices = Composition(
        method=f"{_method_words(old_c.method)} (before = current budget, after = proposed)",
        before={p: float(old_c.percentiles[p]) for p in PERCENTILES},
        after={p: float(new_c.percentiles[p]) for p in PERCENTILES},
    )
    return (measured, slices)


def _notes(
    budget: m.Budget, profile: Profile, sliced: Sequence[str], gated: Sequence[str]
) -> tuple[str, ...]:
    names = {s.name for _, s in budget.stages()}
    out = [f"figures from {profile.how()}"]
    thin = [p for p in sliced if p not in gated]
    if thin:
        out.append(
            f"{', '.join(thin)}: {profile.used:,} requests do not settle it (a pass needs "
            f"{min_rows(thin[-1]):,}, a breach the requests over the target to prove it): "
            "inconclusive, as the audit says, so no slice is cut for it"
        )
    elif not gated:
        out.append("no gated end-to-end objective at p50, p95 or p99: no slice is re-budgeted")
    other = [
        o for o in budget.objectives.gated() if o.metric == "e2e" and o.percentile not in sliced
    ]
    if other:
        out.append(
            "stage slices hold p50, p95 and p99: "
            + ", ".join(o.key for o in other)
            + " checked below, not re-sliced"
        )
    missing = sorted(names - set(profile.stages))
    if missing:
        out.append(f"not in the log, slices kept as written: {', '.join(missing)}")
    extra = sorted(set(profile.stages) - names)
    if extra:
        out.append(f"in the log but not in the budget (not re-budgeted): {', '.join(extra)}")
    if profile.errors:
        out.append(f"{profile.errors:,} error requests left out of every figure")
    return tuple(out)


def _method_words(method: str) -> str:
    """A composition's method in words where its name is an identifier."""

    if method == MEASURED_METHOD:
        return "the log's end-to-end figures scaled by the slices' sum (composition.measured)"
    return f"{method} over the slices"
