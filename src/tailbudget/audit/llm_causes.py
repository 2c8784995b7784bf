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

from tailbudget.audit import objectives as ob
from tailbudget.audit.context import TOTAL, Ctx, fnum
from tailbudget.audit.fixes import Fix
from tailbudget.audit.llm_fits import (
    Fit,
    concurrent,
    fit_sums,
    input_tokens,
    reference,
    start_ms,
    sums,
)
from tailbudget.audit.llm_fixes import counterfactual
from tailbudget.audit.report import Hypothesis, ObjectiveRow, RankedFix, Recommendation, Snapshot
from tailbudget.logs.bench_rows import DECODE_BATCH

SHARE = 0.3
"""A component explains a breach when it holds at least this share of the mean."""
R2_MIN = 0.3


@dataclass(frozen=True)
class Findings:
    """Causes of breached objectives, the fixes ranked on them, and what to say first."""

    hypotheses: list[Hypothesis]
    ranking: list[RankedFix]
    refusals: list[str]


def _pct(x: float) -> str:
    return f"{x:.0%}"


def _ttft_fit(ctx: Ctx) -> tuple[Fit | None, dict[str, Any], list[str]]:
    """TTFT regressed on input tokens and, with start times, on requests in flight."""
    ttft, inp = ob.metric_value(ctx, "ttft"), input_tokens(ctx)
    values: dict[str, Any] = {"y": ttft}
    if inp is not None:
        values["input_tokens"] = inp
    terms = ["input_tokens"] if inp is not None else []
    if ctx.log.has_timestamp:
        start = start_ms(ctx)
        d = concurrent(ctx, start, start + ctx.t[TOTAL], values)
        terms.append("busy")
    else:
        d = ctx.t.select(**values)
    d = d.filter(d.y.notnull())
    aggs = sums(d.y, {k: d[k].cast("float64") for k in terms})
    if ctx.log.has_timestamp:
        aggs["busy_q"] = d.busy.quantile([0.5, 0.99])
    row = ctx.run_frame("ttft causes", d.aggregate(**aggs))[0]
    return fit_sums(row, terms), row, terms


def _waiting(
    fit: Fit, row: dict[str, Any], ref: Fit | None
) -> tuple[float, list[str], dict[str, float]]:
    """ms of mean TTFT spent waiting, by the in-flight slope and/or the baseline."""
    mean, queue = fit.means["y"], 0.0
    parts: list[str] = []
    figures: dict[str, float] = {}
    if "busy" in fit.coef:
        b = fit.coef["busy"]
        queue = max(b, 0.0) * fit.means["busy"]
        busy_q = row.get("busy_q") or [0, 0]
        figures |= {"ms_per_request_in_flight": b, "in_flight_p50": fnum(busy_q[0])}
        parts.append(
            f"TTFT rises {b:,.3g} ms per request already in flight at arrival (median "
            f"{fnum(busy_q[0]):,.0f}, p99 {fnum(busy_q[1]):,.0f} in flight): about "
            f"{queue:,.0f} ms of the {mean:,.0f} ms mean TTFT is waiting"
        )
    if ref is not None:
        prompts = fit.means.get("input_tokens", 0.0)
        at_inputs = ref.intercept + ref.coef.get("input_tokens", 0.0) * prompts
        wait = max(mean - at_inputs, 0.0)
        figures |= {"baseline_ttft_mean_ms": ref.means["y"], "baseline_predicted_ms": at_inputs}
        parts.append(
            f"the baseline's TTFT averages {ref.means['y']:,.0f} ms and its prompt-length fit "
            f"predicts {at_inputs:,.0f} ms at this log's prompts (mean {prompts:,.0f} tokens, "
            f"baseline {ref.means.get('input_tokens', 0.0):,.0f}): {wait:,.0f} ms "
            f"({_pct(wait / mean)}) of this log's mean TTFT is waiting, not prefill"
        )
        queue = max(queue, wait)
    return queue, parts, figures


def ttft_cause(ctx: Ctx, obj: ObjectiveRow) -> tuple[Hypothesis, dict[str, Any]] | None:
    """The TTFT breach's cause (queueing / prefill) with its figures and counterfactual model."""
    fit, row, terms = _ttft_fit(ctx)
    if fit is None:
        return None
    ref = reference(ctx, ctx.config.baseline, "ttft", ["input_tokens"])
    key, mean = f"ttft.{obj.percentile}", fit.means["y"]
    queue, parts, figures = _waiting(fit, row, ref)
    figures |= {"ttft_mean_ms": mean, "r2": fit.r2}
    slope = fit.coef.get("input_tokens")
    prefill = max(slope or 0.0, 0.0) * fit.means.get("input_tokens", 0.0)
    if slope == 0.0:
        parts.append("prompt lengths do not vary in this log: prefill cannot be told from them")
    elif slope is not None:
        figures["ms_per_input_token"] = slope
        parts.append(
            f"TTFT rises {slope:,.3g} ms per input token ({prefill:,.0f} ms of the mean is "
            f"prefill by that fit, R^2 {fit.r2:.2f} with {', '.join(terms)})"
        )
    if "busy" not in fit.coef and ref is None:
        parts.append(
            "the log has no start times and no baseline was given, so waiting cannot be "
            "separated from prefill; give a low-load run as the baseline or a log with timestamps"
        )
    figures |= {"queue_ms": queue, "prefill_ms": prefill}
    if queue >= SHARE * mean and queue >= prefill:
        kind, what = "llm_queueing", "queueing"
    elif prefill >= SHARE * mean:
        kind, what = "llm_prefill", "prefill"
    else:
        kind, what = ("llm_prefill" if slope is not None else "llm_queueing"), ""
    evidence = f"{key} breach is {what}: " if what else f"{key} breach: cause undetermined; "
    hyp = Hypothesis(
        kind=kind,
        stage="ttft",
        evidence=evidence + "; ".join(parts),
        figures=figures,
        objective=key,
        undetermined=not what,
    )
    return hyp, ({"kind": kind, "fit": fit, "ref": ref} if what else {})


