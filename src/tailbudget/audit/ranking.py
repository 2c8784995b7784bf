"""Step 8b: rank candidate fixes by p99 ms saved per engineering hour.

Each hypothesis's fix is estimated by rewriting the log (a counterfactual) and recomputing
the p99 on the engine, all counterfactuals in one aggregate pass:
  input_shape / fanout: stage lowered by slope * max(covariate - cap, 0) (the same for
    cap_input_size and cap_output_tokens: only what is capped differs)
  cold_start: total of cold-window requests scaled by warm mean / cold mean
  contention: stage lowered by the fitted per-minute excess above the median minute
  external_dependency: stage capped at its p95 + p50 (a hedged second call)
  cache_miss: stage values above the gap served at the hit level
  missing_slice, llm_prefill, llm_decode: the stage in slow requests (total >= slow
  threshold) set to its fast-group mean
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import ibis
import pyarrow as pa

from tailbudget.audit import cold_start
from tailbudget.audit.context import TOTAL, Ctx, fnum
from tailbudget.audit.evidence import Evidence
from tailbudget.audit.fixes import Fix, fix_for
from tailbudget.audit.hypotheses import load_fit
from tailbudget.audit.quantiles import Ask, exact
from tailbudget.audit.report import Hypothesis, RankedFix
from tailbudget.audit.shape import x as covariate

if TYPE_CHECKING:
    import ibis.expr.types as ir


def _contention_table(ctx: Ctx, ev: Evidence, hyps: list[Hypothesis]) -> ir.Table:
    """The log joined with each minute's fitted load excess (ms) per contention stage."""
    t = ctx.t
    minute = (t["ts"].epoch_seconds().cast("float64") / 60).floor().cast("int64")
    cols: dict[str, list[float]] = {}
    minutes = [int(r["minute"]) for r in ev.timeline]
    for i, h in enumerate(hyps):
        fit = load_fit(ev, h.stage or "")
        slope = fit[0] if fit else 0.0
        n_ref = h.figures.get("n_ref", 0.0)
        cols[f"_ex{i}"] = [max(slope * (float(r["n"]) - n_ref), 0.0) for r in ev.timeline]
    mem = ibis.memtable(pa.table({"_m": pa.array(minutes, pa.int64()), **cols}))
    return t.mutate(_minute=minute).left_join(mem, [ibis._["_minute"] == mem["_m"]])


def rank(
    ctx: Ctx,
    ev: Evidence,
    hyps: list[Hypothesis],
    cat: dict[str, Fix],
) -> list[RankedFix]:
    """One ranked fix per hypothesis with a stage, best ms-per-hour first."""
    todo = [
        (h, fix)
        for h in hyps
        if (h.stage is not None or h.kind == "cold_start")
        and (fix := fix_for(cat, h.kind, h.covariate)) is not None
    ]
    if not todo:
        return []
    cont = [h for h, _ in todo if h.kind == "contention"]
    base = ctx
    if cont and ev.timeline:
        base = Ctx(replace(ctx.log, table=_contention_table(ctx, ev, cont)), ctx.config, parent=ctx)
    t = base.t
    total = t[TOTAL]
    slow = total >= ev.tail.slow_range_ms[0]
    fast_mean = {d.stage: d.mean_fast for d in ev.tail.deltas}
    asks = []
    for i, (h, _) in enumerate(todo):
        cf = _counterfactual(base, ev, h, slow, fast_mean, ev.cold_total_means, cont)
        if cf is not None:
            asks.append(Ask(f"f{i}", cf, (0.99,)))
    if not asks:
        return []
    row = exact(base, "counterfactuals", asks)
    out = []
    for i, (h, fix) in enumerate(todo):
        if f"f{i}" not in row:
            continue
        after = fnum(row[f"f{i}"][0], ev.snapshot.p99)
        saved = max(ev.snapshot.p99 - after, 0.0)
        out.append(
            RankedFix(
                fix=fix.name,
                stage=h.stage,
                p99_saved_ms=saved,
                hours=fix.hours,
                risk=fix.risk,
                reversible=fix.reversible,
                score=saved / fix.hours,
                kind=h.kind,
                counterfactual=fix.counterfactual,
                p99_after_ms=after,
            )
        )
    out.sort(key=lambda r: r.score, reverse=True)
    return out


def _counterfactual(
    ctx: Ctx,
    ev: Evidence,
    h: Hypothesis,
    slow: ir.Value,
    fast_mean: dict[str, float],
    warm: tuple[float, float] | None,
    cont: list[Hypothesis],
) -> ir.Value | None:
    total = ctx.t[TOTAL]
    if h.kind == "cold_start":
        cold = cold_start.cold_mask(ctx)
        if cold is None or warm is None or warm[0] <= 0:
            return None
        factor = min(warm[1] / warm[0], 1.0)
        return ibis.ifelse(cold, total * factor, total)
    assert h.stage is not None
    c = ctx.col(h.stage).fill_null(0.0)
    if h.kind in ("input_shape", "fanout") and h.covariate is not None:
        over = ibis.greatest(covariate(ctx, h.covariate) - h.figures["cap"], 0.0)
        cut = (over * h.figures["slope"]).fill_null(0.0)
        return total - ibis.least(cut, ibis.greatest(c, 0.0))
    if h.kind == "contention":
        ex = ctx.t[f"_ex{cont.index(h)}"].fill_null(0.0)
        return total - ibis.least(ex, ibis.greatest(c, 0.0))
    if h.kind == "external_dependency":
        cap = h.figures["p95"] + h.figures["p50"]
        return total - ibis.greatest(c - cap, 0.0)
    if h.kind == "cache_miss":
        thr, hit = h.figures["threshold"], h.figures["hit_ms"]
        return ibis.ifelse(c >= thr, total - (c - hit), total)
    level = fast_mean.get(h.stage)
    if level is None:
        return None
    return ibis.ifelse(slow, total - ibis.greatest(c - level, 0.0), total)
