"""Step 5: cohorts. Per value of each cohort dimension: share of traffic, p99, delta from the
global p99, and share of the slow group. A cohort is flagged when its share of the slow
group is at least SLOW_RATIO times its share of traffic and at least MIN_SLOW_SHARE. A
cohort with fewer than MIN_SLOW_REQUESTS requests in the slow group is marked weak."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import ibis

from tailbudget.audit.context import TOTAL, Ctx, fnum
from tailbudget.audit.quantile_brackets import MOST_COMBINATIONS
from tailbudget.audit.quantiles import Ask, exact_grouped
from tailbudget.audit.report import CohortRow
from tailbudget.audit.weak import MIN_SLOW_REQUESTS

if TYPE_CHECKING:
    import ibis.expr.types as ir

SLOW_RATIO = 2.0
MIN_SLOW_SHARE = 0.10
MIN_ROWS = 30
TOP_VALUES = 50
"""Dimensions with many values (user ids) keep their busiest values only."""


def build(
    ctx: Ctx, slow: ir.Value, n_total: int, n_slow: int, global_p99: float
) -> list[CohortRow]:
    """Per cohort dimension its counts (one grouped pass for all dimensions when their
    values combine into few groups, else one each), then the exact p99 of its busiest
    values."""
    t = ctx.t
    values = {dim: ctx.cohort(dim) for dim in ctx.log.cohorts}
    counts = _combined(ctx, values, slow) if _few_combinations(ctx) else None
    if counts is None:
        counts = {}
        for dim, value in values.items():
            expr = (
                t.group_by(value=value)
                .aggregate(n=t.count(), n_slow=ctx.count(slow))
                .order_by(ibis_desc("n"))
                .limit(TOP_VALUES)
            )
            counts[dim] = ctx.run_frame(f"cohort {dim}", expr)
    asks = []
    for dim, value in values.items():
        top = [str(r["value"]) for r in counts[dim]]
        asks.append(Ask(dim, t[TOTAL], (0.99,), where=value.isin(top), by=value))
    p99s = exact_grouped(ctx, "cohort p99", asks)
    out: list[CohortRow] = []
    for dim, rows in counts.items():
        for r in rows:
            n = int(r["n"])
            share = n / n_total if n_total else 0.0
            slow_share = fnum(r["n_slow"]) / n_slow if n_slow else 0.0
            p = fnum(p99s[dim].get(str(r["value"]), [None])[0])
            out.append(
                CohortRow(
                    dim=dim,
                    value=str(r["value"]),
                    n=n,
                    share=share,
                    p99=p,
                    delta_vs_global=p - global_p99,
                    share_of_slow=slow_share,
                    flag=n >= MIN_ROWS
                    and slow_share >= MIN_SLOW_SHARE
                    and slow_share >= SLOW_RATIO * share,
                    weak=fnum(r["n_slow"]) < MIN_SLOW_REQUESTS,
                )
            )
    return out


def _few_combinations(ctx: Ctx) -> bool:
    """Whether a large log's cohort values combine into at most MOST_COMBINATIONS groups
    in its row sample (a small log keeps one pass per dimension)."""
    sub = ctx.sampled()
    dims = list(ctx.log.cohorts)
    if sub is ctx or len(dims) < 2:
        return False
    combos = sub.t.select(*dims).distinct()
    rows = sub.run_frame("cohort combinations", combos.aggregate(n=combos.count()))
    return int(rows[0]["n"]) <= MOST_COMBINATIONS


def _combined(
    ctx: Ctx, values: dict[str, ir.Value], slow: ir.Value
) -> dict[str, list[dict[str, Any]]]:
    """Each dimension's busiest values with their counts, from one pass grouped by every
    combination of the dimensions' values (counts add up across combinations)."""
    t = ctx.t
    keys = {f"_c{j}": value for j, value in enumerate(values.values())}
    expr = t.group_by(**keys).aggregate(n=t.count(), n_slow=ctx.count(slow))
    rows = ctx.run_frame("cohorts", expr)
    out: dict[str, list[dict[str, Any]]] = {}
    for j, dim in enumerate(values):
        acc: dict[str, list[int]] = {}
        for r in rows:
            mine = acc.setdefault(str(r[f"_c{j}"]), [0, 0])
            mine[0] += int(r["n"])
            mine[1] += int(r["n_slow"] or 0)
        busiest = sorted(acc.items(), key=lambda kv: (-kv[1][0], kv[0]))[:TOP_VALUES]
        out[dim] = [{"value": v, "n": n, "n_slow": k} for v, (n, k) in busiest]
    return out


def ibis_desc(name: str) -> ir.Value:
    """Descending sort key."""

    return ibis.desc(name)
