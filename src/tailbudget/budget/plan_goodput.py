"""Plan's goodput: the share of requests the budget's distributions expect to meet every
per-request threshold, by the audit's definition of a good request.

Each thresholded metric is drawn from what the budget states: end to end from the
pipeline's composition, TTFT from the steps before the streamed LLM stage plus its
TTFT distribution (or the `ttft` stage that holds it), TPOT from the block's `tpot:`
distribution (or its single rate), ITL from the block's `longest_gap:` distribution
(each request's largest gap, as the audit checks an ITL threshold). The metrics are
drawn independently of each other (the budget states no dependence between them), which
the figure's method says. A metric the budget gives no distribution for is left out and
the share is then an upper bound, said so. A budget measured from a log whose requests
failed (`composition.measured.failed`) counts them as not good, as the audit does.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from tailbudget.budget import model as m
from tailbudget.budget.compose import Node, draws
from tailbudget.budget.distributions import Constant, Distribution, FloatArray, fit_stage
from tailbudget.budget.llm_spec import FLOOR_MS, Spread
from tailbudget.budget.plan_llm import before, streamed, ttft_holder
from tailbudget.budget.plan_objectives import node_of, ttft_distribution

SAMPLES = 200_000


class GoodputPlan(BaseModel):
    """The planned goodput share against the minimum."""

    model_config = ConfigDict(frozen=True)

    share: float
    """Metrics independent: the share when meeting one threshold says nothing of another."""
    share_high: float
    """Metrics moving together (the least of the per-metric shares): the upper bound. A
    log's goodput lies between the two when its metrics are positively dependent."""
    min: float | None
    thresholds: dict[str, float]
    fits: bool | None
    """True when even `share` meets the minimum, False when even `share_high` misses it;
    None when the minimum lies between them, or there is none."""
    method: str
    left_out: tuple[str, ...]
    """Thresholded metrics the plan cannot draw (the share is then an upper bound)."""


def plan_goodput(
    budget: m.Budget, fits: dict[str, Distribution], tree: Node, *, samples: int, seed: int
) -> GoodputPlan | None:
    """The planned goodput, None when the budget states no goodput objective."""
    objs = budget.objectives
    if objs.goodput is None:
        return None
    thresholds = objs.thresholds()
    n = min(samples, SAMPLES)
    ok = np.ones(n, dtype=bool)
    high = 1.0
    left_out: list[str] = []
    for i, (metric, ms) in enumerate(thresholds.items()):
        values = _draw(budget, fits, tree, metric, n, seed + 1 + i)
        if values is None:
            left_out.append(metric)
            continue
        meets = values <= ms
        high = min(high, float(meets.mean()))
        ok &= meets
    share = float(ok.mean())
    got = budget.composition.measured
    if got is not None and got.failed:
        # The log's failed requests are never good (the audit's denominator holds them).
        timed = got.requests / (got.requests + got.failed)
        share, high = share * timed, high * timed
    least = objs.goodput.min
    fits_min = None
    if least is not None and share >= least:
        fits_min = True
    elif least is not None and high < least:
        fits_min = False
    method = f"monte_carlo_{n}_metrics_independent_to_comonotone"
    if got is not None and got.failed:
        method += f"_less_{got.failed}_failed_of_{got.requests + got.failed}"
    if left_out:
        method += f"_upper_bound_without_{'_'.join(left_out)}"
    return GoodputPlan(
        share=share,
        share_high=high,
        min=least,
        thresholds=thresholds,
        fits=fits_min,
        method=method,
        left_out=tuple(left_out),
    )


def _draw(
    budget: m.Budget,
    fits: dict[str, Distribution],
    tree: Node,
    metric: str,
    n: int,
    seed: int,
) -> FloatArray | None:

    rho = budget.composition.correlation
    llm = streamed(budget)
    if metric == "e2e":
        sub: Node = tree
        overhead = budget.overhead_ms
    elif metric == "ttft" and llm is not None:
        stage, spec = llm
        items, _ = before(budget, stage)
        own = Constant(0.0) if ttft_holder(budget, stage) else ttft_distribution(spec)
        sub = ("seq", [*(node_of(fits, i) for i in items), ("stage", own)])
        overhead = budget.overhead_ms
    elif metric == "tpot" and llm is not None:
        sub = ("stage", _tpot(llm[1]))
        overhead = 0.0
    elif metric == "itl" and llm is not None and llm[1].longest_gap is not None:
        sub = ("stage", _fitted(llm[1].longest_gap))
        overhead = 0.0
    elif metric in fits:
        sub, overhead = ("stage", fits[metric]), 0.0
    else:
        return None
    return draws(sub, samples=n, seed=seed, correlation=rho, overhead_ms=overhead)


def _tpot(spec: m.LLMSpec) -> Distribution:
    if spec.tpot is None:
        return Constant(1000.0 / spec.tokens_per_s)
    return _fitted(spec.tpot)


def _fitted(spread: Spread) -> Distribution:
    points = {p: max(v, FLOOR_MS) for p, v in spread.given().items()}
    return fit_stage(points) if len(points) > 1 else Constant(next(iter(points.values())))
