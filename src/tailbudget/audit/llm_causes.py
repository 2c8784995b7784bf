"""What drives a breached TTFT or TPOT/ITL objective, with evidence in numbers, and the fixes.

TTFT = waiting for a slot (queueing) + prefill. Per request, TTFT is regressed (least
squares, from sums computed on the engine) on its input tokens (prefill) and, when the
log has start times, on the number of requests in flight at its arrival (queueing; from
start and end times, an event sweep on the engine). Without start times, a low-load log
given as `--baseline` is the reference: its prompt-length fit predicts what TTFT costs
with no queue, and the excess is waiting. Without either, only the input-length fit speaks.

TPOT = decode time per token; decode contention shows as TPOT rising with the number of
requests decoding at the same time (at the request's first token) or above a low-load
baseline's TPOT at similar lengths; long answers and long contexts show as slopes on
output and input tokens.

Each cause's fix is rewritten into the log (counterfactual) and measured on the breached
objective, on the end-to-end p99 and on goodput.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ibis
import numpy as np

from tailbudget.audit import objectives as ob
from tailbudget.audit.context import TOTAL, Ctx, fnum
from tailbudget.audit.fixes import Fix
from tailbudget.audit.report import Hypothesis, ObjectiveRow, RankedFix, Recommendation, Snapshot
from tailbudget.logs.table import LogTable

SHARE = 0.3
"""A component explains a breach when it holds at least this share of the mean."""
R2_MIN = 0.3
MIN_ROWS = 20


@dataclass(frozen=True)
class Fit:
    """Least-squares fit y = intercept + sum(coef[x] * x) with its R^2 and residual spread."""

    intercept: float
    coef: dict[str, float]
    r2: float
    resid_sd: float
    n: int
    means: dict[str, float]


@dataclass(frozen=True)
class Findings:
    """Causes of breached objectives, the fixes ranked on them, and what to say first."""

    hypotheses: list[Hypothesis]
    ranking: list[RankedFix]
    refusals: list[str]


def _sums(y: Any, xs: dict[str, Any]) -> dict[str, Any]:
    names = list(xs)
    out: dict[str, Any] = {"n": y.count(), "sy": y.sum(), "syy": (y * y).sum()}
    for i, a in enumerate(names):
        out[f"s_{a}"] = xs[a].sum()
        out[f"s_{a}_y"] = (xs[a] * y).sum()
        for b in names[i:]:
            out[f"s_{a}_{b}"] = (xs[a] * xs[b]).sum()
    return out


def _fit(row: dict[str, Any], names: list[str]) -> Fit | None:
    n = fnum(row.get("n"))
    if n < MIN_ROWS:
        return None
    my = fnum(row["sy"]) / n
    mx = np.array([fnum(row[f"s_{a}"]) / n for a in names])
    cov = np.empty((len(names), len(names)))
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            key = f"s_{a}_{b}" if i <= j else f"s_{b}_{a}"
            cov[i, j] = fnum(row[key]) / n - mx[i] * mx[j]
    cxy = np.array([fnum(row[f"s_{a}_y"]) / n - mx[i] * my for i, a in enumerate(names)])
    vy = fnum(row["syy"]) / n - my * my
    if vy <= 0:
        return None
    keep = [i for i in range(len(names)) if cov[i, i] > 1e-12]
    coef = np.zeros(len(names))
    if keep:
        sub = np.linalg.lstsq(cov[np.ix_(keep, keep)], cxy[keep], rcond=None)[0]
        coef[keep] = sub
    explained = float(coef @ cxy)
    r2 = min(max(explained / vy, 0.0), 1.0)
    return Fit(
        intercept=my - float(coef @ mx),
        coef={a: float(c) for a, c in zip(names, coef, strict=True)},
        r2=r2,
        resid_sd=float(np.sqrt(max(vy * (1.0 - r2), 0.0))),
        n=int(n),
        means={"y": my, **{a: float(m) for a, m in zip(names, mx, strict=True)}},
    )


def _input(ctx: Ctx) -> Any | None:
    return ctx.t["input_tokens"].cast("float64") if "input_tokens" in ctx.t.columns else None


def _start_ms(ctx: Ctx) -> Any:
    return (
        ctx.t["ts"].delta(ibis.timestamp("1970-01-01 00:00:00"), unit="millisecond").cast("float64")
    )


def _concurrent(ctx: Ctx, begin: Any, end: Any, values: dict[str, Any]) -> Any:
    """A table of `values` per request plus `busy`: how many other requests' [begin, end)
    intervals hold the request's `begin` (an event sweep: +1 at begin, -1 at end)."""
    t = ctx.t
    starts = t.select(at=begin, d=ibis.literal(1), k=ibis.literal(1), **values)
    nulls = {name: ibis.null(v.type()) for name, v in values.items()}
    ends = t.select(at=end, d=ibis.literal(-1), k=ibis.literal(0), **nulls)
    ev = starts.union(ends)
    # Ends before starts at the same instant; simultaneous arrivals queue in file order.
    w = ibis.window(order_by=[ev.at, ev.k], rows=(None, 0))
    swept = ev.mutate(busy=ev.d.sum().over(w) - 1)
    return swept.filter(swept.k == 1)


