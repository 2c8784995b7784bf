"""Step 6: cold start. The p99 of every request next to the p99 without the requests that
arrived within `cold_window_min` after a scale-up or deploy event. Verdict `cold_start` when
the filtered p99 meets the SLO and the unfiltered one does not, or when filtering lowers the
p99 by at least MATERIAL (15%); `not_cold_start` otherwise. This verdict is the only one:
the cold_start hypothesis and every renderer read it. Also the per-minute timeline."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from tailbudget._arrow_numpy import floats, ints
from tailbudget.audit.config import AuditConfig
from tailbudget.audit.context import TOTAL, Ctx, fnum, instant
from tailbudget.audit.quantiles import Ask
from tailbudget.audit.report import ColdStart, EventPoint, TimelinePoint

if TYPE_CHECKING:
    import ibis.expr.types as ir

    from tailbudget.audit.sums import GroupSums

MATERIAL = 0.15


def _epoch(t: datetime) -> int:
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return int(t.timestamp())


COLD_COLUMN = "_tb_cold"
"""The cold-window flag, when the audit's copy of the log holds it (see `window_flags`)."""


def cold_mask(ctx: Ctx) -> ir.Value | None:
    """True for requests inside a cold window; None without events or timestamps."""
    if not ctx.config.events or not ctx.log.has_timestamp:
        return None
    if COLD_COLUMN in ctx.t.columns:
        return ctx.t[COLD_COLUMN]
    return window_flags(ctx.t, ctx.config)


def window_flags(table: ir.Table, config: AuditConfig) -> ir.Value | None:
    """Per row of `table` (with a `ts`): whether it arrived in a cold window.

    Computed once into the audit's copy of the log: the windows are a chain of
    comparisons per row, which half a dozen passes would otherwise each evaluate.
    """
    if not config.events or "ts" not in table.columns:
        return None
    ts = table["ts"]
    window = int(config.cold_window_min * 60)
    mask = None
    for when, _ in config.events:
        e = _epoch(when)
        part = (ts >= instant(ts, e)) & (ts < instant(ts, e + window))
        mask = part if mask is None else mask | part
    return mask.fill_null(False) if mask is not None else None


def exprs(ctx: Ctx, cold: ir.Value) -> dict[str, ir.Value]:
    """Aggregate of the distributions pass: how many requests are cold."""
    return {"cold_n": ctx.count(cold)}


def asks(ctx: Ctx, cold: ir.Value) -> list[Ask]:
    """The exact p99 of the warm requests."""
    return [Ask("warm_q", ctx.t[TOTAL], (0.99,), where=~cold)]


TIMELINE_ACCURACY = 0.01
"""Relative accuracy of the per-minute p99 (log buckets, as the project's sketch)."""


def timeline(ctx: Ctx, names: list[str]) -> list[dict[str, Any]]:
    """Per minute: n, p99 of total (within TIMELINE_ACCURACY) and each stage's mean, from
    one pass grouped by minute and log bucket of the total (counts and stage sums).

    The p99 comes from the per-minute bucket counts, not the engine's approximate
    quantile: DuckDB merges those states in thread order, so a run could differ from
    the one before; counts are the same every run (and cheaper)."""

    gamma = (1 + TIMELINE_ACCURACY) / (1 - TIMELINE_ACCURACY)
    t = ctx.t
    minute = (t["ts"].epoch_seconds().cast("float64") / 60).floor().cast("int64")
    # Under 1 us is one bucket: a zero total has no logarithm.
    total = t[TOTAL].cast("float64")
    bucket = ((total.clip(lower=1e-3)).ln() / float(np.log(gamma))).floor().cast("int32")
    aggs = {"c": t.count(), **{f"s{j}": ctx.col(name).sum() for j, name in enumerate(names)}}
    got = ctx.run_arrow("timeline", t.group_by(minute=minute, b=bucket).aggregate(**aggs))
    got = got.filter(got.column("minute").is_valid())
    if not got.num_rows:
        return []
    m, b, c = (ints(got.column(k)) for k in ("minute", "b", "c"))
    order = np.lexsort((b, m))
    m, b, c = m[order], b[order], c[order]
    sums = [floats(got.column(f"s{j}"))[order] for j in range(len(names))]
    starts = np.flatnonzero(np.r_[True, m[1:] != m[:-1]])
    ends = np.r_[starts[1:], len(m)]
    cum = np.cumsum(c)
    rows = []
    for start, end in zip(starts, ends, strict=True):
        before = cum[start - 1] if start else 0
        n = int(cum[end - 1] - before)
        rank = 0.99 * (n - 1)  # the p99 by linear rank, as the sketch reads it
        i = start + int(np.searchsorted(cum[start:end] - before, rank, side="right"))
        row: dict[str, Any] = {"minute": int(m[start]), "n": n}
        row |= {f"m{j}": float(np.nansum(s[start:end])) / n for j, s in enumerate(sums)}
        row["p99"] = _bucket_value(gamma, int(b[i]))
        rows.append(row)
    return rows


