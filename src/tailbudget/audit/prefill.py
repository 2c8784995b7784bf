"""Prefill faster than cold: a warm prefix cache, said by the audit as simulate says it.

A prompt token computed cold costs what a lone prompt shows: the slope of TTFT
against prompt length over requests that met an idle server. That reference comes
from the `--baseline` run when one is given (a low-load run of the same server), else
from this log's own requests that arrived with nothing else in flight (a log with
start times; at least MIN_ROWS of them, prompt lengths that vary).

This log's own prefill speed is then:
- all at once (a benchmark at an unlimited rate): every prompt token it was sent over
  the time its last first token took (a lower bound: that time also holds queueing
  and the front end);
- otherwise: its TTFT slope against prompt length over all its requests.

Faster than cold by more than 10% reads "prefill at N tokens/s, faster than cold (M
tokens/s, REF): warm prefix cache suspected". What it cannot see: a cache already
warm when the reference ran (the same prompts sent before: then the reference is warm
too, and only the difference shows), and prefill that is cheaper per token in a full
batch than alone (pipeline stages kept busy) is counted as cache; a burst without a
baseline has no request that met an idle server, so it is said to be unjudged.
"""

from __future__ import annotations

from tailbudget.audit import objectives as ob
from tailbudget.audit.context import TOTAL, Ctx, fnum
from tailbudget.audit.llm_fits import (
    MIN_ROWS,
    Fit,
    concurrent,
    fit_sums,
    input_tokens,
    reference,
    start_ms,
    sums,
)
from tailbudget.logs.bench_rows import DECODE_BATCH

__all__ = ["warm_notes"]

SUSPECT = 0.1
"""Faster than cold by more than this share of the cold time (refine.py's threshold)."""


def _lone(ctx: Ctx) -> Fit | None:
    """TTFT against prompt length over the requests that arrived to an idle server."""
    ttft, inp = ob.metric_value(ctx, "ttft"), input_tokens(ctx)
    assert ttft is not None and inp is not None
    start = start_ms(ctx)
    d = concurrent(ctx, start, start + ctx.t[TOTAL], {"y": ttft, "input_tokens": inp})
    d = d.filter(d.y.notnull() & (d.busy == 0))
    row = ctx.run_frame("lone prompts", d.aggregate(**sums(d.y, {"input_tokens": d.input_tokens})))
    return fit_sums(row[0], ["input_tokens"])


def _cold(ctx: Ctx) -> tuple[float, str] | None:
    """(cold ms per prompt token, where it comes from), or None without a reference."""
    base = ctx.config.baseline
    if base is not None:
        ref = reference(ctx, base, "ttft", ["input_tokens"])
        label = f"the baseline's TTFT slope over {ref.n:,} requests" if ref else ""
    elif ctx.log.has_timestamp:
        ref = _lone(ctx)
        label = f"this log's {ref.n:,} requests that met an idle server" if ref else ""
    else:
        return None
    slope = None if ref is None else ref.coef.get("input_tokens")
    return (slope, label) if ref is not None and slope is not None and slope > 0 else None


def _speed(ctx: Ctx) -> tuple[float, str] | None:
    """(this log's prefill ms per prompt token, how it was read)."""
    ttft, inp = ob.metric_value(ctx, "ttft"), input_tokens(ctx)
    assert ttft is not None and inp is not None
    burst = not ctx.log.has_timestamp and DECODE_BATCH in ctx.t.columns
    sel = ctx.t.select(y=ttft, x=inp).filter(lambda r: r.y.notnull() & r.x.notnull())
    if burst:
        row = ctx.run_frame("prefill speed", sel.aggregate(tokens=sel.x.sum(), last=sel.y.max()))
        tokens, last = fnum(row[0]["tokens"]), fnum(row[0]["last"])
        if tokens <= 0 or last <= 0:
            return None
        return last / tokens, f"{tokens:,.0f} prompt tokens, sent at once, by its last first token"
    row = ctx.run_frame("prefill speed", sel.aggregate(**sums(sel.y, {"x": sel.x})))
    fit = fit_sums(row[0], ["x"])
    slope = None if fit is None else fit.coef.get("x")
    if slope is None or slope <= 0:
        return None
    return slope, "its TTFT slope against prompt length"


def warm_notes(ctx: Ctx) -> list[str]:
    """The warm-cache finding for an LLM log with TTFT and prompt lengths ([] otherwise)."""
    if ob.metric_value(ctx, "ttft") is None or input_tokens(ctx) is None:
        return []
    if ctx.log.rows.total and ctx.log.rows.total < MIN_ROWS:
        return []
    cold = _cold(ctx)
    burst = not ctx.log.has_timestamp and DECODE_BATCH in ctx.t.columns
    if cold is None:
        if not burst:
            return []
        return [
            "prefill speed not judged against cold: every request was sent at once and no "
            "baseline was given, so no prompt met an idle server; give a low-load run of the "
            "same server as the baseline"
        ]
    speed = _speed(ctx)
    if speed is None:
        return []
    mine, how = speed
    per_token, label = cold
    if mine >= per_token * (1.0 - SUSPECT):
        return []
    return [
        f"prefill at {1000.0 / mine:,.0f} tokens/s ({how}), faster than cold "
        f"({1000.0 / per_token:,.0f} tokens/s, {label}): warm prefix cache suspected "
        f"(about {1.0 - mine / per_token:.0%} of prompt tokens not computed)"
    ]