def _reference(ctx: Ctx, base: LogTable | None, metric: str, xs: list[str]) -> Fit | None:
    if base is None:
        return None
    bctx = Ctx(base, ctx.config, parent=ctx)
    y = ob.metric_value(bctx, metric)
    inp = _input(bctx)
    if y is None:
        return None
    terms = {"input_tokens": inp} if inp is not None and "input_tokens" in xs else {}
    if "output_tokens" in xs and "output_tokens" in bctx.t.columns:
        terms["output_tokens"] = bctx.t["output_tokens"].cast("float64")
    sel = bctx.t.select(y=y, **terms).filter(lambda r: r.y.notnull())
    row = bctx.run_frame(
        f"baseline {metric}", sel.aggregate(**_sums(sel.y, {k: sel[k] for k in terms}))
    )
    return _fit(row[0], list(terms))


def _pct(x: float) -> str:
    return f"{x:.0%}"


def ttft_cause(ctx: Ctx, obj: ObjectiveRow) -> tuple[Hypothesis, dict[str, Any]] | None:
    """The TTFT breach's cause (queueing / prefill) with its figures and counterfactual model."""
    ttft, inp = ob.metric_value(ctx, "ttft"), _input(ctx)
    assert ttft is not None
    values: dict[str, Any] = {"y": ttft}
    if inp is not None:
        values["input_tokens"] = inp
    timed = ctx.log.has_timestamp
    if timed:
        start = _start_ms(ctx)
        d = _concurrent(ctx, start, start + ctx.t[TOTAL], values)
        terms = [*(["input_tokens"] if inp is not None else []), "busy"]
    else:
        d = ctx.t.select(**values)
        terms = ["input_tokens"] if inp is not None else []
    d = d.filter(d.y.notnull())
    aggs = _sums(d.y, {k: d[k].cast("float64") for k in terms})
    if timed:
        aggs["busy_q"] = d.busy.quantile([0.5, 0.99])
    row = ctx.run_frame("ttft causes", d.aggregate(**aggs))[0]
    fit = _fit(row, terms)
    ref = _reference(ctx, ctx.config.baseline, "ttft", ["input_tokens"])
    key = f"ttft.{obj.percentile}"
    if fit is None:
        return None
    mean = fit.means["y"]
    prefill = max(fit.coef.get("input_tokens", 0.0), 0.0) * fit.means.get("input_tokens", 0.0)
    figures: dict[str, float] = {"ttft_mean_ms": mean, "r2": fit.r2}
    parts: list[str] = []
    queue = 0.0
    if timed:
        b = fit.coef["busy"]
        queue = max(b, 0.0) * fit.means["busy"]
        busy_q = row["busy_q"] or [0, 0]
        figures |= {"ms_per_request_in_flight": b, "in_flight_p50": fnum(busy_q[0])}
        parts.append(
            f"TTFT rises {b:,.3g} ms per request already in flight at arrival (median "
            f"{fnum(busy_q[0]):,.0f}, p99 {fnum(busy_q[1]):,.0f} in flight): about "
            f"{queue:,.0f} ms of the {mean:,.0f} ms mean TTFT is waiting"
        )
    if ref is not None:
        at_inputs = ref.intercept + ref.coef.get("input_tokens", 0.0) * fit.means.get(
            "input_tokens", 0.0
        )
        wait = max(mean - at_inputs, 0.0)
        figures |= {"baseline_ttft_mean_ms": ref.means["y"], "baseline_predicted_ms": at_inputs}
        parts.append(
            f"the baseline's TTFT averages {ref.means['y']:,.0f} ms and its prompt-"
            f"length fit predicts {at_inputs:,.0f} ms at this log's prompts (mean "
            f"{fit.means.get('input_tokens', 0.0):,.0f} tokens, baseline "
            f"{ref.means.get('input_tokens', 0.0):,.0f}): {wait:,.0f} ms ({_pct(wait / mean)}) "
            "of this log's mean TTFT is waiting, not prefill"
        )
        queue = max(queue, wait)
        prefill = (
            min(prefill, at_inputs)
            if prefill
            else ref.coef.get("input_tokens", 0.0) * fit.means.get("input_tokens", 0.0)
        )
    if inp is not None and fit.coef.get("input_tokens", 0.0) == 0.0:
        parts.append("prompt lengths do not vary in this log: prefill cannot be told from them")
    elif inp is not None:
        slope = fit.coef.get("input_tokens", 0.0)
        figures |= {"ms_per_input_token": slope}
        parts.append(
            f"TTFT rises {slope:,.3g} ms per input token ({prefill:,.0f} ms of the mean is "
            f"prefill by that fit, R^2 {fit.r2:.2f} with {', '.join(terms)})"
        )
    if not timed and ref is None:
        parts.append(
            "the log has no start times and no --baseline was given, so waiting cannot be "
            "separated from prefill; pass a low-load run as --baseline or a log with timestamps"
        )
    figures |= {"queue_ms": queue, "prefill_ms": prefill}
    if queue >= SHARE * mean and queue >= prefill:
        kind, what = "llm_queueing", "queueing"
    elif prefill >= SHARE * mean and inp is not None:
        kind, what = "llm_prefill", "prefill"
    else:
        kind, what = "llm_prefill" if inp is not None else "llm_queueing", "undetermined"
        if what == "undetermined":
            return (
                Hypothesis(
                    kind=kind,
                    stage="ttft",
                    evidence=f"{key} breach: cause undetermined; " + "; ".join(parts),
                    figures=figures,
                    objective=key,
                ),
                {},
            )
    evidence = f"{key} breach is {what}: " + "; ".join(parts)
    model: dict[str, Any] = {"kind": kind, "fit": fit, "ref": ref}
    return (
        Hypothesis(kind=kind, stage="ttft", evidence=evidence, figures=figures, objective=key),
        model,
    )


