"""Pass B: one grouped aggregate of plain sums, keyed by (slow/fast/other, cold/warm).

Plain sums are several times cheaper on a columnar engine than many filtered or
covariance aggregates, and they combine exactly across groups: slow/fast means,
cold/warm means and every (stage, covariate) covariance come out of the same pass.
Stage columns are never null in a canonical log (readers fill a missing stage with 0);
a null covariate drops the row from that covariate's fits (`y + x*0` is null then).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ibis

from tailbudget.audit.context import TOTAL, Ctx, fnum
from tailbudget.audit.shape import Covariate
from tailbudget.audit.shape import x as covariate

OTHER, SLOW, FAST = 0, 1, 2


def run(
    ctx: Ctx, names: list[str], covs: list[Covariate], slow: Any, fast: Any, cold: Any | None
) -> list[dict[str, Any]]:
    """Rows of sums, one per (group, cold) present in the log."""
    t = ctx.t
    group = ibis.cases((slow, SLOW), (fast, FAST), else_=OTHER)
    is_cold = cold if cold is not None else ibis.literal(False)
    aggs: dict[str, Any] = {"n": t.count(), "s_total": t[TOTAL].sum()}
    for j, name in enumerate(names):
        aggs[f"sy{j}"] = ctx.col(name).sum()
    for i, cov in enumerate(covs):
        xv = covariate(ctx, cov.name)
        aggs[f"nx{i}"] = xv.count()
        aggs[f"sx{i}"] = xv.sum()
        aggs[f"sxx{i}"] = (xv * xv).sum()
        for j, name in enumerate(names):
            y = ctx.col(name)
            y_x = y + xv * 0.0  # null where the covariate is null
            aggs[f"sxy{i}_{j}"] = (xv * y).sum()
            aggs[f"syx{i}_{j}"] = y_x.sum()
            aggs[f"syyx{i}_{j}"] = (y_x * y_x).sum()
    expr = t.group_by(_g=group, _cold=is_cold).aggregate(**aggs)
    return ctx.run_frame("slow vs fast", expr)


def total(rows: list[dict[str, Any]], key: str, keep: Callable[[dict[str, Any]], bool]) -> float:
    """Sum of one figure over the groups `keep` selects."""
    return sum(fnum(r.get(key)) for r in rows if keep(r))


def group_is(g: int) -> Callable[[dict[str, Any]], bool]:
    """Selector of the slow, fast or other group."""
    return lambda r: int(r["_g"]) == g


def cold_is(flag: bool) -> Callable[[dict[str, Any]], bool]:
    """Selector of cold-window (or warm) requests."""
    return lambda r: bool(r["_cold"]) is flag


def everything(_: dict[str, Any]) -> bool:
    """Selector of every group."""
    return True
