"""Step 5: cohorts. Per value of each cohort dimension: share of traffic, p99, delta from the
global p99, and share of the slow group. A cohort is flagged when its share of the slow
group is at least SLOW_RATIO times its share of traffic and at least MIN_SLOW_SHARE. A
cohort with fewer than MIN_SLOW_REQUESTS requests in the slow group is marked weak."""

from __future__ import annotations

from typing import Any

from tailbudget.audit.context import TOTAL, Ctx, fnum
from tailbudget.audit.quantiles import Ask, exact_grouped
from tailbudget.audit.report import CohortRow
from tailbudget.audit.weak import MIN_SLOW_REQUESTS

SLOW_RATIO = 2.0
MIN_SLOW_SHARE = 0.10
MIN_ROWS = 30
TOP_VALUES = 50
"""Dimensions with many values (user ids) keep their busiest values only."""


def build(ctx: Ctx, slow: Any, n_total: int, n_slow: int, global_p99: float) -> list[CohortRow]:
    """Per cohort dimension, one grouped pass for the counts, then the exact p99 of its
    busiest values."""
    t = ctx.t
    counts: dict[str, list[dict[str, Any]]] = {}
    asks = []
    for dim in ctx.log.cohorts:
        value = t[dim].cast("string").fill_null("(null)")
        expr = (
            t.group_by(value=value)
            .aggregate(n=t.count(), n_slow=slow.cast("int64").sum())
            .order_by(ibis_desc("n"))
            .limit(TOP_VALUES)
        )
        counts[dim] = ctx.run_frame(f"cohort {dim}", expr)
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


def ibis_desc(name: str) -> Any:
    """Descending sort key."""
    import ibis

    return ibis.desc(name)