def tpot_cause(ctx: Ctx, obj: ObjectiveRow) -> tuple[Hypothesis, dict[str, Any]] | None:
    """The TPOT/ITL breach's cause: decode contention, long answers or long contexts."""
    tpot, ttft, inp = ob.metric_value(ctx, "tpot"), ob.metric_value(ctx, "ttft"), _input(ctx)
    if tpot is None:
        return None
    values: dict[str, Any] = {"y": tpot}
    if inp is not None:
        values["input_tokens"] = inp
    if "output_tokens" in ctx.t.columns:
        values["output_tokens"] = ctx.t["output_tokens"].cast("float64")
    timed = ctx.log.has_timestamp and ttft is not None
    if timed:
        first = _start_ms(ctx) + ttft
        d = _concurrent(ctx, first, _start_ms(ctx) + ctx.t[TOTAL], values)
    else:
        d = ctx.t.select(**values)
    terms = [k for k in values if k != "y"] + (["busy"] if timed else [])
    d = d.filter(d.y.notnull())
    row = ctx.run_frame(
        "tpot causes", d.aggregate(**_sums(d.y, {k: d[k].cast("float64") for k in terms}))
    )[0]
    fit = _fit(row, terms)
    if fit is None:
        return None
    ref = _reference(ctx, ctx.config.baseline, "tpot", ["output_tokens"])
    key = f"{obj.metric}.{obj.percentile}"
    mean = fit.means["y"]
    parts: list[str] = []
    figures: dict[str, float] = {"tpot_mean_ms": mean, "r2": fit.r2}
    contention = 0.0
    if timed:
        b = fit.coef["busy"]
        contention = max(b, 0.0) * fit.means["busy"]
        figures |= {"ms_per_concurrent_decoder": b, "decoders_mean": fit.means["busy"]}
        parts.append(
            f"TPOT rises {b:,.3g} ms per other request decoding at the same time (mean "
            f"{fit.means['busy']:,.1f}): about {contention:,.1f} ms of the {mean:,.1f} ms mean"
        )
    if ref is not None:
        at = ref.intercept + ref.coef.get("output_tokens", 0.0) * fit.means.get(
            "output_tokens", 0.0
        )
        extra = max(mean - at, 0.0)
        figures |= {"baseline_tpot_mean_ms": ref.means["y"], "baseline_predicted_ms": at}
        parts.append(
            f"the baseline decodes at {ref.means['y']:,.1f} ms per token ({at:,.1f} "
            f"predicted at this log's answer lengths): {extra:,.1f} ms ({_pct(extra / mean)}) "
            "is contention"
        )
        contention = max(contention, extra)
    lengths = {
        c: max(fit.coef.get(c, 0.0), 0.0) * fit.means.get(c, 0.0)
        for c in ("output_tokens", "input_tokens")
        if c in fit.coef
    }
    for c, ms in lengths.items():
        parts.append(f"{c}: {fit.coef[c]:,.3g} ms per token ({ms:,.1f} ms of the mean)")
    figures |= {"contention_ms": contention}
    longest = max(lengths.items(), key=lambda kv: kv[1], default=(None, 0.0))
    if contention >= SHARE * mean and contention >= longest[1]:
        what = "decode contention"
    elif longest[0] is not None and longest[1] >= SHARE * mean and fit.r2 >= R2_MIN:
        what = "long answers" if longest[0] == "output_tokens" else "long contexts"
    else:
        what = "undetermined"
        if not timed and ref is None:
            parts.append(
                "no start times and no --baseline: contention cannot be measured; pass a "
                "low-load run as --baseline"
            )
    evidence = f"{key} breach is {what}: " + "; ".join(parts)
    hyp = Hypothesis(
        kind="llm_decode_contention" if what == "decode contention" else "llm_decode",
        stage="decode",
        evidence=evidence,
        figures=figures,
        objective=key,
    )
    model = {"kind": hyp.kind, "fit": fit, "ref": ref} if what == "decode contention" else {}
    return hyp, model


