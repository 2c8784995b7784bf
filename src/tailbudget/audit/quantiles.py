"""Exact quantiles in bounded memory, on any Ibis engine.

An engine's exact quantile holds every value of the column in memory (DuckDB's
`quantile_cont` does not spill), so on a large log the audit finds each order statistic
in two passes instead:

0. where the audit's row sample brackets every wanted rank of an expression (see
   quantile_brackets.py), one aggregate counts the values under each bracket (and, when
   the brackets hold few values, collects them) and step 2 reads the values inside the
   others: no histogram;
1. a histogram: for every expression, the count, min and max of its values in
   log-spaced buckets (BUCKET_WIDTH wide, sign-aware, one grouped aggregate for all
   expressions); the cumulative counts say which bucket holds each wanted rank;
2. a select of the values inside those buckets only, sorted here: the order statistic
   is read off exactly. A bucket whose min equals its max, or whose wanted rank is its
   first or last value, needs no select. A bucket holding more than PULL_ROWS values is
   split into SPLIT linear sub-buckets by another histogram pass first.

Quantiles interpolate between order statistics at (n - 1) * q, as DuckDB's
`quantile_cont` and Spark's `percentile` do, so both methods give the same figures.
Logs of at most `AuditConfig.in_memory_rows` rows use the engine's own exact quantile.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import TYPE_CHECKING, Any

import ibis
import ibis.expr.datatypes as dt
import numpy as np

from tailbudget import _fmt as fmt
from tailbudget.audit import quantile_brackets
from tailbudget.audit.context import Ctx

if TYPE_CHECKING:
    import ibis.expr.types as ir

__all__ = ["Ask", "exact", "exact_grouped", "method_note"]

BUCKET_WIDTH = 0.005
"""Relative width of a histogram bucket: 0.5%."""
PULL_ROWS = 250_000
"""Most values read back for one bucket; a fuller bucket is split first."""
SPLIT = 1024
"""Linear sub-buckets a full bucket is split into."""
MAX_ROUNDS = 12
"""Splits needed at most: each narrows a bucket 1024-fold, and a double has 52 bits."""
_TINY = 1e-9
"""Values within this of 0 share bucket 0 (e.g. stages that did not run)."""
_INV_LOG = 1.0 / math.log1p(BUCKET_WIDTH)
_OFFSET = math.ceil(-math.log(_TINY) * _INV_LOG) + 1
"""Keeps bucket keys of positive values above 0 and of negative ones below 0."""
_ALL = ""
"""The group of an ungrouped ask."""


@dataclass(frozen=True)
class Ask:
    """Exact quantiles `qs` of `expr` over the rows `where` selects (nulls skipped), per
    value of the string expression `by` when given."""

    key: str
    expr: ir.NumericValue
    qs: tuple[float, ...]
    where: ir.BooleanValue | None = None
    by: ir.StringValue | None = None


def method_note(ctx: Ctx) -> str:
    """How the audit's exact percentiles are computed, for the provenance."""
    if _in_memory(ctx):
        return (
            "exact percentiles (SLO verdicts, stages, cohorts, counterfactuals): the engine's "
            f"quantile over every value ({fmt.counted(ctx.log.rows.used, 'row')}, at most "
            f"{ctx.config.in_memory_rows:,} are read whole)"
        )
    return (
        "exact percentiles (SLO verdicts, stages, cohorts, counterfactuals) in bounded "
        "memory: the row sample brackets each wanted rank, exact counts check the bracket, "
        "and the values inside it are read back (by the counting pass itself when they are "
        "few) and sorted (where no bracket can be placed, "
        f"a histogram of {BUCKET_WIDTH:.1%}-wide log buckets finds the bucket holding the "
        "rank first)"
    )


