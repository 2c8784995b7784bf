"""Step 3: slow vs fast. Slow = requests in [p95, p99] of total (`--slow` changes it), fast =
[p40, p50]; per stage mean_slow - mean_fast; the largest delta is the tail driver."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tailbudget.audit import sums
from tailbudget.audit.context import TOTAL, Ctx
from tailbudget.audit.report import Delta, Tail

if TYPE_CHECKING:
    import ibis.expr.types as ir


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


def masks(ctx: Ctx, slow_r: list[float], fast_r: list[float]) -> tuple[ir.Value, ir.Value]:
    """Boolean expressions for the slow and the fast group."""
    total = ctx.t[TOTAL]
    return total.between(slow_r[0], slow_r[1]), total.between(fast_r[0], fast_r[1])


def build(
    group_sums: sums.GroupSums, names: list[str], slow_r: list[float], fast_r: list[float]
) -> Tail:
    """The tail section for the stages `names` from the slow-vs-fast sums; deltas sorted
    largest first."""
    n_slow = group_sums.total("n", group=sums.SLOW)
    n_fast = group_sums.total("n", group=sums.FAST)
    deltas = []
    # An empty group has no mean: no deltas and no driver, never a mean of 0 (a log of
    # identical values has no fast group apart from its slow one).
    for name in names if n_slow and n_fast else []:
        j = group_sums.names.index(name)
        ms = group_sums.mean(f"sy{j}", group=sums.SLOW) or 0.0
        mf = group_sums.mean(f"sy{j}", group=sums.FAST) or 0.0
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