def _cap_model(fit: Fit, ref: Fit | None, xs: dict[str, Any], timed: bool) -> Any:
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
    model: dict[str, Any],
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
    xs: dict[str, Any] = {}
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
            "q": after.quantile(obj_q(obj)),
            "p99": total_after.quantile(0.99),
            "g": ob.good_mask(ctx, thresholds, swap=swap).cast("int64").sum(),
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


def obj_q(obj: ObjectiveRow) -> float:
    """The objective's percentile as a quantile."""
    from tailbudget.budget.objectives import parse_percentile

    return parse_percentile(obj.percentile)[1]


_FIXES = {
    "llm_queueing": "add_llm_replicas",
    "llm_prefill": "cap_prompt_tokens",
    "llm_decode_contention": "limit_decode_batch",
}


def find(
    ctx: Ctx, rows: list[ObjectiveRow], cat: dict[str, Fix], snap: Snapshot, goodput: float
) -> Findings:
    """Causes and ranked fixes for every breached ttft, tpot and itl objective."""
    hyps: list[Hypothesis] = []
    ranked: list[RankedFix] = []
    done: set[tuple[str, str]] = set()
    for obj in rows:
        if obj.verdict != "breach" or obj.metric not in ("ttft", "tpot", "itl"):
            continue
        found = ttft_cause(ctx, obj) if obj.metric == "ttft" else tpot_cause(ctx, obj)
        if found is None:
            continue
        hyp, model = found
        hyps.append(hyp)
        name = _FIXES.get(str(model.get("kind")))
        if name is None or name not in cat or (name, obj.metric) in done:
            continue
        fix = counterfactual(ctx, obj, model, cat[name], snap, goodput)
        if fix is not None:
            done.add((name, obj.metric))
            ranked.append(fix)
    return Findings(hypotheses=hyps, ranking=ranked, refusals=[])


def _label(cause: Hypothesis | None) -> str:
    if cause is None or " breach is " not in cause.evidence:
        return "cause unclear"
    return cause.evidence.split(" breach is ", 1)[1].split(":", 1)[0]


def recommend(rows: list[ObjectiveRow], findings: Findings, rec: Recommendation) -> Recommendation:
    """The recommendation when a breached objective, not the e2e tail, is what to fix first."""
    breached = [o for o in rows if o.verdict == "breach" and o.metric != "e2e"]
    if not breached or (rec.choice != "none" and not findings.ranking):
        return rec
    first = breached[0]
    key = f"{first.metric}.{first.percentile}"
    gap = (first.measured_ms or 0.0) - first.target_ms
    fix = next((f for f in findings.ranking if f.objective == key), None)
    cause = next((h for h in findings.hypotheses if h.objective == key), None)
    if fix is None:
        text = f"{key} is {gap:,.0f} ms over its {first.target_ms:,.0f} ms target"
        text += f"; {cause.evidence}" if cause is not None else "; no cause stands out in this log"
        return Recommendation(choice="fix_tail" if cause else "renegotiate_slo", text=text + ".")
    choice = "add_capacity" if fix.kind in ("llm_queueing", "llm_decode_contention") else "fix_tail"
    goodput = ""
    if fix.goodput_before is not None and fix.goodput_after is not None:
        goodput = f", goodput {fix.goodput_before:.1%} -> {fix.goodput_after:.1%}"
    return Recommendation(
        choice=choice,
        text=(
            f"{key} is {gap:,.0f} ms over its {first.target_ms:,.0f} ms target "
            f"({_label(cause)}). "
            f"Start with {fix.fix}: {key} {fix.objective_before_ms:,.0f} -> "
            f"{fix.objective_after_ms:,.0f} ms{goodput}, for {fix.hours:g} engineering hours."
        ),
    )
