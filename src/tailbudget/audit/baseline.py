"""Regression check against a baseline log: per-percentile change with a bootstrap interval.

Point estimates are exact percentiles on the engine; the 95% interval of the change comes
from BOOTSTRAP resamples of a random sample of at most SAMPLE rows of each log (the
only place the audit pulls raw values, and only a sample)."""

from __future__ import annotations

import numpy as np

from tailbudget.audit.context import TOTAL, Ctx, fnum, to_arrow
from tailbudget.audit.quantiles import Ask, exact
from tailbudget.audit.report import BaselineRow, Snapshot
from tailbudget.logs.table import LogTable

SAMPLE = 20_000
BOOTSTRAP = 300
QS = {"p50": 0.5, "p95": 0.95, "p99": 0.99}


def _sample(ctx: Ctx, log: LogTable, n: int) -> np.ndarray:
    t = log.table
    expr = t.select(TOTAL)
    if n > SAMPLE:
        expr = (
            t.sample(min(1.0, 1.5 * SAMPLE / n), seed=ctx.config.seed).select(TOTAL).limit(SAMPLE)
        )
    col = to_arrow(log, expr).column(TOTAL)
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=float)


def compare(ctx: Ctx, snap: Snapshot, baseline: LogTable) -> list[BaselineRow]:
    """Rows p50, p95, p99: before (baseline), after (this log), change and its interval."""
    base = Ctx(baseline, ctx.config, parent=ctx)
    n_before = int(base.run_row("baseline", {"n": baseline.table.count()})["n"])
    q = exact(base, "baseline", [Ask("q", baseline.table[TOTAL], tuple(QS.values()))])["q"]
    before = [fnum(v) for v in q]
    a = _sample(ctx, ctx.log, snap.count)
    b = _sample(ctx, baseline, n_before)
    rng = np.random.default_rng(ctx.config.seed)
    qs = np.array(list(QS.values()))
    changes = np.empty((BOOTSTRAP, len(qs)))
    for i in range(BOOTSTRAP):
        ra = rng.choice(a, size=a.size, replace=True)
        rb = rng.choice(b, size=b.size, replace=True)
        changes[i] = np.quantile(ra, qs) - np.quantile(rb, qs)
    lo, hi = np.percentile(changes, [2.5, 97.5], axis=0)
    out = []
    for k, name in enumerate(QS):
        after = float(getattr(snap, name))
        change = after - before[k]
        # Centre the bootstrap spread on the exact change measured on the full logs.
        centre = float(np.quantile(a, qs[k]) - np.quantile(b, qs[k]))
        out.append(
            BaselineRow(
                percentile=name,
                before=before[k],
                after=after,
                change=change,
                ci_low=change + float(lo[k]) - centre,
                ci_high=change + float(hi[k]) - centre,
            )
        )
    return out
