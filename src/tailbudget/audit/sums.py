"""The slow-vs-fast pass: one grouped aggregate of plain sums, keyed by (slow/fast/other,
cold/warm).

Plain sums are several times cheaper on a columnar engine than many filtered or
covariance aggregates, and they combine exactly across groups: slow/fast means,
cold/warm means and every (stage, covariate) covariance come out of the same pass.
Stage columns are never null in a canonical log (readers fill a missing stage with 0);
a null covariate drops the row from that covariate's fits (`y + x*0` is null then).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ibis

from tailbudget.audit.context import TOTAL, Ctx, fnum
from tailbudget.audit.shape import Covariate
from tailbudget.audit.shape import x as covariate

if TYPE_CHECKING:
    import ibis.expr.types as ir

OTHER, SLOW, FAST = 0, 1, 2


@dataclass(frozen=True)
class GroupSums:
    """Sums per (group, cold) present in the log; `names` and `covariates` index the keys.

    Keys: `n`, `s_total`; per stage j `sy{j}`; per covariate i `nx{i}`, `sx{i}`, `sxx{i}`
    and per (covariate i, stage j) `sxy{i}_{j}`, `syx{i}_{j}`, `syyx{i}_{j}`."""

    rows: tuple[dict[str, Any], ...]
    names: tuple[str, ...]
    covariates: tuple[Covariate, ...]

    def total(
        self,
        key: str,
        *,
        group: int | None = None,
        cold: bool | None = None,
        after: bool | None = None,
    ) -> float:
        """Sum of one figure over the rows of a group (SLOW, FAST, OTHER; None = all), a
        cold flag and a side of the event cut (None = both; a row without a timestamp is
        on neither side)."""
        return sum(fnum(r.get(key)) for r in self.rows if _selects(r, group, cold, after))

    def mean(self, key: str, *, group: int | None = None, cold: bool | None = None) -> float | None:
        """`key` summed over the selection divided by its row count (None when empty)."""
        n = self.total("n", group=group, cold=cold)
        return self.total(key, group=group, cold=cold) / n if n else None


def _selects(row: dict[str, Any], group: int | None, cold: bool | None, after: bool | None) -> bool:
    return (
        (group is None or int(row["_g"]) == group)
        and (cold is None or bool(row["_cold"]) is cold)
        and (after is None or row.get("_after") is after)
    )


def group_sums(
    ctx: Ctx,
    names: list[str],
    covs: list[Covariate],
    slow: ir.Value,
    fast: ir.Value,
    cold: ir.Value | None,
    after: ir.Value | None = None,
) -> GroupSums:
    """Run the pass: sums per (slow/fast/other, cold/warm) group, and per side of an
    event cut when `after` (true after it, null without a timestamp) is given."""
    t = ctx.t
    group = ibis.cases((slow, SLOW), (fast, FAST), else_=OTHER)
    is_cold = cold if cold is not None else ibis.literal(False)
    aggs: dict[str, ir.Value] = {"n": t.count(), "s_total": t[TOTAL].sum()}
    for j, name in enumerate(names):
        aggs[f"sy{j}"] = ctx.col(name).sum()
        if after is not None or any(c.complete for c in covs):
            aggs[f"syy{j}"] = (ctx.col(name) * ctx.col(name)).sum()
    for i, cov in enumerate(covs):
        xv = covariate(ctx, cov.name)
        aggs[f"nx{i}"] = xv.count()
        aggs[f"sx{i}"] = xv.sum()
        aggs[f"sxx{i}"] = (xv * xv).sum()
        for j, name in enumerate(names):
            y = ctx.col(name)
            aggs[f"sxy{i}_{j}"] = (xv * y).sum()
            if not cov.complete:
                y_x = y + xv * 0.0  # null where the covariate is null
                aggs[f"syx{i}_{j}"] = y_x.sum()
                aggs[f"syyx{i}_{j}"] = (y_x * y_x).sum()
    keys = {"_g": group, "_cold": is_cold} | ({} if after is None else {"_after": after})
    expr = t.group_by(**keys).aggregate(**aggs)
    rows = ctx.run_frame("slow vs fast", expr)
    for r in rows:
        # A covariate every request has selects every row: its y sums are the stage's own.
        for i, cov in enumerate(covs):
            for j in range(len(names)) if cov.complete else ():
                r[f"syx{i}_{j}"], r[f"syyx{i}_{j}"] = r[f"sy{j}"], r[f"syy{j}"]
    return GroupSums(tuple(rows), tuple(names), tuple(covs))
