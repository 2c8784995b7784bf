"""Step 2: per-stage percentiles, share of p99, the `unattributed` slice and overlap detection.

`unattributed` = total - sum(stages): time no stage covers (a hop no stage times).
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
from tailbudget.audit.quantiles import Ask
from tailbudget.audit.report import Overlap, StageRow

STAGE_QS: list[float] = [round(0.025 * i, 3) for i in range(1, 40)] + [0.99]
"""Approximate quantile function per stage (a 2.5% grid), for the cache-gap test."""
EXACT_QS: list[float] = [0.5, 0.95, 0.99]


def candidates(ctx: Ctx) -> list[str]:
    """Stages measured in pass A: the log's stages, plus unattributed when a total exists."""
    names = list(ctx.log.stages)
    if names and not ctx.log.total_derived:
        names.append(UNATTRIBUTED)
    return names


def exprs(ctx: Ctx) -> dict[str, Any]:
    """Aggregates of the distributions pass for the stage table and overlap share (the
    stages' quantiles: `asks`)."""
    out: dict[str, Any] = {}
    for i, name in enumerate(candidates(ctx)):
        out[f"s{i}_mean"] = ctx.col(name).mean()
    if ctx.log.stages:
        over = ctx.stage_sum() > ctx.t[TOTAL] + OVERLAP_TOLERANCE_MS
        out["overlap"] = over.cast("float64").mean()
    return out


def asks(ctx: Ctx) -> list[Ask]:
    """Exact p50, p95 and p99 of every stage."""
    return [Ask(f"s{i}_q", ctx.col(n), tuple(EXACT_QS)) for i, n in enumerate(candidates(ctx))]


def sample_exprs(ctx: Ctx) -> dict[str, Any]:
    """Each stage's approximate quantile function, on the sample (for the cache-gap test)."""
    return {f"s{i}_g": ctx.col(n).approx_quantile(STAGE_QS) for i, n in enumerate(candidates(ctx))}


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
        exact = [fnum(v) for v in (row[f"s{i}_q"] or [])]
        if not exact:
            continue
        if name == UNATTRIBUTED and max(abs(v) for v in exact) < OVERLAP_TOLERANCE_MS:
            # The total is the sum of the stages (e.g. LLM benchmarks): nothing is outside them.
            continue
        grids[name] = [fnum(v) for v in (row[f"s{i}_g"] or [])]
        p50, p95, p99 = exact
        rows.append(
            StageRow(
                name=name,
                p50=p50,
                p95=p95,
                p99=p99,
                mean=fnum(row[f"s{i}_mean"]),
                share_of_p99=p99 / total_p99 if total_p99 > 0 else 0.0,
                budget=ctx.config.stage_budgets.get(name),
            )
        )
    return rows, overlap, grids
