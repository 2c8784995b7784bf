"""Speed-ups and structural changes a re-budget can propose, each measured on the log.

Every option rewrites the log's own requests (whole requests, so stages keep their
correlation) and is scored twice: on the budget's additive figure (the stages' measured
percentiles through the budget's arithmetic, what `plan` gates) and on the composed
end-to-end figure (each request's stages composed as the pipeline runs them, then the
percentile). Hours, risk and reversibility come from the audit's fix catalog, so a
budget file's `fixes:` block reprices them.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tailbudget._units import quantile_of
from tailbudget.audit.fixes import Fix
from tailbudget.audit.hypotheses import cache_gap
from tailbudget.audit.nesting import find_arrays
from tailbudget.audit.profile import FloatArray, Profile
from tailbudget.audit.stages import STAGE_QS
from tailbudget.budget import model as m
from tailbudget.budget.plan_llm import TTFT_STAGE
from tailbudget.budgeting.allocate import tree_value

Times = dict[str, FloatArray]
Rewrite = Callable[[Times], Times]

MODEL_STAGE = re.compile(r"(infer|model|llm|decode|generat|predict|ttft|prefill|score|rank)", re.I)
"""Stage names that run a model, where a smaller or quantized model is an option."""
SMALLER_MODEL_FACTOR = 0.6
"""A smaller or quantized model's time as a share of today's (a stated default)."""
INDEPENDENT_RHO = 0.3
"""Two stages count as independent when their rank correlation is below this."""


@dataclass(frozen=True)
class OptionFacts:
    """One priced change and what it saves, as measured on the log."""

    fix: str
    stages: tuple[str, ...]
    kind: str
    """speed_up (a stage gets faster) or structural (the pipeline changes)."""
    hours: float
    risk: str
    reversible: bool
    counterfactual: str
    saved_ms: dict[str, float]
    """Gated percentile -> ms the budget's additive figure drops by."""
    composed_saved_ms: dict[str, float]
    """Gated percentile -> ms the composed end-to-end figure drops by."""


@dataclass(frozen=True)
class Option(OptionFacts):
    """An option with the per-request times it rewrites (for combining options)."""

    changed: Times
    """The rewritten stages' per-request times (only those the option changes)."""

    @property
    def score(self) -> float:
        """Additive ms saved at the first gated percentile per engineering hour."""
        first = next(iter(self.saved_ms.values()), 0.0)
        return first / self.hours if self.hours > 0 else 0.0


def composed(budget: m.Budget, profile: Profile, times: Times) -> FloatArray:
    """Each request's end-to-end time as the pipeline runs its stages, plus its residual."""
    base = per_request(budget.pipeline, times, profile.used)
    before = per_request(budget.pipeline, profile.times, profile.used)
    residual = np.clip(profile.total - before, 0.0, None)
    out: FloatArray = base + residual
    return out


def per_request(items: Sequence[object], times: Times, n: int) -> FloatArray:
    acc = np.zeros(n)
    for item in items:
        acc = acc + _item(item, times, n)
    return acc


def _item(item: object, times: Times, n: int) -> FloatArray:
    if isinstance(item, m.Stage):
        found: FloatArray = times.get(item.name, np.zeros(n))
        return found
    if isinstance(item, m.Parallel):
        slowest: FloatArray = np.max([_item(i, times, n) for i in item.parallel], axis=0)
        return slowest
    assert isinstance(item, m.Sequence)
    return per_request(item.sequence, times, n)


def additive(budget: m.Budget, times: Times, percentile: str, old: dict[str, float]) -> float:
    """The budget arithmetic over stage percentiles on `times` (unmeasured: the old slice)."""
    q = quantile_of(percentile)

    def leaf(s: m.Stage) -> float:
        if s.name in times:
            return float(np.quantile(times[s.name], q))
        return old[s.name]

    return tree_value(budget.pipeline, leaf)