def exact(
    ctx: Ctx, label: str, asks: Sequence[Ask], also: dict[str, ir.Scalar] | None = None
) -> dict[str, Any]:
    """Per ask, its quantiles in the order of `qs` (None when it selects no value).

    `also` are more aggregates over the log, computed in a pass the quantiles make anyway
    where there is one (else in one of their own); their values join the result."""
    also = also or {}
    if _in_memory(ctx) or not asks:
        exprs = {a.key: a.expr.quantile(list(a.qs), where=a.where) for a in asks}
        row = ctx.run_row(label, {**also, **exprs}) if also or exprs else {}
        return {**row, **{a.key: _as_list(row[a.key], len(a.qs)) for a in asks}}
    search = _Search(ctx, label, list(asks), also)
    found = search.run()
    quantiles = {a.key: found.get((i, _ALL), [None] * len(a.qs)) for i, a in enumerate(asks)}
    return {**search.also_row, **quantiles}


def exact_grouped(
    ctx: Ctx, label: str, asks: Sequence[Ask]
) -> dict[str, dict[str, list[float | None]]]:
    """Per ask (each with `by`), {group value: its quantiles}."""
    if not asks:  # a log without cohort dimensions: no pass
        return {}
    if _in_memory(ctx):
        out: dict[str, dict[str, list[float | None]]] = {}
        for a in asks:
            t = ctx.t if a.where is None else ctx.t.filter(a.where)
            expr = t.group_by(_g=a.by).aggregate(_q=a.expr.quantile(list(a.qs)))
            rows = ctx.run_frame(f"{label} {a.key}", expr)
            out[a.key] = {str(r["_g"]): _as_list(r["_q"], len(a.qs)) for r in rows}
        return out
    found = _Search(ctx, label, list(asks)).run()
    grouped: dict[str, dict[str, list[float | None]]] = {a.key: {} for a in asks}
    for (i, group), values in found.items():
        grouped[asks[i].key][group] = values
    return grouped


def _in_memory(ctx: Ctx) -> bool:
    return ctx.log.rows.used <= ctx.config.in_memory_rows


def _as_list(value: Any, n: int) -> list[float | None]:
    if value is None:
        return [None] * n
    if not isinstance(value, list):
        value = [value]
    return [None if v is None else float(v) for v in value]


@dataclass
class _Region:
    """Values of one ask and group within [lo, hi] (all of them when lo is None), of
    which `below` lie under lo, and the ranks (0-based, over the whole group) wanted."""

    ask: int
    group: str
    lo: float | None
    hi: float | None
    below: int
    ranks: list[int]
    guessed: bool = False
    """Placed by a sample bracket: the ranks are checked against the values read."""


