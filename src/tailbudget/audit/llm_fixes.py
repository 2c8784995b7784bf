"""Counterfactuals of the fixes for breached LLM objectives: the objective's metric
rewritten per request on the engine, then the end-to-end total and goodput with it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import ibis

from tailbudget.audit import objectives as ob
from tailbudget.audit.context import TOTAL, Ctx, fnum
from tailbudget.audit.fixes import Fix
from tailbudget.audit.llm_fits import Fit
from tailbudget.audit.report import ObjectiveRow, RankedFix, Snapshot
from tailbudget.budget.objectives import parse_percentile

if TYPE_CHECKING:
    import ibis.expr.types as ir

__all__ = ["counterfactual"]


def _cap_model(fit: Fit, ref: Fit | None, xs: dict[str, ir.Value], timed: bool) -> ir.Value:
    """What the metric would be with no queue/contention, per request, from the fits."""
    base = ref if ref is not None else fit
    pred = ibis.literal(base.intercept)
    for name, col in xs.items():
        if name in base.coef and name != "busy":
            pred = pred + base.coef[name] * col.fill_null(base.means.get(name, 0.0))
    return pred + 2.0 * base.resid_sd


def counterfactual(
    ctx: Ctx,
    obj: ObjectiveRow,
    model: dict[str, ir.Value],
    fix: Fix,
    snap: Snapshot,
    goodput_before: float,
) -> RankedFix | None:
    """The fix rewritten into the log: the objective, e2e p99 and goodput after it."""
    if not model:
        return None
    metric = "ttft" if obj.metric == "ttft" else "tpot"
    value = ob.metric_value(ctx, metric)
    assert value is not None
    xs: dict[str, ir.Value] = {}
    if "input_tokens" in ctx.t.columns:
        xs["input_tokens"] = ctx.t["input_tokens"].cast("float64")
    if "output_tokens" in ctx.t.columns:
        xs["output_tokens"] = ctx.t["output_tokens"].cast("float64")
    if model["kind"] == "llm_prefill":
        cap = ctx.run_row("prompt p95", {"c": xs["input_tokens"].quantile(0.95)})["c"]
        slope = max(model["fit"].coef.get("input_tokens", 0.0), 0.0)
        after = value - slope * ibis.greatest(xs["input_tokens"] - fnum(cap), 0.0).fill_null(0.0)
    else:
        after = ibis.least(value, _cap_model(model["fit"], model["ref"], xs, True))
    saved = (value - after).fill_null(0.0)
    if metric == "tpot":
        k = xs.get("output_tokens")
        total_after = ctx.t[TOTAL] - (saved * (k - 1) if k is not None else saved)
    else:
        total_after = ctx.t[TOTAL] - saved
    thresholds = ob.objectives_of(ctx).thresholds()
    swap = {metric: ibis.ifelse(value.isnull(), value, after), "e2e": total_after}
    if metric == "tpot":
        swap["tpot"] = ibis.ifelse(ob._one_token(ctx), 0.0, swap["tpot"])
    row = ctx.run_row(
        f"counterfactual {fix.name}",
        {
            "q": after.quantile(parse_percentile(obj.percentile)[1]),
            "p99": total_after.quantile(0.99),
            "g": ctx.count(ob.good_mask(ctx, thresholds, swap=swap)),
            "n": ctx.t.count(),
        },
    )
    n = fnum(row["n"]) + float(ctx.log.rows.failed)
    before_ms = obj.measured_ms or 0.0
    after_ms = min(fnum(row["q"]), before_ms)
    p99_after = min(fnum(row["p99"]), snap.p99)
    return RankedFix(
        fix=fix.name,
        stage="ttft" if metric == "ttft" else "decode",
        p99_saved_ms=snap.p99 - p99_after,
        hours=fix.hours,
        risk=fix.risk,
        reversible=fix.reversible,
        score=(before_ms - after_ms) / fix.hours,
        kind=model["kind"],
        counterfactual=fix.counterfactual,
        p99_after_ms=p99_after,
        objective=f"{obj.metric}.{obj.percentile}",
        objective_before_ms=before_ms,
        objective_after_ms=after_ms,
        goodput_before=goodput_before,
        goodput_after=fnum(row["g"]) / n if n else 0.0,
    )
