"""Objectives on the log: exact percentiles of e2e, TTFT, TPOT, ITL and stages, and goodput.

Per-request metrics, as vLLM's `bench serve` defines them:
- ttft: the `ttft` stage (or a `ttft_ms` column);
- tpot: (e2e - ttft) / (output_tokens - 1); its percentiles leave out one-token answers
  (they have no inter-token time), goodput counts them at TPOT 0;
- itl: every inter-token gap (the `itl_ms` list column), pooled over requests; a request
  meets an ITL threshold when its largest gap does;
- e2e with `output_tokens: N`: ttft + (N - 1) x tpot, the request's time for an N-token answer.
Percentiles are exact (linear interpolation between order statistics, as numpy's default
and vLLM), asked with the audit's other exact quantiles (quantiles.exact: the engine's
quantile on a small log, bounded memory on a large one); ITL takes one more pass over
the unnested gaps.
A request is good when it is not an error and meets every per-request threshold; requests
that failed without a latency count in the denominator, never as good.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, TypedDict

import ibis

from tailbudget import _fmt as fmt
from tailbudget._verdict import judge, judge_share
from tailbudget.audit.context import TOTAL, Ctx, fnum
from tailbudget.audit.covariates import output_tokens_column
from tailbudget.audit.quantiles import Ask
from tailbudget.audit.report import CdfPoint, ObjectiveRow
from tailbudget.audit.snapshot import CDF_QS
from tailbudget.budget.objectives import Objective, Objectives
from tailbudget.errors import TailbudgetError

if TYPE_CHECKING:
    import ibis.expr.types as ir

ITL = "itl_ms"
TPOT = "tpot_ms"
_PER_REQUEST = ("e2e", "ttft", "tpot", "itl")
"""Metrics that are not stages."""
FEW_ABOVE = 10
"""Below this many requests above a percentile, the figure is flagged as resting on few points."""


def objectives_of(ctx: Ctx) -> Objectives:
    """The audit's objectives (never None once AuditConfig is built)."""
    objs = ctx.config.objectives
    assert objs is not None
    return objs


COLUMNS: tuple[str, ...] = (TPOT, ITL, "input_tokens", "output_tokens", "ttft_ms")
"""Log columns the objectives read besides the canonical ones (kept in the audit's copy)."""


def check(ctx: Ctx) -> None:
    """Refuse objectives the log cannot answer (exit 2, one line naming the fix)."""
    objs = objectives_of(ctx)
    objs.check_stages(set(ctx.log.stages), source=ctx.log.source or "the log")
    needed = set(objs.metrics()) | set(objs.thresholds())
    for metric in ("ttft", "tpot", "itl"):
        if metric in needed and metric_value(ctx, metric) is None:
            raise TailbudgetError(_missing(metric))
    tokens = objs.e2e_output_tokens()
    if tokens is not None and (metric_value(ctx, "ttft") is None or _tpot(ctx) is None):
        raise TailbudgetError(
            "e2e.output_tokens needs per-request ttft and tpot (or output_tokens) columns; "
            "this log has none, so the e2e objective cannot be scaled to an answer length"
        )


def _missing(metric: str) -> str:
    hint = {
        "ttft": "a ttft stage (a column mapped to stage ttft) or a ttft_ms column",
        "tpot": "ttft plus an output_tokens column (in shape), or a tpot_ms column",
        "itl": "per-request inter-token gaps (an itl_ms list column, as the vLLM, AIPerf and "
        "SGLang readers give)",
    }[metric]
    return (
        f"a {metric} objective needs {hint}; this log has none: drop the objective or pass "
        "a log with them"
    )


def _ttft(ctx: Ctx) -> ir.Value | None:
    if "ttft" in ctx.log.stages:
        return ctx.col("ttft")
    if "ttft_ms" in ctx.t.columns:
        return ctx.t["ttft_ms"].cast("float64")
    return None


def _tpot(ctx: Ctx) -> ir.Value | None:
    """TPOT per request, null for one-token answers (vLLM leaves them out of percentiles)."""
    if TPOT in ctx.t.columns:
        return ctx.t[TPOT].cast("float64")
    ttft = _ttft(ctx)
    tokens = output_tokens_column(ctx.t.columns)
    if ttft is None or tokens is None:
        return None
    k = ctx.t[tokens].cast("float64")
    return ibis.ifelse(k > 1, (ctx.t[TOTAL] - ttft) / (k - 1), ibis.null("float64"))


def _one_token(ctx: Ctx) -> ir.Value:
    tokens = output_tokens_column(ctx.t.columns)
    if tokens is None:
        return ibis.literal(False)
    return ctx.t[tokens].cast("float64") <= 1


def metric_value(ctx: Ctx, metric: str, output_tokens: int | None = None) -> ir.Value | None:
    """Per-request value of a metric (ms) for its percentiles; None when the log lacks it."""
    if metric == "e2e":
        if output_tokens is None:
            return ctx.t[TOTAL]
        ttft, tpot = _ttft(ctx), _tpot(ctx)
        if ttft is None or tpot is None:
            return None
        return ttft + (output_tokens - 1) * tpot.fill_null(0.0)
    if metric == "ttft":
        return _ttft(ctx)
    if metric == "tpot":
        return _tpot(ctx)
    if metric == "itl":
        return ctx.t[ITL].maxs() if ITL in ctx.t.columns else None
    return ctx.col(metric)


