"""Where each wanted rank lies, from the audit's row sample: the histogram pass skipped.

For a large log the exact quantiles of `quantiles.py` cost a histogram pass (every
value bucketed and grouped) and a select. When the audit's row sample holds enough
values of an ask, the sample brackets each quantile instead: a range [lo, hi] that holds
the wanted order statistics with overwhelming probability. One aggregate pass then
counts, exactly, the values under lo and inside [lo, hi]; the ranks are checked against
those counts, so a bracket the sample misplaced is caught, never trusted: its ask goes
back to the histogram. When the brackets of a pass hold few values, the same pass
collects them (a list aggregate), so no second scan reads them back. The figures stay
exact either way; the sample only decides how much of the log has to be read back.

Grouped asks (a p99 per cohort value) are bracketed per group; a group the sample holds
too few values of is read back whole, and an ask with a group the sample never saw goes
to the histogram.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import ibis
import ibis.expr.datatypes as dt
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailbudget._arrow_numpy import floats, ints, valid_mask
from tailbudget.audit import context
from tailbudget.audit.context import Ctx

if TYPE_CHECKING:
    import ibis.expr.operations as ops
    import ibis.expr.types as ir

    from tailbudget.audit.quantiles import Ask

__all__ = ["Bracket", "settle", "sorted_runs"]

Z = 4.5
"""Half-width of a bracket in standard errors of the sample quantile: a miss is rarer than
one in a hundred thousand, and costs only a histogram pass."""
MOST_VALUES = 1_000_000
"""Values a bracket may read back at most (8 MB); a wider one is left to the histogram."""
MIN_SAMPLE = 2_000
"""Fewest sampled values an ask needs to be bracketed."""
COLLECT_SHARE = 0.01
"""Share of the log's rows the brackets of one pass may hold, by the sample, for the
counting pass to collect them too (a list aggregate costs a few microseconds a value);
more are read back by a select, which costs one more scan but little per value."""


Key = tuple[int, str]
"""(ask index, group value; "" for an ungrouped ask)."""
Ranges = list[tuple[float, float]]
Bound: TypeAlias = "float | ir.NumericValue"
"""A bracket's bound: a number, or an expression giving each row's group its own."""
Bounds: TypeAlias = "list[tuple[Bound, Bound | None, Bound | None]]"


@dataclass(frozen=True)
class Bracket:
    """Values of one ask and group within [lo, hi], of which `below` lie under lo, and the
    ranks (0-based, over all `n` values of the group) taken to lie within. A bracket of
    one value (lo == hi) is counted, not read; the `values` within another, sorted, come
    with it when the counting pass collected them (the ranks are checked then), else the
    select that reads them checks the ranks."""

    lo: float
    hi: float
    below: int
    ranks: tuple[int, ...]
    values: np.ndarray | None = None

    @property
    def known(self) -> bool:
        """Whether every order statistic of `ranks` is known without reading."""
        return self.lo == self.hi or self.values is not None

    def value(self, rank: int) -> float:
        """The order statistic `rank`, one of `ranks` (of a `known` bracket)."""
        if self.values is None:
            return self.lo
        return float(self.values[rank - self.below])


@dataclass(frozen=True)
class Settled:
    """A group of an ask whose every wanted rank was placed in a counted bracket."""

    n: int
    brackets: tuple[Bracket, ...]


def settle(
    ctx: Ctx,
    label: str,
    asks: Sequence[Ask],
    ranks_of: Callable[[int, Ask], list[int]],
    most: int,
    also: dict[str, ir.Scalar] | None = None,
) -> tuple[dict[Key, Settled], dict[str, Any] | None]:
    """Per (ask, group) settled by sample brackets; an ask with any group left out is
    left out whole. Also the values of `also`, aggregates over the log computed in the
    counting pass of the ungrouped asks (None when there was none).

    `ranks_of(n, ask)` gives the order statistics an ask needs; an ask whose brackets the
    sample says would read back more than `most` values each is left out.
    """
    sub = ctx.sampled()
    if sub is ctx or ctx.parent is not None:
        return {}, None
    fraction = min(1.0, context.SAMPLE_ROWS / max(ctx.log.rows.used, 1))
    guesses, held = _guesses(ctx, sub, label, asks, fraction, most)
    if not guesses:
        return {}, None
    collect = held <= COLLECT_SHARE * ctx.log.rows.used
    counts, extra = _counts(ctx, label, asks, guesses, collect, also or {})
    out: dict[Key, Settled] = {}
    for i in sorted({key[0] for key in guesses}):
        mine = {key: row for key, row in counts.items() if key[0] == i}
        placed = {
            key: _place(guesses.get(key), row, ranks_of(int(row["n"]), asks[i]))
            for key, row in mine.items()
        }
        if placed and all(p is not None for p in placed.values()):
            out.update({key: Settled(int(mine[key]["n"]), p) for key, p in placed.items() if p})
    return out, extra


def _place(
    ranges: Ranges | None, row: dict[str, Any], wanted: list[int]
) -> tuple[Bracket, ...] | None:
    """Each wanted rank in the last bracket starting at or under it; None when the group
    has no bracket, or a rank lies under every bracket or past the values counted or
    collected in its own."""
    if ranges is None or not wanted:
        return None
    belows = [int(row[f"b{k}"] or 0) for k in range(len(ranges))]
    found: list[Bracket] = []
    for k, (lo, hi) in enumerate(ranges):
        top = belows[k + 1] if k + 1 < len(ranges) else None
        mine = tuple(r for r in wanted if belows[k] <= r and (top is None or r < top))
        if not mine:
            continue
        values = None if lo == hi or f"l{k}" not in row else np.sort(_array(row[f"l{k}"]))
        inside = len(values) if values is not None else None
        if lo == hi:
            inside = int(row[f"h{k}"] or 0) - belows[k]
        if inside is not None and any(r >= belows[k] + inside for r in mine):
            return None
        found.append(Bracket(lo, hi, belows[k], mine, values))
    if sum(len(b.ranks) for b in found) != len(wanted):
        return None
    return tuple(found)


def _guesses(
    ctx: Ctx, sub: Ctx, label: str, asks: Sequence[Ask], fraction: float, most: int
) -> tuple[dict[Key, Ranges], float]:
    """Per (ask, group) in the sample, a [lo, hi] per quantile, merged where they
    overlap; a group with too few sampled values is read back whole. Asks whose brackets
    would read back too many values are left out. Also the values all the brackets kept
    would read back, by the sample."""
    out: dict[Key, Ranges] = {}
    total = 0.0
    sampled = _sampled_values(ctx, sub, label, asks)
    for i, ask in enumerate(asks):
        groups = {key: v for key, v in sampled.items() if key[0] == i}
        mine: dict[Key, Ranges] = {}
        held: list[int] = []
        for key, v in groups.items():
            if len(v) < MIN_SAMPLE:
                ranges, each = [(-math.inf, math.inf)], [len(v)]
            else:
                ranges = _ranges(v, ask.qs)
                each = [_held(v, lo, hi) for lo, hi in ranges if lo < hi]
            # The sample's own count inside a bracket, ties included, says how many
            # values the select would read back; half as much again must fit.
            if 1.5 * max(each, default=0) / fraction > most:
                mine, held = {}, []
                break
            mine[key] = ranges
            held += each
        out.update(mine)
        total += sum(held) / fraction
    return out, total


def _ranges(v: np.ndarray, qs: Sequence[float]) -> Ranges:
    m = len(v)
    ranges = []
    for q in qs:
        half = Z * math.sqrt(max(q * (1.0 - q), 1.0 / m) / m) + 2.0 / m
        lo = float(v[max(math.floor((q - half) * (m - 1)), 0)])
        hi = float(v[min(math.ceil((q + half) * (m - 1)), m - 1)])
        ranges.append((lo, hi))
    return _merged(ranges)


def _held(v: np.ndarray, lo: float, hi: float) -> int:
    return int(np.searchsorted(v, hi, side="right") - np.searchsorted(v, lo, side="left"))


def _merged(ranges: Ranges) -> Ranges:
    out: Ranges = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _sampled_values(ctx: Ctx, sub: Ctx, label: str, asks: Sequence[Ask]) -> dict[Key, np.ndarray]:
    """Each ask's values in the sample per group, sorted (one select for all asks)."""
    old, new = ctx.t.op(), sub.t.op()
    parts = []
    for i, ask in enumerate(asks):
        v = _rebind(ask.expr, old, new).cast(dt.float64)
        cond = v.notnull()
        if ask.where is not None:
            cond = cond & _rebind(ask.where, old, new)
        # An ungrouped ask's group is null: no text per value to encode.
        g = ibis.null(dt.string) if ask.by is None else _rebind(ask.by, old, new).cast(dt.string)
        parts.append(sub.t.filter(cond).select(_a=ibis.literal(i, dt.int32), _g=g, _v=v))
    union = parts[0] if len(parts) == 1 else ibis.union(*parts, distinct=False)
    return sorted_runs(sub.run_arrow(f"{label}: sample", union))


