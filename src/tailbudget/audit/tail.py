"""Step 3: slow vs fast. Slow = requests in [p95, p99] of total (`--slow` changes it), fast =
[p40, p50]; per stage mean_slow - mean_fast; the largest delta is the tail driver."""

from __future__ import annotations

from typing import Any

from tailbudget.audit.context import TOTAL, Ctx, fnum
from tailbudget.audit.report import Delta, Tail
from tailbudget.audit.snapshot import CDF_QS, at


def ranges(ctx: Ctx, total_grid: list[float], total_max: float) -> tuple[list[float], list[float]]:
    """(slow [lo, hi], fast [lo, hi]) in ms of total."""
    slow = ctx.config.slow
    if slow == "p95":
        slow_r = [at(CDF_QS, total_grid, 0.95), at(CDF_QS, total_grid, 0.99)]
    elif slow == "p99":
        slow_r = [at(CDF_QS, total_grid, 0.99), total_max]
    else:
        slow_r = [float(slow), max(total_max, float(slow))]
    fast_r = [at(CDF_QS, total_grid, 0.40), at(CDF_QS, total_grid, 0.50)]
    return slow_r, fast_r


def masks(ctx: Ctx, slow_r: list[float], fast_r: list[float]) -> tuple[Any, Any]:
    """Boolean expressions for the slow and the fast group."""
    total = ctx.t[TOTAL]
    return total.between(slow_r[0], slow_r[1]), total.between(fast_r[0], fast_r[1])


def exprs(ctx: Ctx, names: list[str], slow: Any, fast: Any) -> dict[str, Any]:
    """Aggregates of pass B for the slow/fast comparison."""
    out: dict[str, Any] = {
        "n_slow": slow.cast("int64").sum(),
        "n_fast": fast.cast("int64").sum(),
    }
    for i, name in enumerate(names):
        c = ctx.col(name)
        out[f"t{i}_slow"] = c.mean(where=slow)
        out[f"t{i}_fast"] = c.mean(where=fast)
    return out


def build(
    row: dict[str, Any], names: list[str], slow_r: list[float], fast_r: list[float]
) -> Tail:
    """The tail section; deltas sorted largest first."""
    deltas = []
    for i, name in enumerate(names):
        ms, mf = fnum(row[f"t{i}_slow"]), fnum(row[f"t{i}_fast"])
        deltas.append(Delta(stage=name, mean_slow=ms, mean_fast=mf, delta=ms - mf))
    deltas.sort(key=lambda d: d.delta, reverse=True)
    return Tail(
        driver=deltas[0].stage if deltas else None,
        deltas=deltas,
        slow_range_ms=slow_r,
        fast_range_ms=fast_r,
        n_slow=int(fnum(row["n_slow"])),
        n_fast=int(fnum(row["n_fast"])),
    )
