"""Step 1: end-to-end snapshot (p50/p95/p99/max, mean last) and pass/breach per SLO percentile."""

from __future__ import annotations

from typing import Any

from tailbudget import _fmt as fmt
from tailbudget._units import min_rows
from tailbudget._verdict import judge
from tailbudget.audit.context import TOTAL, Ctx, fnum
from tailbudget.audit.quantiles import Ask
from tailbudget.audit.report import CdfPoint, Snapshot


def _grid() -> list[float]:
    # Dense in the tail, where the SLO lives: 1% steps to p90, then finer.
    qs = [i / 100 for i in range(1, 90)]
    qs += [round(0.90 + i * 0.002, 4) for i in range(45)]
    qs += [round(0.99 + i * 0.0005, 5) for i in range(18)]
    qs += [round(0.999 + i * 0.0001, 5) for i in range(10)]
    return sorted(set(qs))


CDF_QS: list[float] = _grid()


EXACT_QS: list[float] = [0.4, 0.5, 0.95, 0.99]
"""Exact quantiles of the total: the SLO verdicts and the slow/fast group bounds."""


def at(qs: list[float], values: list[float], q: float) -> float:
    """Value of quantile `q` in a grid computed for `qs`."""
    i = min(range(len(qs)), key=lambda j: abs(qs[j] - q))
    return float(values[i])


def exprs(ctx: Ctx) -> dict[str, Any]:
    """Aggregates of the distributions pass for the snapshot (its quantiles: `asks`)."""
    t = ctx.t
    total = t[TOTAL]
    out: dict[str, Any] = {
        "n": t.count(),
        "total_max": total.max(),
        "total_mean": total.mean(),
        "errors": ctx.count(t["error"]),
    }
    for name, target in ctx.config.slo.items():  # each verdict's k: requests over it
        out[f"n_over_{name}"] = ctx.count(total > target)
    if ctx.log.has_timestamp:
        es = t["ts"].epoch_seconds().cast("float64")
        out["ts_min"] = es.min()
        out["ts_max"] = es.max()
    return out


def asks(ctx: Ctx) -> list[Ask]:
    """Exact quantiles of the total (the SLO verdicts and slow/fast bounds)."""
    return [Ask("total_q", ctx.t[TOTAL], tuple(EXACT_QS))]


def sample_exprs(ctx: Ctx) -> dict[str, Any]:
    """The CDF, for plotting: an approximate sketch on the sample, not 160 exact ranks."""
    return {"total_cdf": ctx.t[TOTAL].approx_quantile(CDF_QS)}


def _top_target(ctx: Ctx) -> tuple[str, float] | None:
    slo = ctx.config.slo
    return next(((p, slo[p]) for p in ("p99", "p95", "p50") if p in slo), None)


def _verdict(measured: float, target: float, n: int, percentile: str, over: int) -> str:
    return judge(percentile, target, measured, n, over).verdict


def build(ctx: Ctx, row: dict[str, Any]) -> tuple[Snapshot, list[CdfPoint], dict[float, float]]:
    """Snapshot, CDF points and the exact quantiles of the total by q."""
    exact = {q: fnum(v) for q, v in zip(EXACT_QS, row["total_q"], strict=True)}
    p = {name: exact[q] for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))}
    n = int(row["n"])
    verdict: dict[str, Any] = {
        name: _verdict(p[name], target, n, name, int(fnum(row.get(f"n_over_{name}"))))
        for name, target in ctx.config.slo.items()
    }
    thin = [name for name, v in verdict.items() if v == "inconclusive"]
    if thin:
        ctx.notes.append(
            f"{fmt.counted(n, 'request')}: too few for a verdict on {', '.join(thin)} (a pass "
            f"at a pXX needs at least {min_rows(thin[-1])} requests, a breach proved by the "
            "requests over the target), so those are inconclusive and do not gate"
        )
    duration_min = None
    rate = None
    if ctx.log.has_timestamp and row.get("ts_min") is not None and row.get("ts_max") is not None:
        # A log of one instant still spans the minute it was recorded in.
        duration_min = max((fnum(row["ts_max"]) - fnum(row["ts_min"])) / 60.0, 1.0 / 60.0)
        top = _top_target(ctx)
        if top is not None:
            rate = fnum(row.get(f"n_over_{top[0]}")) / duration_min
    snap = Snapshot(
        p50=p["p50"],
        p95=p["p95"],
        p99=p["p99"],
        max=fnum(row["total_max"]),
        mean=fnum(row["total_mean"]),
        verdict=verdict,
        breach_rate_per_min=rate,
        count=int(row["n"]),
        errors=int(fnum(row.get("errors"))),
        duration_min=duration_min,
    )
    cdf, last = [], 0.0
    for q, v in zip(CDF_QS, row["total_cdf"] or [], strict=False):
        last = max(last, min(fnum(v), snap.max))  # keep the sketch monotone and within max
        cdf.append(CdfPoint(q=q, ms=last))
    cdf.append(CdfPoint(q=1.0, ms=snap.max))
    return snap, cdf, exact
