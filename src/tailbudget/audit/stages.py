"""Step 2: per-stage percentiles, share of p99, the `unattributed` slice and overlap detection.

`unattributed` = total - sum(stages): time no stage covers (an uninstrumented hop).
When stages nest or overlap (a parent RPC contains its children, parallel calls run at
once) their sum exceeds the total; above NESTED_SHARE of requests the audit says so and
does not invent an `unattributed` stage from a negative remainder.
"""

from __future__ import annotations

from typing import Any

from tailbudget.audit.context import (
    NESTED_SHARE,
    OVERLAP_TOLERANCE_MS,
    TOTAL,
    UNATTRIBUTED,
    Ctx,
    fnum,
)
from tailbudget.audit.report import Overlap, StageRow
from tailbudget.audit.snapshot import at

STAGE_QS: list[float] = [i / 100 for i in range(1, 100)] + [0.995, 0.999]
"""Fine grid per stage: percentiles for the table, and the quantile function for the gap test."""


def candidates(ctx: Ctx) -> list[str]:
    """Stages measured in pass A: the log's stages, plus unattributed when a total exists."""
    names = list(ctx.log.stages)
    if names and not ctx.log.total_derived:
        names.append(UNATTRIBUTED)
    return names


def exprs(ctx: Ctx) -> dict[str, Any]:
    """Aggregates of pass A for the stage table and overlap share."""
    out: dict[str, Any] = {}
    for i, name in enumerate(candidates(ctx)):
        c = ctx.col(name)
        out[f"s{i}_q"] = c.quantile(STAGE_QS)
        out[f"s{i}_mean"] = c.mean()
    if ctx.log.stages:
        over = ctx.stage_sum() > ctx.t[TOTAL] + OVERLAP_TOLERANCE_MS
        out["overlap"] = over.cast("float64").mean()
    return out


def build(
    ctx: Ctx, row: dict[str, Any], total_p99: float
) -> tuple[list[StageRow], Overlap, dict[str, list[float]]]:
    """Stage rows (unattributed dropped when stages nest), overlap, and each stage's grid."""
    share = fnum(row.get("overlap"))
    overlap = Overlap(share=share, nested=share > NESTED_SHARE)
    rows: list[StageRow] = []
    grids: dict[str, list[float]] = {}
    for i, name in enumerate(candidates(ctx)):
        if name == UNATTRIBUTED and overlap.nested:
            ctx.notes.append(
                f"stages add up to more than the total in {share:.1%} of requests (nested or "
                "parallel calls): no `unattributed` slice is derived from the remainder"
            )
            continue
        grid = [fnum(v) for v in (row[f"s{i}_q"] or [])]
        if not grid:
            continue
        grids[name] = grid
        p99 = at(STAGE_QS, grid, 0.99)
        rows.append(
            StageRow(
                name=name,
                p50=at(STAGE_QS, grid, 0.5),
                p95=at(STAGE_QS, grid, 0.95),
                p99=p99,
                mean=fnum(row[f"s{i}_mean"]),
                share_of_p99=p99 / total_p99 if total_p99 > 0 else 0.0,
                budget=ctx.config.stage_budgets.get(name),
            )
        )
    return rows, overlap, grids
