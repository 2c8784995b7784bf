"""Composition of stage percentiles: the additive arithmetic and a Monte Carlo.

Percentiles do not add: the p99 of a sum of independent stages is below the
sum of their p99s, and the p99 of a parallel group's max is above the max of
their p99s. `additive` is the spreadsheet arithmetic the slices are written
against; `composed` is what the end-to-end distribution would be.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tailbudget._units import PERCENTILES, parse_percentile, quantile_of
from tailbudget.budget import model as m
from tailbudget.budget.distributions import Distribution, FloatArray, fit_stage

Node = tuple[str, Any]
"""('stage', Distribution) | ('seq', [Node]) | ('par', [Node])."""


@dataclass(frozen=True, slots=True)
class Composed:
    """End-to-end percentiles from the Monte Carlo."""

    percentiles: dict[str, float]
    samples: int
    method: str
    correlation: float


def stage_points(stage: m.Stage, gated: Sequence[str]) -> dict[str, float]:
    """The percentile points a stage is budgeted at.

    A stage with only an `llm:` block takes its computed total (TTFT + decode +
    tail, the tail allowance already inside) as its slice at every percentile,
    the gated ones included; its fitted distribution is then nearly constant.
    """
    if stage.budget is not None:
        return stage.budget.given()
    assert stage.llm is not None
    return dict.fromkeys(PERCENTILES, stage.llm.total_ms)


def stage_distribution(
    stage: m.Stage, gated: Sequence[str], *, default_sigma: float
) -> Distribution:
    """The fitted distribution of a stage (lognormal pieces through its percentiles)."""
    return fit_stage(stage_points(stage, gated), default_sigma=default_sigma)


def budget_tree(budget: m.Budget) -> tuple[Node, dict[str, Distribution]]:
    """The pipeline as a tree of fitted distributions, and the fits by stage name."""
    fits: dict[str, Distribution] = {}

    def build(item: Any) -> Node:
        if isinstance(item, m.Stage):
            dist = stage_distribution(
                item, budget.gated, default_sigma=budget.composition.default_sigma
            )
            fits[item.name] = dist
            return ("stage", dist)
        if isinstance(item, m.Parallel):
            return ("par", [build(i) for i in item.parallel])
        return ("seq", [build(i) for i in item.sequence])

    return ("seq", [build(i) for i in budget.pipeline]), fits


def additive(budget: m.Budget, *, fits: dict[str, Distribution] | None = None) -> dict[str, float]:
    """Additive arithmetic per percentile: sequences sum, parallel groups take the max, + overhead.

    A stage that does not give a percentile contributes its fitted quantile there.
    """
    if fits is None:
        _, fits = budget_tree(budget)

    def value(item: Any, p: str) -> float:
        if isinstance(item, m.Stage):
            points = stage_points(item, budget.gated)
            return points[p] if p in points else fits[item.name].ppf(quantile_of(p))
        if isinstance(item, m.Parallel):
            return max(value(i, p) for i in item.parallel)
        return sum(value(i, p) for i in item.sequence)

    return {
        p: sum(value(i, p) for i in budget.pipeline) + budget.overhead_ms
        for p in plan_percentiles(budget)
    }


def plan_percentiles(budget: m.Budget) -> tuple[str, ...]:
    """p50/p95/p99 plus any other end-to-end percentile the SLO states (p90, p99.9)."""
    names = dict.fromkeys([*PERCENTILES, *budget.objectives.e2e()])
    return tuple(sorted(names, key=quantile_of))


def monte_carlo(
    tree: Node,
    *,
    samples: int,
    seed: int = 0,
    correlation: float = 0.0,
    overhead_ms: float = 0.0,
    quantiles: Sequence[float] = (0.5, 0.95, 0.99),
    progress: Callable[[int], None] | None = None,
) -> FloatArray:
    """Quantiles of the end-to-end time of `tree`, estimated from `samples` draws.

    With correlation rho > 0, each stage's normal is sqrt(rho)*common + sqrt(1-rho)*own
    (a Gaussian copula with equal pairwise correlation); rho < 0 (stages that trade time
    against each other, as a benchmark's TTFT and decode under a fixed deadline do) down
    to -1/(k-1) for k stages, the most negative equal correlation k variables can have.
    """
    total = draws(
        tree,
        samples=samples,
        seed=seed,
        correlation=correlation,
        overhead_ms=overhead_ms,
        progress=progress,
    )
    return np.quantile(total, list(quantiles))


def draws(
    tree: Node,
    *,
    samples: int,
    seed: int = 0,
    correlation: float = 0.0,
    overhead_ms: float = 0.0,
    progress: Callable[[int], None] | None = None,
) -> FloatArray:
    """`samples` draws of the end-to-end time of `tree` (see `monte_carlo`)."""
    rng = np.random.default_rng(seed)
    common = rng.standard_normal(samples) if correlation > 0 else None
    own = float(np.sqrt(1.0 - max(correlation, 0.0)))
    shared = float(np.sqrt(max(correlation, 0.0)))
    against = _opposed(rng, count_stages(tree), samples, correlation) if correlation < 0 else None

    def draw(dist: Distribution) -> FloatArray:
        z = next(against) if against is not None else rng.standard_normal(samples)
        if common is not None:
            z *= own
            z += shared * common
        out = dist.from_normal(z)
        if progress is not None:
            progress(1)
        return out

    def run(node: Node) -> FloatArray:
        kind, body = node
        if kind == "stage":
            return draw(body)
        children = iter(body)
        acc = run(next(children))
        for child in children:
            x = run(child)
            if kind == "seq":
                acc += x
            else:
                np.maximum(acc, x, out=acc)
        return acc

    total = run(tree)
    if overhead_ms:
        total += overhead_ms
    return total


def _opposed(rng: np.random.Generator, k: int, samples: int, rho: float) -> Iterator[FloatArray]:
    """k standard normals with equal pairwise correlation rho < 0 (>= -1/(k-1)).

    z_i = a (e_i - mean e) + b c: deviations from the mean of k independent normals are
    negatively correlated (-1/(k-1)), a shared c lifts that to rho; a^2 = 1 - rho and
    b^2 = rho + (1 - rho) / k give unit variance and covariance rho.
    """
    a = float(np.sqrt(1.0 - rho))
    b = float(np.sqrt(max(rho + (1.0 - rho) / k, 0.0)))
    e = rng.standard_normal((k, samples))
    mean = e.mean(axis=0)
    shared = b * rng.standard_normal(samples)
    for i in range(k):
        z = e[i]
        z -= mean
        z *= a
        z += shared
        yield z


MEASURED_METHOD = "measured_requests_scaled"


def by_requests(budget: m.Budget, add: dict[str, float]) -> dict[str, float] | None:
    """End-to-end figures from the log's whole requests (`composition.measured`), or None.

    Each percentile is the slices' sum now times what the log's requests measured end to
    end against the slices' sum then: the log's own figures while the slices are as
    measured, and a share of any edit (requests that skip a stage do not feel its slice).
    None when the file records no requests, or not at every percentile the plan needs."""
    got = budget.composition.measured
    if got is None:
        return None
    e2e = {parse_percentile(k)[0]: v for k, v in got.e2e.items()}
    then = {parse_percentile(k)[0]: v for k, v in got.slices.items()}
    if any(p not in e2e for p in add):
        return None
    return {p: add[p] * e2e[p] / then[p] for p in add}


def compose(
    budget: m.Budget,
    *,
    samples: int | None = None,
    seed: int | None = None,
    tree: Node | None = None,
) -> Composed:
    """Monte Carlo composition of the budget's fitted stage distributions; a budget that
    records its log's whole requests (`composition.measured`) composes from those."""
    measured = by_requests(budget, additive(budget))
    if measured is not None:
        got = budget.composition.measured
        assert got is not None
        return Composed(
            percentiles=measured,
            samples=got.requests,
            method=MEASURED_METHOD,
            correlation=budget.composition.correlation,
        )
    if tree is None:
        tree, _ = budget_tree(budget)
    n = samples if samples is not None else budget.composition.samples
    s = seed if seed is not None else budget.composition.seed
    rho = budget.composition.correlation
    qs = monte_carlo(
        tree,
        samples=n,
        seed=s,
        correlation=rho,
        overhead_ms=budget.overhead_ms,
        quantiles=[quantile_of(p) for p in plan_percentiles(budget)],
    )
    dependence = "independent" if rho == 0 else f"copula_rho_{rho:g}"
    method = f"monte_carlo_spliced_lognormal_{dependence}"
    return Composed(
        percentiles={p: float(v) for p, v in zip(plan_percentiles(budget), qs, strict=True)},
        samples=n,
        method=method,
        correlation=rho,
    )


def count_stages(tree: Node) -> int:
    """Number of leaf stages in a tree (for progress bars)."""
    kind, body = tree
    return 1 if kind == "stage" else sum(count_stages(c) for c in body)