def good_value(ctx: Ctx, metric: str, output_tokens: int | None = None) -> ir.Value | None:
    """Per-request value compared with a goodput threshold (TPOT 0 and ITL 0 for one token)."""
    value = metric_value(ctx, metric, output_tokens)
    if value is None:
        return None
    if metric == "tpot":
        return ibis.ifelse(_one_token(ctx), 0.0, value)
    if metric == "itl":
        return value.fill_null(0.0)
    return value


def good_mask(
    ctx: Ctx, thresholds: dict[str, float], *, swap: dict[str, ir.Value] | None = None
) -> ir.Value:
    """Requests that are not errors and meet every threshold (`swap` replaces a metric's
    per-request value, for counterfactuals)."""
    tokens = objectives_of(ctx).e2e_output_tokens()
    ok = ~ctx.t["error"].fill_null(False)
    for metric, ms in thresholds.items():
        value = (swap or {}).get(metric)
        if value is None:
            value = good_value(ctx, metric, tokens if metric == "e2e" else None)
        if value is None:
            continue
        ok = ok & (value <= ms).fill_null(False)
    return ok


def exprs(ctx: Ctx) -> dict[str, ir.Scalar]:
    """Aggregates for pass A: every objective's exact percentiles, counts and goodput."""
    objs = objectives_of(ctx)
    out: dict[str, ir.Scalar] = {}
    for j, metric in enumerate(objs.metrics()):
        value = None if metric == "itl" else metric_value(ctx, metric, _tokens(objs, metric))
        if value is None:
            continue
        out[f"o_n{j}"] = value.count()
        for i, o in enumerate(objs.of(metric)):  # the verdict's k: requests over the target
            out[f"o_k{j}_{i}"] = ctx.count((value > o.target_ms).fill_null(False))
        if metric not in _PER_REQUEST:  # a stage: a missing cell reads as 0 ms
            out[f"o_p{j}"] = ctx.count(value > 0)
    out["o_good"] = ctx.count(good_mask(ctx, objs.thresholds()))
    return out


def cdf_exprs(sub: Ctx) -> dict[str, ir.Scalar]:
    """Aggregates of the row sample's pass: the approximate quantile functions of ttft
    and tpot for the charts (on the sample, so the same every run)."""
    objs = objectives_of(sub)
    out: dict[str, ir.Scalar] = {}
    for metric in ("ttft", "tpot"):
        value = metric_value(sub, metric) if metric in objs.metrics() else None
        if value is not None:
            out[f"o_cdf_{metric}"] = value.approx_quantile(CDF_QS)
    return out


def asks(ctx: Ctx) -> list[Ask]:
    """Exact percentiles of every objective but ITL (quantiles.exact: bounded memory on a
    large log), keyed o_q<j> by the metric's position."""
    objs = objectives_of(ctx)
    out: list[Ask] = []
    for j, metric in enumerate(objs.metrics()):
        value = None if metric == "itl" else metric_value(ctx, metric, _tokens(objs, metric))
        if value is not None:
            out.append(Ask(f"o_q{j}", value, tuple(o.q for o in objs.of(metric))))
    return out


def _tokens(objs: Objectives, metric: str) -> int | None:
    return objs.e2e_output_tokens() if metric == "e2e" else None


def distributions(ctx: Ctx, row: dict[str, Any]) -> dict[str, list[CdfPoint]]:
    """Approximate quantile functions of ttft and tpot, for the report's charts."""
    out: dict[str, list[CdfPoint]] = {}
    for metric in ("ttft", "tpot"):
        values = row.get(f"o_cdf_{metric}")
        if values:
            last, points = 0.0, []
            for q, v in zip(CDF_QS, values, strict=False):
                if v is not None:
                    last = max(last, float(v))  # keep the sketch monotone
                    points.append(CdfPoint(q=q, ms=last))
            out[metric] = points
    return out


def _itl(ctx: Ctx, group: tuple[Objective, ...]) -> tuple[list[float | None], int, list[int]]:
    """Percentiles of every inter-token gap, their count, and the gaps over each target."""
    gaps = ctx.t.select(g=ctx.t[ITL].unnest())
    over = {f"k{i}": ctx.count(gaps.g > o.target_ms) for i, o in enumerate(group)}
    query = gaps.aggregate(q=gaps.g.quantile([o.q for o in group]), n=gaps.g.count(), **over)
    row = ctx.run_frame("inter-token gaps", query)[0]
    values = [None if v is None else float(v) for v in row["q"] or []]
    return values, int(row["n"] or 0), [int(fnum(row[k])) for k in over]


