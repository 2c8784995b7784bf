"""Canary gate on objectives: this log (the canary) against `--baseline`, per objective.

For each objective: the change of its percentile with a 95% bootstrap interval, and a
one-sided Mann-Whitney U p-value (is the canary's metric stochastically larger? the judge
Kayenta uses). Goodput: the difference of the two shares with Newcombe's interval (from
the two Wilson score intervals). A gated objective regresses when the change is above
zero beyond noise: its interval lies above 0 and p < ALPHA. A percentile needs enough
points on both sides: below MIN_REQUESTS (requests; gaps for ITL) the verdict is
`inconclusive`, never a pass, unless the points prove a regression.

A regression the points prove is one however few they are (the one verdict rule,
`tailbudget._verdict`, as every objective is judged): the baseline's percentile has a
distribution-free upper bound at 97.5% (an order statistic of its points), and the
canary regresses when its count over that bound rejects "at most 1 - q over it" by the
exact one-sided binomial test at 97.5%; the two together hold at 95%. A minimum sample
makes the pass side careful; it never blinds the regression side.

Point estimates are exact percentiles on the engine (the objectives pass); intervals and
p-values come from a random sample of at most SAMPLE values of each log.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from tailbudget._verdict import judge as verdict_of
from tailbudget.audit import objectives as ob
from tailbudget.audit import quantiles
from tailbudget.audit.context import Ctx, fnum, to_arrow
from tailbudget.audit.report import (
    Canary,
    CanaryVerdict,
    GoodputChange,
    ObjectiveChange,
    ObjectiveRow,
)
from tailbudget.budget.objectives import parse_percentile
from tailbudget.errors import TailbudgetError
from tailbudget.logs.table import LogTable

__all__ = ["ALPHA", "MIN_REQUESTS", "goodput_change", "judge", "proves_regression"]

MIN_REQUESTS = 1000
"""Fewer points than this on either side: the verdict is inconclusive."""
ALPHA = 0.05
SIDE_LEVEL = 0.975
"""Each of the two steps of a proved regression (the baseline's bound, the canary's
count over it) holds at this level, so the two together hold at 95%."""
SAMPLE = 20_000
BOOTSTRAP = 400
_Z = 1.959963984540054


def _values(ctx: Ctx, metric: str, tokens: int | None) -> tuple[np.ndarray, int]:
    """A sample of the metric's per-request values (gaps for ITL) and their full count."""
    t = ctx.t
    if metric == "itl" and ob.ITL not in t.columns:
        return np.empty(0), 0
    if metric == "itl":
        gaps = t.select(v=t[ob.ITL].unnest())
    else:
        value = ob.metric_value(ctx, metric, tokens)
        if value is None:
            return np.empty(0), 0
        gaps = t.select(v=value)
    gaps = gaps.filter(gaps.v.notnull())
    n = int(fnum(to_arrow(ctx.log, gaps.aggregate(n=gaps.v.count())).column("n")[0].as_py()))
    expr = gaps
    if n > SAMPLE:
        expr = gaps.sample(min(1.0, 1.5 * SAMPLE / n), seed=ctx.config.seed).limit(SAMPLE)
    col = to_arrow(ctx.log, expr.select("v")).column("v")
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=float), n


def _change(
    obj: ObjectiveRow, before: float | None, a: np.ndarray, b: np.ndarray, seed: int
) -> tuple[float | None, float | None, float | None]:
    """(change, ci_low, ci_high): exact change, bootstrap spread centred on it."""
    if obj.measured_ms is None or before is None or not a.size or not b.size:
        return None, None, None
    q = parse_percentile(obj.percentile)[1]
    change = obj.measured_ms - before
    rng = np.random.default_rng(seed)
    boot = np.empty(BOOTSTRAP)
    for i in range(BOOTSTRAP):
        ra = rng.choice(a, size=a.size, replace=True)
        rb = rng.choice(b, size=b.size, replace=True)
        boot[i] = np.quantile(ra, q) - np.quantile(rb, q)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    centre = float(np.quantile(a, q) - np.quantile(b, q))
    return change, change + float(lo) - centre, change + float(hi) - centre


def _p_value(a: np.ndarray, b: np.ndarray) -> float | None:
    if not a.size or not b.size:
        return None
    # A start-up guard: scipy loads on first use, not with this module.
    from scipy.stats import mannwhitneyu

    return float(mannwhitneyu(a, b, alternative="greater").pvalue)


def _upper_bound(b: np.ndarray, q: float, level: float) -> float | None:
    """A distribution-free upper confidence bound (at `level`) on the q-quantile of what
    `b` samples: its j-th smallest value with P[Binomial(m, q) < j] >= level; None when
    `b` is too short to bound it."""
    # A start-up guard: scipy loads on first use, not with this module.
    from scipy.stats import binom

    m = b.size
    if not m:
        return None
    j = int(binom.ppf(level, m, q)) + 1
    return float(np.partition(b, j - 1)[j - 1]) if j <= m else None


def proves_regression(a: np.ndarray, b: np.ndarray, percentile: str) -> bool:
    """True when the canary's points `a` prove its `percentile` above the baseline's `b`
    (see the module): the one verdict rule against the baseline's upper bound."""
    q = parse_percentile(percentile)[1]
    bound = _upper_bound(b, q, SIDE_LEVEL)
    if bound is None or not a.size:
        return False
    over = int((a > bound).sum())
    figure = float(np.quantile(a, q))
    got = verdict_of(percentile, bound, figure, a.size, over, level=SIDE_LEVEL)
    return got.verdict == "breach"


