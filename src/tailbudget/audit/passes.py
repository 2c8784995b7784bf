"""The audit's passes over the log, each giving one frozen record of figures.

1. distributions (one aggregate, plus one on a row sample for large logs): exact
   percentiles of total and every stage, overlap share, covariate quantiles, goodput,
   the warm-request percentiles, decode rate;
2. slow vs fast (one grouped aggregate of sums, plus one grouped pass per covariate for
   its profile): the tail section and every input-shape fit;
3. traffic (one grouped pass per cohort dimension, one per minute): cohorts, timeline,
   cold start.
Counterfactuals (ranking.py) and the baseline (baseline.py) add one pass each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tailbudget.audit import (
    cohorts,
    cold_start,
    goodput,
    growth,
    hypotheses,
    objectives,
    quantiles,
    sample_stats,
    shape,
    snapshot,
    stages,
    sums,
)
from tailbudget.audit import tail as tail_step
from tailbudget.audit.context import SAMPLE_ROWS, TOTAL, Ctx
from tailbudget.audit.covariates import output_tokens_column
from tailbudget.audit.report import (
    CdfPoint,
    CohortRow,
    ColdStart,
    Goodput,
    ObjectiveRow,
    Overlap,
    ShapeRow,
    Snapshot,
    StageRow,
    Tail,
)
from tailbudget.errors import LogError


@dataclass(frozen=True)
class Distributions:
    """Pass 1: where the log's latencies lie."""

    snapshot: Snapshot
    cdf: list[CdfPoint]
    total_q: dict[float, float]
    """Exact quantiles of the total by q (snapshot.EXACT_QS)."""
    stages: list[StageRow]
    overlap: Overlap
    grids: dict[str, list[float]]
    covariates: list[shape.Covariate]
    goodput: Goodput
    warm: dict[str, Any] | None
    """Cold-window count and warm percentiles (cold_start.exprs), when events were given."""
    tokens_per_s: tuple[float, float] | None
    objectives: list[ObjectiveRow]
    """Every objective measured (audit/objectives.py), folded into this pass."""
    metric_cdfs: dict[str, list[CdfPoint]]
    span_s: tuple[float, float] | None = None
    """The whole minutes the timestamps cover (epoch s), when the log has them."""

    @property
    def names(self) -> list[str]:
        """Stages measured, `unattributed` included when derived."""
        return [s.name for s in self.stages]


@dataclass(frozen=True)
class SlowVsFast:
    """Pass 2: what differs between slow and fast requests, and what shapes latency."""

    tail: Tail
    shape: list[ShapeRow]
    cold_stage_means: dict[str, tuple[float, float]]
    cold_total_means: tuple[float, float] | None
    event_growth: dict[str, growth.Growth]
    """Each slow-vs-fast stage's growth after the last event against before it (no
    baseline given), from the same pass."""


@dataclass(frozen=True)
class Traffic:
    """Pass 3: cohorts, the per-minute timeline and the cold-start check."""

    cohorts: list[CohortRow]
    timeline: list[dict[str, Any]]
    cold: ColdStart | None


def distributions(ctx: Ctx) -> Distributions:
    """Pass 1. Raises LogError when no row is usable."""
    cold = cold_start.cold_mask(ctx)
    exprs = {
        **snapshot.exprs(ctx),
        **stages.exprs(ctx),
        **goodput.exprs(ctx),
        **shape.count_exprs(ctx),
    }
    asks = [*snapshot.asks(ctx), *stages.asks(ctx), *objectives.asks(ctx)]
    exprs |= objectives.exprs(ctx)
    if cold is not None:
        exprs |= cold_start.exprs(ctx, cold)
        asks += cold_start.asks(ctx, cold)
    tps = _tokens_per_s_ask(ctx)
    if tps is not None:
        asks.append(tps)
    sub = ctx.sampled()
    sample_exprs = {
        **snapshot.sample_exprs(sub),
        **stages.sample_exprs(sub),
        **shape.covariate_exprs(sub),
        **objectives.cdf_exprs(sub),
    }
    # The figures ride on a pass the percentiles make anyway: one scan fewer.
    if sub is ctx:
        row = quantiles.exact(ctx, "percentiles", asks, also={**exprs, **sample_exprs})
    else:
        row = quantiles.exact(ctx, "percentiles", asks, also=exprs)
        row |= sample_stats.on_sample(sub, "distributions", sample_exprs)
    if not row.get("n"):
        log = ctx.log
        raise LogError(
            f"{log.source or 'log'}: no usable rows to audit ({log.rows.rejected} rejected)"
        )
    ctx.notes.append(quantiles.method_note(ctx))
    snap, cdf, total_q = snapshot.build(ctx, row)
    stage_rows, overlap, grids = stages.build(ctx, row, snap.p99)
    q = row.get("tps_q") or [None, None]
    obj_rows, gp_update = objectives.build(ctx, row)
    return Distributions(
        snapshot=snap,
        cdf=cdf,
        total_q=total_q,
        stages=stage_rows,
        overlap=overlap,
        grids=grids,
        covariates=shape.covariates(ctx, row),
        goodput=goodput.build(ctx, row).model_copy(update=gp_update),
        warm=row if cold is not None else None,
        tokens_per_s=(float(q[0]), float(q[1])) if None not in q else None,
        objectives=obj_rows,
        metric_cdfs=objectives.distributions(ctx, row),
        span_s=_minutes_span(ctx, row),
    )


