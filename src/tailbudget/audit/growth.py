"""Per-stage growth: the change of each stage's mean against a baseline log, or after an
event against before it (from the slow-vs-fast sums), with a 95% interval (Welch).

Means, not percentiles: a fault in one service adds time to the requests that reach it,
and a mean change of a few ms per request is measurable on a minute of traffic where a
per-stage p99 is one or two traces."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import ibis

from tailbudget.audit.context import Ctx, fnum
from tailbudget.logs.table import LogTable

if TYPE_CHECKING:
    from tailbudget.audit.report import Delta
    from tailbudget.audit.sums import GroupSums

__all__ = ["EventCut", "Growth", "against_baseline", "around_event", "event_cut"]

Z95 = 1.96


@dataclass(frozen=True)
class Growth:
    """Change of one stage's mean (ms per request): after - before, with its interval."""

    before: float
    after: float
    change: float
    low: float
    high: float
    n_before: int
    n_after: int
    against: str
    """What "before" is: "baseline" or "before <event> at <time>"."""

    @property
    def significant(self) -> bool:
        """The interval excludes no change, upwards."""
        return self.low > 0


def _moments(ctx: Ctx, names: list[str], label: str) -> dict[str, Any]:
    """Count, sum and sum of squares of each stage over the log (one pass)."""
    exprs: dict[str, Any] = {"n": ctx.t.count()}
    for j, name in enumerate(names):
        y = ctx.col(name).fill_null(0.0)
        exprs[f"s{j}"] = y.sum()
        exprs[f"q{j}"] = (y * y).sum()
    return ctx.run_row(label, exprs)


def _change(a: dict[str, Any], b: dict[str, Any], j: int, against: str) -> Growth | None:
    na, nb = int(fnum(a.get("n"))), int(fnum(b.get("n")))
    if na < 2 or nb < 2:
        return None
    ma, mb = fnum(a.get(f"s{j}")) / na, fnum(b.get(f"s{j}")) / nb
    va = max(fnum(a.get(f"q{j}")) / na - ma * ma, 0.0) * na / (na - 1)
    vb = max(fnum(b.get(f"q{j}")) / nb - mb * mb, 0.0) * nb / (nb - 1)
    half = Z95 * math.sqrt(va / na + vb / nb)
    change = ma - mb
    return Growth(mb, ma, change, change - half, change + half, nb, na, against)


def against_baseline(ctx: Ctx, baseline: LogTable, names: list[str]) -> dict[str, Growth]:
    """Growth of every stage the baseline also has (a span table's absent stage is 0 ms)."""
    base = Ctx(baseline, ctx.config, parent=ctx)
    spans = baseline.attribution != ""
    present = [n for n in names if n in baseline.stages or spans]
    if not present:
        return {}
    after = _moments(ctx, present, "stage growth")
    exprs: dict[str, Any] = {"n": baseline.table.count()}
    for j, name in enumerate(present):
        col = baseline.stage_column(name)
        if col in baseline.table.columns:
            y = baseline.table[col].cast("float64").fill_null(0.0)
            exprs[f"s{j}"] = y.sum()
            exprs[f"q{j}"] = (y * y).sum()
        else:  # never on the baseline's path: 0 ms in every request
            exprs[f"s{j}"] = ibis.literal(0.0)
            exprs[f"q{j}"] = ibis.literal(0.0)
    before = base.run_row("baseline stages", exprs)
    out = {}
    for j, name in enumerate(present):
        g = _change(after, before, j, "baseline")
        if g is not None:
            out[name] = g
    return out


@dataclass(frozen=True)
class EventCut:
    """The last event inside the log's time range, whose before and after are compared."""

    epoch_s: float
    against: str


def event_cut(ctx: Ctx, span: tuple[float, float] | None) -> EventCut | None:
    """The last event strictly inside `span` (epoch s), if any."""
    if span is None:
        return None
    inside = [(t, e) for t, e in ctx.config.events if span[0] < _epoch(t) < span[1]]
    if not inside:
        return None
    when, event = inside[-1]
    return EventCut(_epoch(when), f"before {event} at {when.isoformat(timespec='seconds')}")


def around_event(sums: GroupSums, deltas: Sequence[Delta], cut: EventCut) -> dict[str, Growth]:
    """Growth of each stage after the cut against before it, from the slow-vs-fast sums
    (grouped by side of the cut too: no pass of its own)."""
    out = {}
    for d in deltas:
        j = sums.names.index(d.stage)
        # Under the moment names `_change` reads: n, s<j> (sum), q<j> (sum of squares).
        after, before = (
            {
                "n": sums.total("n", after=side),
                f"s{j}": sums.total(f"sy{j}", after=side),
                f"q{j}": sums.total(f"syy{j}", after=side),
            }
            for side in (True, False)
        )
        g = _change(after, before, j, cut.against)
        if g is not None:
            out[d.stage] = g
    return out


def _epoch(t: datetime) -> float:
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()