MOST_COMBINATIONS = 4_096
"""Grouped asks whose groups (in the sample) combine into at most this many are counted in
one pass, grouped by the combination, rather than one pass each (the cohort counts too)."""
MASKED_RUNS = 64
"""Up to this many runs are cut out by a mask each (no permutation of the whole table)."""


def sorted_runs(table: pa.Table) -> dict[Key, np.ndarray]:
    """The `_v` values of a table per (`_a`, `_g`), each run sorted (`_g` absent or null:
    group ""). Groups are read as a dictionary's codes, so no Python string is made per
    value; sorted here, not by the engine, whose sort would need memory under a tight
    limit."""
    if table.num_rows == 0:
        return {}
    a = ints(table.column("_a"))
    names, g = _group_codes(table)
    v = floats(table.column("_v"))
    width = len(names)
    code = a * width + g if width > 1 else a
    counts = np.bincount(code)
    present = np.flatnonzero(counts)
    # Each run's values sorted on their own: a few masks (or one stable sort by run when
    # there are many runs) cost a fraction of one sort keyed by run and value.
    if len(present) <= MASKED_RUNS:
        runs = [v[code == c] for c in present]
    else:
        ends = np.cumsum(counts)
        by_run = v[np.argsort(code, kind="stable")]
        runs = [by_run[ends[c] - counts[c] : ends[c]] for c in present]
    return {
        (int(c) // width, names[int(c) % width]): np.sort(run)
        for c, run in zip(present, runs, strict=True)
    }


def _group_codes(table: pa.Table) -> tuple[list[str], np.ndarray | int]:
    """The group names of a table's `_g` and each row's index among them. A null group is
    the ungrouped ask's "" (a column of nulls only, or none, needs no encoding)."""
    if "_g" not in table.column_names or table.column("_g").null_count == table.num_rows:
        return [""], 0
    # Nulls get a code of their own (filling them first costs far more than encoding):
    # one ask's rows are all ungrouped or all grouped, so "" names one group per ask.
    groups = pc.dictionary_encode(table.column("_g").combine_chunks(), null_encoding="encode")
    names = ["" if x is None else str(x) for x in groups.dictionary.to_pylist()]
    return names, ints(groups.indices)


def _rebind(expr: ir.Value, old: ops.Node, new: ops.Node) -> ir.Value:
    """`expr` over the sample table instead of the log (the two share their columns)."""
    return expr.op().replace({old: new}).to_expr()


def _counts(
    ctx: Ctx,
    label: str,
    asks: Sequence[Ask],
    guesses: dict[Key, Ranges],
    collect: bool,
    also: dict[str, ir.Scalar],
) -> tuple[dict[Key, dict[str, Any]], dict[str, Any] | None]:
    """Per (ask, group) of the whole log: `n` values, `b<k>` under bracket k's lo and,
    for a bracket of one value, `h<k>` at most its hi. Ungrouped asks share one
    aggregate, which also collects (when `collect`) as `l<k>` the values within each
    other bracket, and computes `also`; each grouped ask has a grouped one, whose
    brackets come by group."""
    out: dict[Key, dict[str, Any]] = {}
    extra = None
    plain = sorted({i for i, g in guesses if asks[i].by is None})
    if plain:
        rows = ctx.t.mutate(**{f"_tb_v{i}": _value(asks[i]) for i in plain})
        flags = {
            i: _flags(ctx, rows[f"_tb_v{i}"], _bounds(guesses[(i, "")], collect)) for i in plain
        }
        exprs = {f"{i}_{k}": e for i, mine in flags.items() for k, e in mine.items()}
        # The log's columns keep their names, so `also` is read from the same scan.
        exprs |= {f"x_{k}": _rebind(e, ctx.t.op(), rows.op()) for k, e in also.items()}
        row = _rows(ctx.run_arrow(f"{label}: bracket counts", rows.aggregate(**exprs)))[0]
        out |= {(i, ""): {k: row[f"{i}_{k}"] for k in mine} for i, mine in flags.items()}
        extra = context.py_row({k: row[f"x_{k}"] for k in also}) if also else None
    grouped = sorted({i for i, g in guesses if asks[i].by is not None})
    ranges = {i: {g: r for (j, g), r in guesses.items() if j == i} for i in grouped}
    if len(grouped) > 1 and math.prod(len(ranges[i]) for i in grouped) <= MOST_COMBINATIONS:
        return out | _combined_counts(ctx, label, asks, ranges), extra
    for i in grouped:
        out |= _grouped_counts(ctx, label, i, asks[i], ranges[i])
    return out, extra


def _grouped_counts(
    ctx: Ctx, label: str, i: int, ask: Ask, ranges: dict[str, Ranges]
) -> dict[Key, dict[str, Any]]:
    """The counts of a grouped ask; its values are read back by a select (a list
    aggregate with per-group bounds costs more per row than the scan it saves)."""
    rows = ctx.t.select(_v=_value(ask), _g=_by(ask))
    exprs = _flags(ctx, rows["_v"], _group_bounds(rows["_g"], ranges))
    expr = rows.filter(rows["_v"].notnull()).group_by("_g").aggregate(**exprs)
    frame = ctx.run_frame(f"{label}: bracket counts {ask.key}", expr)
    return {(i, str(r.pop("_g"))): r for r in frame}


def _by(ask: Ask) -> ir.StringValue:
    """A grouped ask's group, as text."""
    assert ask.by is not None  # only grouped asks are counted by group
    return ask.by.cast(dt.string)


def _combined_counts(
    ctx: Ctx, label: str, asks: Sequence[Ask], ranges: dict[int, dict[str, Ranges]]
) -> dict[Key, dict[str, Any]]:
    """The counts of several grouped asks in one pass, grouped by every combination of
    their groups (few, by the sample), then summed per ask and group: counts add up."""
    rows = ctx.t.select(
        **{f"_v{i}": _value(asks[i]) for i in ranges},
        **{f"_g{i}": _by(asks[i]) for i in ranges},
    )
    exprs = {
        f"{i}_{k}": e
        for i, mine in ranges.items()
        for k, e in _flags(ctx, rows[f"_v{i}"], _group_bounds(rows[f"_g{i}"], mine)).items()
    }
    expr = rows.group_by(*(f"_g{i}" for i in ranges)).aggregate(**exprs)
    out: dict[Key, dict[str, Any]] = {}
    for r in ctx.run_frame(f"{label}: bracket counts", expr):
        for i in ranges:
            mine = out.setdefault((i, str(r[f"_g{i}"])), {})
            prefix = f"{i}_"
            for k, v in r.items():
                if k.startswith(prefix):
                    mine[k[len(prefix) :]] = mine.get(k[len(prefix) :], 0) + int(v or 0)
    # A group none of whose rows the ask selects is no group of it (as the filter of
    # `_grouped_counts` leaves it out).
    return {key: row for key, row in out.items() if row["n"]}


def _group_bounds(g: ir.StringColumn, ranges: dict[str, Ranges]) -> Bounds:
    """Per bracket k, its lo in the row's group `g` (null where the group has fewer),
    and its hi where the group's bracket k is of one value."""
    bounds: Bounds = []
    for k in range(max(len(r) for r in ranges.values())):
        lo = g.cases(
            *((name, r[k][0]) for name, r in ranges.items() if k < len(r)),
            else_=ibis.null(dt.float64),
        )
        single = [
            (name, r[k][1]) for name, r in ranges.items() if k < len(r) and r[k][0] == r[k][1]
        ]
        hi = g.cases(*single, else_=ibis.null(dt.float64)) if single else None
        bounds.append((lo, None, hi))
    return bounds


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    """A result's rows as dicts, its list columns as NumPy arrays (no Python float per
    value)."""
    lists = [f.name for f in table.schema if _is_list(f.type)]
    rows: list[dict[str, Any]] = table.drop_columns(lists).to_pylist()
    for name in lists:
        col = table.column(name).combine_chunks()
        offsets = ints(col.offsets)
        values = floats(col.values)
        valid = valid_mask(col)
        for j, row in enumerate(rows):
            present = valid is None or valid[j]
            row[name] = values[offsets[j] : offsets[j + 1]] if present else None
    return rows


def _array(values: Sequence[float] | np.ndarray | None) -> np.ndarray:
    """A collected list as a float array (an empty one for null)."""
    return np.empty(0) if values is None else np.asarray(values, dtype=np.float64)


def _is_list(typ: pa.DataType) -> bool:

    return bool(pa.types.is_list(typ) or pa.types.is_large_list(typ))


def _value(ask: Ask) -> ir.NumericValue:
    """The ask's value, null on rows its filter leaves out (counts and sums skip nulls)."""
    v = ask.expr.cast(dt.float64)
    return v if ask.where is None else ibis.ifelse(ask.where, v, ibis.null(dt.float64))


def _bounds(ranges: Ranges, collect: bool) -> Bounds:
    """Per bracket (lo, hi when its values are collected, hi when it is of one value)."""
    return [
        (lo, hi if collect and lo < hi else None, hi if lo == hi else None) for lo, hi in ranges
    ]


def _flags(ctx: Ctx, v: ir.NumericColumn, bounds: Bounds) -> dict[str, ir.Scalar]:
    """`n`, and per bracket k: `b<k>` values under its lo, `l<k>` the values within
    [lo, hi] when they are collected and `h<k>` those at most hi for a bracket of one
    value (counted, not read). Bounds are numbers, or expressions giving each row's group its
    own (null where the group's bracket is of the other kind)."""
    exprs: dict[str, ir.Scalar] = {"n": v.count()}
    for k, (lo, read_hi, single_hi) in enumerate(bounds):
        exprs[f"b{k}"] = ctx.count(v < lo)
        if read_hi is not None:
            # Collected in this pass: no second scan to read the values back.
            exprs[f"l{k}"] = v.collect(where=(v >= lo) & (v <= read_hi))
        if single_hi is not None:
            exprs[f"h{k}"] = ctx.count(v <= single_hi)
    return exprs