def candidates(
    budget: m.Budget,
    profile: Profile,
    catalog: dict[str, Fix],
    targets: dict[str, float] | None = None,
) -> list[tuple[Fix, tuple[str, ...], Rewrite]]:
    """Every change worth measuring: per-stage speed-ups, then parallelizing neighbours.

    `targets` maps a stage still over its proposed slice to the factor its time must be
    scaled by to meet it: that stage also gets a plain `speed_up_stage` target.
    """
    out: list[tuple[Fix, tuple[str, ...], Rewrite]] = []
    for _, stage in budget.stages():
        name = stage.name
        if name not in profile.times:
            continue
        if targets and name in targets:
            out.append((catalog["speed_up_stage"], (name,), _scale(name, targets[name])))
        values = profile.times[name]
        p50, p90, p95 = (float(np.quantile(values, q)) for q in (0.5, 0.9, 0.95))
        out.append((catalog["hedge_requests"], (name,), _cap(name, p95 + p50)))
        # Caching only where the audit's cache-miss rule sees a hit mode and a miss mode.
        gap = cache_gap([float(v) for v in np.quantile(values, STAGE_QS)])
        if gap is not None:
            out.append((catalog["warm_cache"], (name,), _hit_level(name, gap[1])))
        if stage.optional:
            out.append((catalog["degrade_stage"], (name,), _cap(name, p90)))
        if stage.llm is not None or MODEL_STAGE.search(name):
            out.append((catalog["smaller_model"], (name,), _scale(name, SMALLER_MODEL_FACTOR)))
    for a, b in independent_neighbours(budget, profile):
        out.append((catalog["parallelize_stages"], (a, b), _parallel(a, b)))
    return out


def independent_neighbours(budget: m.Budget, profile: Profile) -> list[tuple[str, str]]:
    """Adjacent top-level stages in sequence whose times are nearly uncorrelated."""
    pairs: list[tuple[str, str]] = []
    items = budget.pipeline
    for left, right in itertools.pairwise(items):
        if not (isinstance(left, m.Stage) and isinstance(right, m.Stage)):
            continue
        a, b = left.name, right.name
        if _model_step(left) or _model_step(right):
            continue  # a model reads what came before it and feeds what follows
        if _nested_pair(budget, profile, a, b):
            continue  # a call cannot run beside the caller whose time holds it
        if (
            a in profile.times
            and b in profile.times
            and abs(rank_corr(profile, a, b)) < INDEPENDENT_RHO
        ):
            pairs.append((a, b))
    return pairs


def _nested_pair(budget: m.Budget, profile: Profile, a: str, b: str) -> bool:
    """One runs inside the other: by the budget's `calls:`, or by the audit's nesting rule
    on the log (E-Shopper's gateway and a controller it calls, sliced side by side)."""
    if b in budget.calls_of(a) or a in budget.calls_of(b):
        return True
    if a not in profile.times or b not in profile.times:
        return False
    return bool(find_arrays({a: profile.times[a], b: profile.times[b]}))


def _model_step(stage: m.Stage) -> bool:
    """A stage that runs a model (an llm: block, or named so: ttft, decode, inference...).

    Its input is the output of the stages before it (features, retrieved context, the
    prompt) and its output is what the stages after it handle, and decode cannot start
    before the first token: running it beside a neighbour is never an option, however
    uncorrelated their times look.
    """
    return stage.llm is not None or stage.name == TTFT_STAGE or bool(MODEL_STAGE.search(stage.name))


def rank_corr(profile: Profile, a: str, b: str) -> float:
    """Spearman's rank correlation between two stages' per-request times."""
    x, y = profile.times[a], profile.times[b]
    if x.size < 3:
        return 0.0
    rx, ry = np.argsort(np.argsort(x)), np.argsort(np.argsort(y))
    c = np.corrcoef(rx, ry)[0, 1]
    return float(c) if np.isfinite(c) else 0.0


def _cap(stage: str, cap: float) -> Rewrite:
    def rewrite(times: Times) -> Times:
        return {**times, stage: np.minimum(times[stage], cap)}

    return rewrite


def _scale(stage: str, factor: float) -> Rewrite:
    def rewrite(times: Times) -> Times:
        return {**times, stage: times[stage] * factor}

    return rewrite


def _hit_level(stage: str, threshold: float) -> Rewrite:
    # Every miss (above the gap between the two modes) is served at the hit level: its rank
    # among the misses mapped onto the hits' quantiles (an upper bound: every miss a hit).
    def rewrite(times: Times) -> Times:
        values = times[stage]
        fast = np.sort(values[values <= threshold])
        if fast.size == 0:
            return times
        slow = values > threshold
        ranks = np.argsort(np.argsort(values[slow])) / max(int(slow.sum()) - 1, 1)
        new = values.copy()
        # Linear interpolation on the sorted fast half (np.quantile with one q per request
        # would select once per q).
        new[slow] = np.interp(ranks * (fast.size - 1), np.arange(fast.size), fast)
        return {**times, stage: new}

    return rewrite


def _parallel(a: str, b: str) -> Rewrite:
    # The pair runs at once: a carries the per-request max, b costs nothing more.
    def rewrite(times: Times) -> Times:
        both = np.maximum(times[a], times[b])
        return {**times, a: both, b: np.zeros_like(both)}

    return rewrite
