"""Per-stage growth: the change of each stage's mean against a baseline log, or after an
event against before it, with a 95% interval (Welch), from one aggregate per side.

Means, not percentiles: a fault in one service adds time to the requests that reach it,
and a mean change of a few ms per request is measurable on a minute of traffic where a
per-stage p99 is one or two traces."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import ibis

from tailbudget.audit.context import Ctx, fnum
from tailbudget.logs.table import LogTable

__all__ = ["Growth", "against_baseline", "around_event"]

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
    return ctx.run_row(label, _moment_exprs(ctx, names))


def _moment_exprs(
    ctx: Ctx, names: list[str], where: Any = None, prefix: str = ""
) -> dict[str, Any]:
    """Count, sum and sum of squares of each stage over the rows `where` selects."""
    t = ctx.t
    exprs: dict[str, Any] = {"n": t.count() if where is None else ctx.count(where)}
    for j, name in enumerate(names):
        y = ctx.col(name).fill_null(0.0)
        if where is not None:
            y = ibis.ifelse(where, y, ibis.null("float64"))
        exprs[f"s{j}"] = y.sum()
        exprs[f"q{j}"] = (y * y).sum()
    return {prefix + k: v for k, v in exprs.items()}


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


def around_event(ctx: Ctx, names: list[str], span: tuple[float, float]) -> dict[str, Growth]:
    """Growth after the last event inside the log's time range (epoch s) against before it."""
    inside = [(t, e) for t, e in ctx.config.events if span[0] < _epoch(t) < span[1]]
    if not inside or not names:
        return {}
    when, event = inside[-1]
    ts, cut = ctx.t["ts"], ctx.instant(_epoch(when))
    against = f"before {event} at {when.isoformat(timespec='seconds')}"
    # Both sides in one pass over the log.
    row = ctx.run_row(
        "around event",
        {
            **_moment_exprs(ctx, names, (ts >= cut).fill_null(False), "a_"),
            **_moment_exprs(ctx, names, (ts < cut).fill_null(False), "b_"),
        },
    )
    after = {k[2:]: v for k, v in row.items() if k.startswith("a_")}
    before = {k[2:]: v for k, v in row.items() if k.startswith("b_")}
    out = {}
    for j, name in enumerate(names):
        g = _change(after, before, j, against)
        if g is not None:
            out[name] = g
    return out


def _epoch(t: datetime) -> float:
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()