def build(ctx: Ctx, row: dict[str, Any]) -> tuple[list[ObjectiveRow], GoodputUpdate]:
    """Objective rows (in the order of the objectives) and updates to the goodput section."""
    objs = objectives_of(ctx)
    rows: list[ObjectiveRow] = []
    for j, metric in enumerate(objs.metrics()):
        group = objs.of(metric)
        values: list[float | None]
        over = [int(fnum(row.get(f"o_k{j}_{i}"))) for i in range(len(group))]
        if metric == "itl" and ITL not in ctx.t.columns:
            values, n = [None] * len(group), 0  # a baseline without gaps
        elif metric == "itl":
            values, n, over = _itl(ctx, group)
        else:
            values, n = (
                list(row.get(f"o_q{j}") or [None] * len(group)),
                int(row.get(f"o_n{j}") or 0),
            )
        if row.get(f"o_p{j}", 1) == 0 and n:
            rows += [_unmeasured(o, n) for o in group]
            continue
        rows += [_row(o, v, n, k) for o, v, k in zip(group, values, over, strict=True)]
    return rows, _goodput(ctx, objs, row)


def _row(o: Objective, value: float | None, n: int, over: int) -> ObjectiveRow:
    measured = None if value is None else float(value)
    above = int(n * (1.0 - o.q))
    what = "gap" if o.metric == "itl" else "request"
    verdict = judge(o.percentile, o.target_ms, measured, n, over, what=f"{what}s")
    # Why a verdict on few requests is what it is (a breach proved below the pass side's
    # minimum, or not settled yet); a plain pass or a breach on many needs no words.
    thin = verdict.verdict == "inconclusive" or (verdict.verdict == "breach" and above < 1)
    note = verdict.reason if thin else ""
    rough = ""
    if measured is not None and n == 1:
        rough = f"one {what}: its value is every percentile's, a rough figure"
    elif measured is not None and above == 0:
        # "only 0 of 89 requests lie above p99" read as a count; it is an interpolation.
        rough = (
            f"with {fmt.counted(n, what)}, {o.percentile} falls between the two largest: "
            "a rough figure"
        )
    elif measured is not None and above < FEW_ABOVE:
        verb = "lies" if above == 1 else "lie"
        rough = (
            f"only {above} of {fmt.counted(n, what)} {verb} above {o.percentile}: a rough figure"
        )
    if rough:
        note = f"{note}; {rough}" if note else rough
    return ObjectiveRow(
        metric=o.metric,
        percentile=o.percentile,
        target_ms=o.target_ms,
        measured_ms=measured,
        verdict=verdict.verdict,
        gated=o.gated,
        n=n,
        over=over,
        confidence=verdict.confidence,
        more=verdict.more,
        output_tokens=o.output_tokens,
        note=note,
    )


def without_figure(
    o: Objective, n: int, verdict: Literal["inconclusive", "no_data"], note: str = ""
) -> ObjectiveRow:
    """The row of an objective with no measured figure: a stage no request spent time
    in (inconclusive), or a class with no request in the log (no_data)."""
    return ObjectiveRow(
        metric=o.metric,
        percentile=o.percentile,
        target_ms=o.target_ms,
        measured_ms=None,
        verdict=verdict,
        gated=o.gated,
        n=n,
        output_tokens=o.output_tokens,
        note=note,
    )


def _unmeasured(o: Objective, n: int) -> ObjectiveRow:
    """A stage no request spent time in (its column empty or missing): no figure and
    no verdict, rather than a pass at 0 ms."""
    return without_figure(
        o,
        n,
        "inconclusive",
        f"no time recorded for {o.metric}: its column is empty or missing in all "
        f"{n:,} requests, so there is nothing to judge",
    )


class GoodputUpdate(TypedDict):
    """What the objectives' pass sets in the report's Goodput (`model_copy(update=...)`)."""

    share: float
    min: float | None
    thresholds: dict[str, float]
    verdict: str
    good: int
    requests: int


def _goodput(ctx: Ctx, objs: Objectives, row: dict[str, Any]) -> GoodputUpdate:
    """Updates to the goodput section: the share over every threshold, minimum, verdict."""
    thresholds = objs.thresholds()
    n = fnum(row.get("n")) + float(ctx.log.rows.failed)
    good = int(fnum(row.get("o_good")))
    share = good / n if n else 0.0
    minimum = objs.goodput.min if objs.goodput is not None else None
    # The breach side by the one rule's exact test: a share under the minimum by less than
    # chance gives on so few requests is inconclusive, not a breach.
    verdict = "no_minimum" if minimum is None else judge_share(good, int(n), minimum)
    return {
        "share": share,
        "min": minimum,
        "thresholds": thresholds,
        "verdict": verdict,
        "good": good,
        "requests": int(n),
    }


def goodput_of(ctx: Ctx, mask: ir.Value) -> float:
    """Share of requests (failed ones included in the denominator) where `mask` holds."""
    row = ctx.run_row("goodput", {"g": ctx.count(mask), "n": ctx.t.count()})
    n = fnum(row["n"]) + float(ctx.log.rows.failed)
    return fnum(row["g"]) / n if n else 0.0