def _bucket_value(gamma: float, bucket: int) -> float:
    """The value a sketch bucket stands for; inf past the float range (a 1e308 ms row)
    rather than an overflow warning: the report writes it as null."""
    try:
        return 2.0 * math.pow(gamma, bucket + 1) / (gamma + 1.0)
    except OverflowError:
        return math.inf


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, tz=UTC).isoformat().replace("+00:00", "Z")


def build(
    ctx: Ctx, row: dict[str, Any] | None, p99: float, minutes: list[dict[str, Any]]
) -> ColdStart:
    """The cold-start section."""
    tl = [
        TimelinePoint(t=_iso(int(r["minute"]) * 60), p99=fnum(r["p99"]), n=int(r["n"]))
        for r in minutes
    ]
    events = [EventPoint(t=_iso(_epoch(w)), event=e) for w, e in ctx.config.events]
    window = ctx.config.cold_window_min
    if row is None:
        return ColdStart(
            window_min=window,
            unfiltered_p99=p99,
            filtered_p99=None,
            verdict="no_events",
            timeline=tl,
            events=events,
        )
    warm_q = row.get("warm_q") or [None]
    filtered = fnum(warm_q[0], p99)
    cold = is_cold_start(p99, filtered, ctx.config.slo.get("p99"))
    return ColdStart(
        window_min=window,
        unfiltered_p99=p99,
        filtered_p99=filtered,
        verdict="cold_start" if cold else "not_cold_start",
        n_cold=int(fnum(row.get("cold_n"))),
        timeline=tl,
        events=events,
    )


def is_cold_start(unfiltered_p99: float, filtered_p99: float, target: float | None) -> bool:
    """The cold-start rule: leaving the cold windows out meets the p99 target, or lowers
    the p99 by at least MATERIAL."""
    crosses = target is not None and filtered_p99 <= target < unfiltered_p99
    material = unfiltered_p99 > 0 and (unfiltered_p99 - filtered_p99) / unfiltered_p99 >= MATERIAL
    return crosses or material


def means(
    group_sums: GroupSums, names: list[str]
) -> tuple[dict[str, tuple[float, float]], tuple[float, float] | None]:
    """(per stage, total) means in cold windows and outside them, from the slow-vs-fast
    sums; empty when either side has no request."""
    cold = {flag: group_sums.total("n", cold=flag) for flag in (True, False)}
    if not (cold[True] and cold[False]):
        return {}, None

    def pair(key: str) -> tuple[float, float]:
        return (
            group_sums.total(key, cold=True) / cold[True],
            group_sums.total(key, cold=False) / cold[False],
        )

    index = {n: j for j, n in enumerate(group_sums.names)}
    return {n: pair(f"sy{index[n]}") for n in names}, pair("s_total")