@dataclass
class _Search:
    """The rounds of histogram and select passes for a set of asks."""

    ctx: Ctx
    label: str
    asks: list[Ask]
    also: dict[str, ir.Scalar] = field(default_factory=dict)
    also_row: dict[str, Any] = field(default_factory=dict)
    order: dict[tuple[int, str], dict[int, float]] = field(default_factory=dict)
    counts: dict[tuple[int, str], int] = field(default_factory=dict)

    def run(self) -> dict[tuple[int, str], list[float | None]]:
        """Quantiles per (ask index, group)."""
        pulls, pending = self._bracketed()
        for _ in range(MAX_ROUNDS):
            more, pending = self._histogram(pending) if pending else ([], [])
            missed = self._pull(pulls + more)
            pulls = []
            # A bracket the sample misplaced: its ask goes back to the histogram.
            pending += [self._first(i) for i in missed]
            if not pending:
                break
        else:
            raise RuntimeError(f"exact quantiles did not converge in {MAX_ROUNDS} rounds")
        out: dict[tuple[int, str], list[float | None]] = {}
        for key, n in self.counts.items():
            stats = self.order[key]
            out[key] = [_interpolate(stats, n, q) for q in self.asks[key[0]].qs]
        return out

    def _bracketed(self) -> tuple[list[_Region], list[_Region]]:
        """(regions to read, first-round regions for the histogram): the asks the row
        sample brackets skip the histogram (quantile_brackets.py)."""
        settled, extra = quantile_brackets.settle(
            self.ctx, self.label, self.asks, _ranks, quantile_brackets.MOST_VALUES, self.also
        )
        if extra is None and self.also:  # no counting pass to carry them
            extra = self.ctx.run_row(f"{self.label}: figures", self.also)
        self.also_row = extra or {}
        pulls: list[_Region] = []
        for (i, group), done in settled.items():
            self.counts[(i, group)] = done.n
            stats = self.order[(i, group)] = {}
            for b in done.brackets:
                if b.known:  # one value throughout, or the values were collected
                    stats.update({r: b.value(r) for r in b.ranks})
                else:
                    pulls.append(_Region(i, group, b.lo, b.hi, b.below, list(b.ranks), True))
        done_asks = {i for i, _ in settled}
        return pulls, [self._first(i) for i in range(len(self.asks)) if i not in done_asks]

    def _first(self, ask: int) -> _Region:
        """The first-round region of an ask: the histogram over all its values."""
        for key in [k for k in self.counts if k[0] == ask]:
            del self.counts[key]
            self.order.pop(key, None)
        return _Region(ask, _ALL, None, None, 0, [])

    def _values(self, region: _Region) -> tuple[ir.FloatingColumn, ir.BooleanColumn]:
        """(value expression, row filter) of a region."""
        ask = self.asks[region.ask]
        v = ask.expr.cast(dt.float64)
        cond = v.notnull()
        if ask.where is not None:
            cond = cond & ask.where
        if ask.by is not None and region.lo is not None:
            cond = cond & (ask.by == region.group)
        if region.lo is not None:
            cond = cond & v.between(region.lo, region.hi)
        return v, cond

    def _group(self, region: _Region) -> ir.StringValue:
        by = self.asks[region.ask].by
        if by is not None and region.lo is None:
            return by.cast(dt.string)
        return ibis.literal(region.group, dt.string)

    def _histogram(self, regions: list[_Region]) -> tuple[list[_Region], list[_Region]]:
        """One grouped pass over every region; returns (regions to read, regions to split)."""
        t = self.ctx.t
        parts = []
        for rid, region in enumerate(regions):
            v, cond = self._values(region)
            rows = t.filter(cond).select(
                _g=self._group(region), _b=_bucket(v, region).cast(dt.int64), _v=v
            )
            # Grouped per region, then stacked: small hash tables, not one keyed by region.
            parts.append(
                rows.group_by("_g", "_b").aggregate(
                    _r=ibis.literal(rid, dt.int64),
                    _n=rows["_v"].count(),
                    _lo=rows["_v"].min(),
                    _hi=rows["_v"].max(),
                )
            )
        expr = parts[0] if len(parts) == 1 else ibis.union(*parts, distinct=False)
        rows = self.ctx.run_frame(f"{self.label}: histogram", expr)
        by_region: dict[tuple[int, str], list[tuple[int, int, float, float]]] = {}
        for r in rows:
            key = (int(r["_r"]), str(r["_g"]))
            by_region.setdefault(key, []).append((int(r["_b"]), int(r["_n"]), r["_lo"], r["_hi"]))
        pulls: list[_Region] = []
        splits: list[_Region] = []
        for (rid, group), buckets in by_region.items():
            region = regions[rid]
            if region.lo is None:  # the first round: every rank of the quantiles wanted
                n = sum(b[1] for b in buckets)
                key = (region.ask, group)
                self.counts[key] = n
                self.order[key] = {}
                region = _Region(region.ask, group, None, None, 0, _ranks(n, self.asks[region.ask]))
            self._place(region, sorted(buckets), pulls, splits)
        return pulls, splits

    def _place(
        self,
        region: _Region,
        buckets: list[tuple[int, int, float, float]],
        pulls: list[_Region],
        splits: list[_Region],
    ) -> None:
        """Read each wanted rank off its bucket, or queue the bucket to be read or split."""
        stats = self.order[(region.ask, region.group)]
        ends = list(accumulate(b[1] for b in buckets))
        queued: dict[int, _Region] = {}
        for rank in region.ranks:
            i = bisect_right(ends, rank - region.below)
            _, n, lo, hi = buckets[i]
            below = region.below + (ends[i - 1] if i else 0)
            local = rank - below
            if lo == hi or local == 0:
                stats[rank] = lo
            elif local == n - 1:
                stats[rank] = hi
            elif i in queued:
                queued[i].ranks.append(rank)
            else:
                queued[i] = _Region(region.ask, region.group, lo, hi, below, [rank])
                (pulls if n <= PULL_ROWS else splits).append(queued[i])

    def _pull(self, regions: list[_Region]) -> set[int]:
        """Read the values of small buckets (one select for all) and take the ranks;
        returns the asks whose guessed bracket missed a rank."""
        if not regions:
            return set()
        # Each ask and group is one sorted run, and each region a slice of it.
        expr, keys = self._pull_expr(regions)
        table = self.ctx.run_arrow(f"{self.label}: values", expr)
        runs = {keys[i]: run for (i, _), run in quantile_brackets.sorted_runs(table).items()}
        missed: set[int] = set()
        for region in regions:
            run = runs.get((region.ask, region.group), np.empty(0))
            assert region.lo is not None and region.hi is not None  # a pulled region is bounded
            left = np.searchsorted(run, region.lo, side="left")
            mine = run[left : np.searchsorted(run, region.hi, side="right")]
            if region.guessed and not all(0 <= r - region.below < len(mine) for r in region.ranks):
                missed.add(region.ask)
                continue
            stats = self.order[(region.ask, region.group)]
            for rank in region.ranks:
                stats[rank] = float(mine[rank - region.below])
        return missed

    def _pull_expr(self, regions: list[_Region]) -> tuple[ir.Table, list[tuple[int, str]]]:
        """One select per ask and group of the values inside any of its regions: a scan
        each, not one per bucket (a group stays its own select, which the engine can
        filter on first). Each select's rows carry its index in the (ask, group) list
        returned with it, not the group's name."""
        t = self.ctx.t
        mine: dict[tuple[int, str], list[_Region]] = {}
        for region in regions:
            mine.setdefault((region.ask, region.group), []).append(region)
        parts = []
        for k, ((i, _), held) in enumerate(mine.items()):
            v = self.asks[i].expr.cast(dt.float64)
            inside = ibis.or_(*(self._values(r)[1] for r in held))
            parts.append(t.filter(inside).select(_a=ibis.literal(k, dt.int32), _v=v))
        expr = parts[0] if len(parts) == 1 else ibis.union(*parts, distinct=False)
        return expr, list(mine)


