"""Goodput: the share of requests that are not errors and finish within the SLO's
request-level target (the highest percentile given, normally p99: the bound every request
but the allowed few must meet), plus the share within each target on its own."""

from __future__ import annotations

from typing import Any

import ibis

from tailbudget.audit.context import TOTAL, Ctx, fnum
from tailbudget.audit.report import Goodput


def _target(ctx: Ctx) -> tuple[str | None, float | None]:
    slo = ctx.config.slo
    name = next((p for p in ("p99", "p95", "p50") if p in slo), None)
    return name, slo[name] if name is not None else None


def exprs(ctx: Ctx) -> dict[str, Any]:
    """Pass A aggregates."""
    t = ctx.t
    total = t[TOTAL]
    out: dict[str, Any] = {}
    for name, ms in ctx.config.slo.items():
        out[f"g_{name}"] = (total <= ms).cast("float64").mean()
    _, top = _target(ctx)
    within = total <= top if top is not None else ibis.literal(True)
    out["g_good"] = (within & ~t["error"].fill_null(False)).cast("float64").mean()
    out["g_err"] = t["error"].fill_null(False).cast("float64").mean()
    return out


def build(ctx: Ctx, row: dict[str, Any]) -> Goodput:
    """The goodput section."""
    name, ms = _target(ctx)
    # Requests that failed without a latency are not in the table but are requests:
    # not good, and errors.
    n, failed = fnum(row["n"]), float(ctx.log.rows.failed)
    keep = n / (n + failed) if n + failed > 0 else 1.0
    return Goodput(
        share=fnum(row["g_good"]) * keep,
        target=name,
        target_ms=ms,
        by_target={p: fnum(row[f"g_{p}"]) * keep for p in ctx.config.slo},
        error_share=(fnum(row["g_err"]) * n + failed) / (n + failed) if n + failed else 0.0,
    )
