"""Step 3: slow vs fast. Slow = requests in [p95, p99] of total (`--slow` changes it), fast =
[p40, p50]; per stage mean_slow - mean_fast; the largest delta is the tail driver."""

from __future__ import annotations

from typing import Any

from tailbudget.audit import sums
from tailbudget.audit.context import TOTAL, Ctx
from tailbudget.audit.report import Delta, Tail


def ranges(ctx: Ctx, q: dict[float, float], total_max: float) -> tuple[list[float], list[float]]:
    """(slow [lo, hi], fast [lo, hi]) in ms of total, from its exact quantiles."""
    slow = ctx.config.slow
    if slow == "p95":
        slow_r = [q[0.95], q[0.99]]
    elif slow == "p99":
        slow_r = [q[0.99], total_max]
    else:
        slow_r = [float(slow), max(total_max, float(slow))]
    return slow_r, [q[0.4], q[0.5]]


def masks(ctx: Ctx, slow_r: list[float], fast_r: list[float]) -> tuple[Any, Any]:
    """Boolean expressions for the slow and the fast group."""
    total = ctx.t[TOTAL]
    return total.between(slow_r[0], slow_r[1]), total.between(fast_r[0], fast_r[1])


def build(
    rows: list[dict[str, Any]], names: list[str], slow_r: list[float], fast_r: list[float]
) -> Tail:
    """The tail section from the pass-B sums; deltas sorted largest first."""
    n_slow = sums.total(rows, "n", sums.group_is(sums.SLOW))
    n_fast = sums.total(rows, "n", sums.group_is(sums.FAST))
    deltas = []
    # An empty group has no mean: no deltas and no driver, never a mean of 0 (a log of
    # identical values has no fast group apart from its slow one).
    for j, name in enumerate(names if n_slow and n_fast else []):
        ms = sums.total(rows, f"sy{j}", sums.group_is(sums.SLOW)) / n_slow if n_slow else 0.0
        mf = sums.total(rows, f"sy{j}", sums.group_is(sums.FAST)) / n_fast if n_fast else 0.0
        deltas.append(Delta(stage=name, mean_slow=ms, mean_fast=mf, delta=ms - mf))
    deltas.sort(key=lambda d: d.delta, reverse=True)
    return Tail(
        driver=deltas[0].stage if deltas else None,
        deltas=deltas,
        slow_range_ms=slow_r,
        fast_range_ms=fast_r,
        n_slow=int(n_slow),
        n_fast=int(n_fast),
    )