def _tpot_fit(ctx: Ctx) -> tuple[Fit, bool] | None:
    """TPOT regressed on lengths and on who decoded alongside; True when from the batch column."""
    tpot, ttft, inp = ob.metric_value(ctx, "tpot"), ob.metric_value(ctx, "ttft"), input_tokens(ctx)
    if tpot is None:
        return None
    values: dict[str, Any] = {"y": tpot}
    if inp is not None:
        values["input_tokens"] = inp
    if "output_tokens" in ctx.t.columns:
        values["output_tokens"] = ctx.t["output_tokens"].cast("float64")
    timed = ctx.log.has_timestamp and ttft is not None
    # An all-at-once benchmark has no start times but says who decoded together.
    batched = not timed and DECODE_BATCH in ctx.t.columns
    if batched:
        values["busy"] = ctx.t[DECODE_BATCH].cast("float64")
    if timed:
        first = start_ms(ctx) + ttft
        d = concurrent(ctx, first, start_ms(ctx) + ctx.t[TOTAL], values)
    else:
        d = ctx.t.select(**values)
    terms = [k for k in values if k != "y"] + (["busy"] if timed else [])
    d = d.filter(d.y.notnull())
    row = ctx.run_frame(
        "tpot causes", d.aggregate(**sums(d.y, {k: d[k].cast("float64") for k in terms}))
    )[0]
    fit = fit_sums(row, terms)
    if fit is None:
        return None
    if "busy" in fit.coef:
        # A longer answer or prompt cannot make each token faster: a negative length slope
        # is the batch a request ran in showing through its length, so it is left out.
        kept = [k for k in terms if k == "busy" or fit.coef[k] >= 0]
        fit = (fit_sums(row, kept) if len(kept) < len(terms) else None) or fit
    return fit, batched


def _tpot_contention(
    fit: Fit, ref: Fit | None, batched: bool, parts: list[str], figures: dict[str, float]
) -> float:
    """The ms of mean TPOT that contention explains (batch slope or excess over the baseline)."""
    mean = fit.means["y"]
    contention = 0.0
    if "busy" in fit.coef:
        b = fit.coef["busy"]
        contention = max(b, 0.0) * fit.means["busy"]
        figures |= {"ms_per_concurrent_decoder": b, "decoders_mean": fit.means["busy"]}
        beside = (
            "in the decode batch it ran in (every request was sent at once; mean batch "
            if batched
            else "decoding at the same time (mean "
        )
        parts.append(
            f"TPOT rises {b:,.3g} ms per other request {beside}"
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
    return contention


def tpot_cause(ctx: Ctx, obj: ObjectiveRow) -> tuple[Hypothesis, dict[str, Any]] | None:
    """The TPOT/ITL breach's cause: decode contention, long answers or long contexts."""
    found = _tpot_fit(ctx)
    if found is None:
        return None
    fit, batched = found
    ref = reference(ctx, ctx.config.baseline, "tpot", ["output_tokens"])
    key = f"{obj.metric}.{obj.percentile}"
    mean = fit.means["y"]
    parts: list[str] = []
    figures: dict[str, float] = {"tpot_mean_ms": mean, "r2": fit.r2}
    contention = _tpot_contention(fit, ref, batched, parts, figures)
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
        if "busy" not in fit.coef and ref is None:
            parts.append(
                "no start times and no baseline: contention cannot be measured; give a "
                "low-load run as the baseline"
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


def merged(causes: list[Hypothesis], generic: list[Hypothesis]) -> list[Hypothesis]:
    """The objective causes first, then the generic hypotheses that do not contradict them.

    A breached objective's cause is drawn per request (in-flight counts, a baseline); the
    stage rule's own llm_* verdict on the same stage is coarser (per-minute traffic) and
    may say "neither traffic nor input length explains it" right under "queueing": one
    story per stage, the finer one.
    """
    explained = {h.stage for h in causes}
    keep = [h for h in generic if not (h.kind.startswith("llm_") and h.stage in explained)]
    return [*causes, *keep]


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
    goodput = f", {fix.goodput_words()}" if fix.goodput_words() else ""
    # The choice's title must be what the text starts with: contention is load, so the
    # first step is capacity, and the ranked fix is the alternative that needs no replica.
    adds = choice == "add_capacity" and "replica" not in fix.fix
    start = "Add capacity, or start with" if adds else "Start with"
    return Recommendation(
        choice=choice,
        text=(
            f"{key} is {gap:,.0f} ms over its {first.target_ms:,.0f} ms target "
            f"({_label(cause)}). "
            f"{start} {fix.fix}: {key} {fix.objective_before_ms:,.0f} -> "
            f"{fix.objective_after_ms:,.0f} ms{goodput}, for {fix.hours:g} engineering hours."
        ),
    )