def _verdict(
    n_a: int,
    n_b: int,
    change: float | None,
    lo: float | None,
    hi: float | None,
    p: float | None,
    proved: bool = False,
) -> CanaryVerdict:
    if proved:
        return "regression"
    if min(n_a, n_b) < MIN_REQUESTS or change is None or lo is None or hi is None:
        return "inconclusive"
    if lo > 0 and p is not None and p < ALPHA:
        return "regression"
    if hi < 0:
        return "improvement"
    return "no_change"


def _wilson(k: float, n: float) -> tuple[float, float]:
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    den = 1 + _Z**2 / n
    mid = (p + _Z**2 / (2 * n)) / den
    half = _Z * math.sqrt(p * (1 - p) / n + _Z**2 / (4 * n * n)) / den
    return max(mid - half, 0.0), min(mid + half, 1.0)


def goodput_change(after: tuple[int, int], before: tuple[int, int]) -> GoodputChange:
    """Newcombe's interval for p_after - p_before (method 10, from Wilson intervals)."""
    (ka, na), (kb, nb) = after, before
    pa, pb = (ka / na if na else 0.0), (kb / nb if nb else 0.0)
    la, ua = _wilson(ka, na)
    lb, ub = _wilson(kb, nb)
    d = pa - pb
    lo = d - math.sqrt((pa - la) ** 2 + (ub - pb) ** 2)
    hi = d + math.sqrt((ua - pa) ** 2 + (pb - lb) ** 2)
    verdict: CanaryVerdict
    if hi < 0 and na and nb:
        # proved however few the requests (Newcombe's interval keeps its coverage on
        # small counts); the minimum guards the pass side only
        verdict = "regression"
    elif min(na, nb) < MIN_REQUESTS:
        verdict = "inconclusive"
    elif lo > 0:
        verdict = "improvement"
    else:
        verdict = "no_change"
    return GoodputChange(
        before=pb,
        after=pa,
        change=d,
        ci_low=lo,
        ci_high=hi,
        n_before=nb,
        n_after=na,
        verdict=verdict,
    )


def judge(ctx: Ctx, rows: list[ObjectiveRow], good: int, baseline: LogTable) -> Canary:
    """Compare every objective and goodput of this log with the baseline log."""
    base = Ctx(baseline, ctx.config, parent=ctx)
    objs = ob.objectives_of(ctx)
    tokens = objs.e2e_output_tokens()
    brow = base.run_row("baseline objectives", {"n": base.t.count(), **ob.exprs(base)})
    brow |= quantiles.exact(base, "baseline percentiles", ob.asks(base))
    before_rows, _ = ob.build(base, brow)
    before = {(o.metric, o.percentile): o.measured_ms for o in before_rows}
    samples: dict[str, tuple[np.ndarray, int, np.ndarray, int]] = {}
    changes: list[ObjectiveChange] = []
    for obj in rows:
        if obj.metric not in samples:
            t_ = tokens if obj.metric == "e2e" else None
            samples[obj.metric] = (*_values(ctx, obj.metric, t_), *_values(base, obj.metric, t_))
        a, n_a, b, n_b = samples[obj.metric]
        if n_a and not n_b:
            _not_comparable(baseline, obj)
        prior = before.get((obj.metric, obj.percentile))
        change, lo, hi = _change(obj, prior, a, b, ctx.config.seed)
        p = _p_value(a, b)
        changes.append(
            ObjectiveChange(
                metric=obj.metric,
                percentile=obj.percentile,
                gated=obj.gated,
                before_ms=prior,
                after_ms=obj.measured_ms,
                change_ms=change,
                ci_low=lo,
                ci_high=hi,
                p_value=p,
                n_before=n_b,
                n_after=n_a,
                verdict=_verdict(
                    n_a, n_b, change, lo, hi, p, proves_regression(a, b, obj.percentile)
                ),
            )
        )
    n_after = int(fnum(ctx.run_row("count", {"n": ctx.t.count()})["n"])) + ctx.log.rows.failed
    n_before = int(fnum(brow["n"])) + baseline.rows.failed
    gp = goodput_change((good, n_after), (int(fnum(brow.get("o_good"))), n_before))
    return _summary(changes, gp if objs.thresholds() else None)


def _not_comparable(baseline: LogTable, obj: ObjectiveRow) -> None:
    """A baseline without the metric an objective reads is another kind of log (a
    microservice CSV beside a vLLM run): its goodput would count every request good on
    the missing metric, and no change could be measured. Refused, not compared."""
    raise TailbudgetError(
        f"{baseline.source}: the baseline has no {obj.metric} values, which the log's "
        f"{obj.metric}.{obj.percentile} objective compares; give a log of the same service "
        "with the same metrics (read with the same options) as the baseline",
        param="baseline",
    )


def _summary(changes: list[ObjectiveChange], gp: GoodputChange | None) -> Canary:
    gated = [c for c in changes if c.gated]
    regressed = [f"{c.metric}.{c.percentile}" for c in gated if c.verdict == "regression"]
    if gp is not None and gp.verdict == "regression":
        regressed.append("goodput")
    unsure = [f"{c.metric}.{c.percentile}" for c in gated if c.verdict == "inconclusive"]
    if gp is not None and gp.verdict == "inconclusive":
        unsure.append("goodput")
    if regressed:
        verdict: Literal["pass", "regression", "inconclusive"] = "regression"
        text = f"regression beyond noise in {', '.join(regressed)}"
    elif unsure:
        verdict = "inconclusive"
        text = (
            f"fewer than {MIN_REQUESTS:,} points on a side for "
            f"{', '.join(unsure)}, and they prove no regression; percentiles from so few "
            "points are too noisy to pass a gate"
        )
    else:
        verdict, text = "pass", "no gated objective regresses beyond noise"
    return Canary(
        objectives=changes,
        goodput=gp,
        min_requests=MIN_REQUESTS,
        alpha=ALPHA,
        verdict=verdict,
        text=text,
    )
