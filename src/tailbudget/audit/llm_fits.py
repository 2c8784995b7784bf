"""Least-squares fits from sums computed on the engine, and the event sweep that counts
requests in flight, for the LLM cause analysis (audit/llm_causes.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ibis
import numpy as np

from tailbudget.audit import objectives as ob
from tailbudget.audit.context import Ctx, fnum
from tailbudget.logs.table import LogTable

if TYPE_CHECKING:
    import ibis.expr.types as ir

__all__ = [
    "MIN_ROWS",
    "Fit",
    "concurrent",
    "fit_sums",
    "input_tokens",
    "reference",
    "start_ms",
    "sums",
]

MIN_ROWS = 20
"""Fewer rows than this: no fit."""


@dataclass(frozen=True)
class Fit:
    """Least-squares fit y = intercept + sum(coef[x] * x) with its R^2 and residual spread."""

    intercept: float
    coef: dict[str, float]
    r2: float
    resid_sd: float
    n: int
    means: dict[str, float]


def sums(y: ir.Value, xs: dict[str, ir.Value]) -> dict[str, ir.Value]:
    names = list(xs)
    out: dict[str, ir.Value] = {"n": y.count(), "sy": y.sum(), "syy": (y * y).sum()}
    for i, a in enumerate(names):
        out[f"s_{a}"] = xs[a].sum()
        out[f"s_{a}_y"] = (xs[a] * y).sum()
        for b in names[i:]:
            out[f"s_{a}_{b}"] = (xs[a] * xs[b]).sum()
    return out


def fit_sums(row: dict[str, Any], names: list[str]) -> Fit | None:
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


def input_tokens(ctx: Ctx) -> ir.Value | None:
    return ctx.t["input_tokens"].cast("float64") if "input_tokens" in ctx.t.columns else None


def start_ms(ctx: Ctx) -> ir.Value:
    return (
        ctx.t["ts"].delta(ibis.timestamp("1970-01-01 00:00:00"), unit="millisecond").cast("float64")
    )


def concurrent(ctx: Ctx, begin: ir.Value, end: ir.Value, values: dict[str, ir.Value]) -> ir.Value:
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


def reference(ctx: Ctx, base: LogTable | None, metric: str, xs: list[str]) -> Fit | None:
    if base is None:
        return None
    bctx = Ctx(base, ctx.config, parent=ctx)
    y = ob.metric_value(bctx, metric)
    inp = input_tokens(bctx)
    if y is None:
        return None
    terms = {"input_tokens": inp} if inp is not None and "input_tokens" in xs else {}
    if "output_tokens" in xs and "output_tokens" in bctx.t.columns:
        terms["output_tokens"] = bctx.t["output_tokens"].cast("float64")
    sel = bctx.t.select(y=y, **terms).filter(lambda r: r.y.notnull())
    row = bctx.run_frame(
        f"baseline {metric}", sel.aggregate(**sums(sel.y, {k: sel[k] for k in terms}))
    )
    return fit_sums(row[0], list(terms))
