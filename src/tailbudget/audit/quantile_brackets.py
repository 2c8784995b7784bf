"""Where each wanted rank lies, from the audit's row sample: the histogram pass skipped.

For a large log the exact quantiles of `quantiles.py` cost a histogram pass (every
value bucketed and grouped) and a select. When the audit's row sample holds enough
values of an ask, the sample brackets each quantile instead: a range [lo, hi] that holds
the wanted order statistics with overwhelming probability. One aggregate pass then
counts, exactly, the values under lo and inside [lo, hi]; the ranks are checked against
those counts, so a bracket the sample misplaced is caught, never trusted: its ask goes
back to the histogram. The figures stay exact either way; the sample only decides how
much of the log has to be read back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import ibis
import ibis.expr.datatypes as dt
import numpy as np

from tailbudget.audit.context import Ctx

__all__ = ["Bracket", "settle"]

Z = 4.5
"""Half-width of a bracket in standard errors of the sample quantile: a miss is rarer than
one in a hundred thousand, and costs only a histogram pass."""
MOST_VALUES = 1_000_000
"""Values a bracket may read back at most (8 MB); a wider one is left to the histogram."""
MIN_SAMPLE = 2_000
"""Fewest sampled values an ask needs to be bracketed."""


@dataclass(frozen=True)
class Bracket:
    """Values of ask `ask` within [lo, hi], of which `below` lie under lo, and the ranks
    (0-based, over all `n` values of the ask) taken to lie within. `inside`, the count
    within, is known when lo == hi (the values need no reading); else the select that
    reads them counts them, and the ranks are checked then."""

    ask: int
    lo: float
    hi: float
    below: int
    ranks: tuple[int, ...]
    inside: int | None = None


@dataclass(frozen=True)
class Settled:
    """An ask whose every wanted rank was placed in a counted bracket."""

    n: int
    brackets: tuple[Bracket, ...]


def settle(
    ctx: Ctx, label: str, asks: Sequence[Any], ranks_of: Any, most: int
) -> dict[int, Settled]:
    """Asks (by index) whose ranks sample brackets place; the others are left out.

    `ranks_of(n, ask)` gives the order statistics an ask needs; an ask whose brackets the
    sample says hold more than `most` values each is left out.
    """
    sub = ctx.sampled()
    if sub is ctx or ctx.parent is not None:
        return {}
    plain = [i for i, a in enumerate(asks) if a.by is None]
    if not plain:
        return {}
    guesses = _guesses(ctx, sub, label, [asks[i] for i in plain], ctx.log.rows.used, most)
    guesses = {plain[j]: g for j, g in guesses.items()}
    if not guesses:
        return {}
    row = ctx.run_frame(f"{label}: bracket counts", _count_expr(ctx, asks, guesses))[0]
    out: dict[int, Settled] = {}
    for i, ranges in guesses.items():
        n = int(row[f"n{i}"] or 0)
        placed = _place(i, ranges, row, ranks_of(n, asks[i])) if n else None
        if placed is not None:
            out[i] = Settled(n, placed)
    return out


def _place(
    i: int, ranges: list[tuple[float, float]], row: dict[str, Any], wanted: list[int]
) -> tuple[Bracket, ...] | None:
    """Each wanted rank in the last bracket starting at or under it; None when a rank
    lies under every bracket, or a bracket of one value shows it misses."""
    belows = [int(row[f"b{i}_{k}"] or 0) for k in range(len(ranges))]
    found: list[Bracket] = []
    for k, (lo, hi) in enumerate(ranges):
        top = belows[k + 1] if k + 1 < len(ranges) else None
        mine = tuple(r for r in wanted if belows[k] <= r and (top is None or r < top))
        if not mine:
            continue
        inside = None
        if lo == hi:
            inside = int(row[f"h{i}_{k}"] or 0) - belows[k]
            if any(r >= belows[k] + inside for r in mine):
                return None
        found.append(Bracket(i, lo, hi, belows[k], mine, inside))
    if sum(len(b.ranks) for b in found) != len(wanted):
        return None
    return tuple(found)


def _guesses(
    ctx: Ctx, sub: Ctx, label: str, asks: list[Any], n_rows: int, most: int
) -> dict[int, list[tuple[float, float]]]:
    """Per ask (index into `asks`), a [lo, hi] per quantile from the sample, merged where
    they overlap; asks whose brackets would hold too many values are left out."""
    values = _sampled_values(ctx, sub, label, asks)
    out: dict[int, list[tuple[float, float]]] = {}
    for i, ask in enumerate(asks):
        v = values.get(i)
        if v is None or len(v) < MIN_SAMPLE:
            continue
        m = len(v)
        ranges = []
        for q in ask.qs:
            half = Z * math.sqrt(max(q * (1.0 - q), 1.0 / m) / m) + 2.0 / m
            lo = float(v[max(math.floor((q - half) * (m - 1)), 0)])
            hi = float(v[min(math.ceil((q + half) * (m - 1)), m - 1)])
            ranges.append((lo, hi))
        ranges = _merged(ranges)
        # The sample's own share inside a bracket, ties included, says how many values
        # the select would read back; half as much again must fit.
        held = max((_held(v, lo, hi) for lo, hi in ranges if lo < hi), default=0)
        if 1.5 * held / m * n_rows <= most:
            out[i] = ranges
    return out


def _held(v: np.ndarray, lo: float, hi: float) -> int:
    return int(np.searchsorted(v, hi, side="right") - np.searchsorted(v, lo, side="left"))


def _merged(ranges: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _sampled_values(ctx: Ctx, sub: Ctx, label: str, asks: list[Any]) -> dict[int, np.ndarray]:
    """Each ask's values in the sample, sorted (one select for all asks)."""
    old, new = ctx.t.op(), sub.t.op()
    parts = []
    for i, ask in enumerate(asks):
        v = _rebind(ask.expr, old, new).cast(dt.float64)
        cond = v.notnull()
        if ask.where is not None:
            cond = cond & _rebind(ask.where, old, new)
        parts.append(sub.t.filter(cond).select(_a=ibis.literal(i, dt.int32), _v=v))
    union = parts[0] if len(parts) == 1 else ibis.union(*parts, distinct=False)
    table = sub.run_arrow(f"{label}: sample", union)
    a = np.asarray(table.column("_a").to_numpy(), dtype=np.int64)
    v = np.asarray(table.column("_v").to_numpy(zero_copy_only=False), dtype=np.float64)
    order = np.lexsort((v, a))
    a, v = a[order], v[order]
    cuts = np.searchsorted(a, np.arange(len(asks) + 1))
    return {i: v[cuts[i] : cuts[i + 1]] for i in range(len(asks)) if cuts[i + 1] > cuts[i]}