def _ranks(n: int, ask: Ask) -> list[int]:
    """0-based order statistics the quantiles of `ask` interpolate between."""
    out: set[int] = set()
    for q in ask.qs:
        h = (n - 1) * q
        out.add(math.floor(h))
        out.add(min(math.floor(h) + 1, n - 1))
    return sorted(r for r in out if 0 <= r < n)


def _interpolate(stats: dict[int, float], n: int, q: float) -> float | None:
    if n == 0:
        return None
    h = (n - 1) * q
    r0 = math.floor(h)
    r1 = min(r0 + 1, n - 1)
    lo, hi = stats[r0], stats[r1]
    return lo + (hi - lo) * (h - r0)


def _bucket(v: ir.FloatingColumn, region: _Region) -> ir.NumericColumn:
    """Bucket key, increasing with the value: log-spaced over the whole range, linear
    within a region being split."""
    if region.lo is None:
        return ibis.cases(
            (v > _TINY, (v.ln() * _INV_LOG).floor() + _OFFSET),
            (v < -_TINY, -((-v).ln() * _INV_LOG).floor() - _OFFSET),
            else_=0,
        )
    assert region.hi is not None
    scale = SPLIT / (region.hi - region.lo)
    return ibis.least(((v - region.lo) * scale).floor(), SPLIT - 1)