def _minutes_span(ctx: Ctx, row: dict[str, Any]) -> tuple[float, float] | None:
    """From the first timestamp's minute to the end of the last one's (epoch s)."""
    lo, hi = row.get("ts_min"), row.get("ts_max")
    if not ctx.log.has_timestamp or lo is None or hi is None:
        return None
    return math.floor(float(lo) / 60) * 60.0, (math.floor(float(hi) / 60) + 1) * 60.0


def slow_vs_fast(ctx: Ctx, dist: Distributions) -> SlowVsFast:
    """Pass 2: group sums for the tail, fits and cold means, then the fits' profiles."""
    slow_r, fast_r = tail_step.ranges(ctx, dist.total_q, dist.snapshot.max)
    slow, fast = tail_step.masks(ctx, slow_r, fast_r)
    names = dist.names
    cut = None if ctx.config.baseline is not None else growth.event_cut(ctx, dist.span_s)
    after = None if cut is None else ctx.t["ts"] >= ctx.instant(cut.epoch_s)
    group_sums = sums.group_sums(
        ctx, names or [TOTAL], dist.covariates, slow, fast, cold_start.cold_mask(ctx), after
    )
    tail = tail_step.build(group_sums, names, slow_r, fast_r)
    grown = {} if cut is None else growth.around_event(group_sums, tail.deltas, cut)
    if names and not tail.deltas:
        ctx.refusals.append(
            f"slow vs fast: {tail.n_slow} slow and {tail.n_fast} fast requests, so no "
            "stage comparison and no tail driver (an empty group has no mean)"
        )
    fits = shape.fits(group_sums, tail.driver)
    sub = ctx.sampled()
    profiles = shape.profiles(sub, dist.covariates, fits)
    if sub is not ctx and profiles:
        ctx.notes.append(
            f"input-shape profiles come from a uniform sample of about {SAMPLE_ROWS:,} rows"
        )
    fits = [
        r.model_copy(update={"profile": profiles.get((r.stage, r.covariate), [])}) for r in fits
    ]
    stage_means, total_means = cold_start.means(group_sums, names)
    return SlowVsFast(
        tail=tail,
        shape=fits,
        cold_stage_means=stage_means,
        cold_total_means=total_means,
        event_growth=grown,
    )


def traffic(ctx: Ctx, dist: Distributions, split: SlowVsFast) -> Traffic:
    """Pass 3: one grouped pass per cohort dimension, then the timeline and cold start."""
    slow, _ = tail_step.masks(ctx, split.tail.slow_range_ms, split.tail.fast_range_ms)
    snap = dist.snapshot
    cohort_rows = cohorts.build(ctx, slow, snap.count, split.tail.n_slow, snap.p99)
    if not ctx.log.has_timestamp:
        ctx.refusals.append(
            "the log has no timestamps: no cold-start check and no per-minute timeline"
        )
        return Traffic(cohorts=cohort_rows, timeline=[], cold=None)
    minutes = cold_start.timeline(ctx, dist.names)
    cold = cold_start.build(ctx, dist.warm, snap.p99, minutes)
    return Traffic(cohorts=cohort_rows, timeline=minutes, cold=cold)


def _tokens_per_s_ask(ctx: Ctx) -> quantiles.Ask | None:
    """p5 and p50 of output tokens per second of decode, when the log has both."""
    decode = next((n for n in ctx.log.stages if hypotheses.DECODE_NAME.search(n)), None)
    tokens = output_tokens_column(list(ctx.t.columns))
    if decode is None or tokens is None:
        return None
    d = ctx.col(decode)
    k = ctx.t[tokens].cast("float64")
    return quantiles.Ask("tps_q", k / (d / 1000.0), (0.05, 0.5), where=(d > 0) & (k > 1))