def _rebind(expr: Any, old: Any, new: Any) -> Any:
    """`expr` over the sample table instead of the log (the two share their columns)."""
    return expr.op().replace({old: new}).to_expr()


def _count_expr(
    ctx: Ctx, asks: Sequence[Any], guesses: dict[int, list[tuple[float, float]]]
) -> Any:
    """One aggregate: per ask its count of values, per bracket the values under lo (and
    at most hi, for a bracket of one value). Each ask's value is computed once per row, in
    a projection first."""
    cols: dict[str, Any] = {}
    for i in guesses:
        ask = asks[i]
        v = ask.expr.cast(dt.float64)
        # A filtered-out row becomes null: counts and sums skip nulls.
        cols[f"v{i}"] = v if ask.where is None else ibis.ifelse(ask.where, v, ibis.null(dt.float64))
    rows = ctx.t.select(**cols)
    exprs: dict[str, Any] = {}
    for i, ranges in guesses.items():
        v = rows[f"v{i}"]
        exprs[f"n{i}"] = v.count()
        for k, (lo, hi) in enumerate(ranges):
            # Sums of 0/1 flags: cheaper per row than COUNT ... FILTER on DuckDB.
            exprs[f"b{i}_{k}"] = (v < lo).cast(dt.int64).sum()
            if lo == hi:  # a bracket of one value is not read back: count it here
                exprs[f"h{i}_{k}"] = (v <= hi).cast(dt.int64).sum()
    return rows.aggregate(**exprs)
