"""`run_audit`: the whole audit in a handful of passes over the log, all on its engine.

Pass A (one aggregate): quantile grids of total and every stage, overlap share,
covariate quantiles, goodput. Pass B (one aggregate): slow/fast means, covariances for
every (stage, covariate), cold/warm figures. Then one grouped pass per covariate
(profiles), per cohort dimension, one for the per-minute timeline, and one aggregate for
all counterfactual p99s.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from tailbudget.audit import (
    cohorts,
    cold_start,
    goodput,
    hypotheses,
    ranking,
    recommendation,
    shape,
    snapshot,
    stages,
    sums,
    tail,
    weak,
)
from tailbudget.audit.baseline import compare
from tailbudget.audit.config import AuditConfig
from tailbudget.audit.context import SAMPLE_ROWS, TOTAL, Ctx
from tailbudget.audit.covariates import output_tokens_column
from tailbudget.audit.evidence import Evidence
from tailbudget.audit.fixes import catalog
from tailbudget.audit.report import AuditReport, Percentiles, Provenance, Rows
from tailbudget.errors import LogError
from tailbudget.logs.table import LogTable


def run_audit(log: LogTable, config: AuditConfig) -> AuditReport:
    """Audit a canonical log against an SLO and return the report (the JSON contract)."""
    local, drop = _materialize(log, config)
    try:
        return _audit(local, config)
    finally:
        drop()


def _materialize(log: LogTable, config: AuditConfig) -> tuple[LogTable, Any]:
    """On DuckDB, copy the columns the audit reads into a temp table once.

    The audit makes about ten passes; reading a Parquet file and re-checking every row
    each time costs more than one copy of the few columns it needs."""
    backend = log.backend
    if getattr(backend, "name", None) != "duckdb":
        return log, lambda: None
    cols = [TOTAL, "error", *(log.stage_column(s) for s in log.stages), *log.shape, *log.cohorts]
    if log.has_timestamp:
        cols.append("ts")
    tokens = output_tokens_column(log.table.columns)
    if tokens is not None:
        cols.append(tokens)
    keep = [c for c in dict.fromkeys(cols) if c in log.table.columns]
    name = f"_tailbudget_audit_{uuid.uuid4().hex[:12]}"
    if config.progress is not None:
        config.progress("loading")
    backend.create_table(name, log.table.select(*keep), temp=True)

    def drop() -> None:
        backend.raw_sql(f'DROP TABLE IF EXISTS "{name}"')

    return replace(log, table=backend.table(name)), drop


def _audit(log: LogTable, config: AuditConfig) -> AuditReport:
    ctx = Ctx(log, config)
    cat = catalog(config.fixes)  # validate overrides before any pass over the log
    cold = cold_start.cold_mask(ctx)
    a_exprs = {**snapshot.exprs(ctx), **stages.exprs(ctx), **goodput.exprs(ctx)}
    if cold is not None:
        a_exprs |= cold_start.exprs(ctx, cold)
    tps = _tokens_per_s(ctx, list(log.stages))
    if tps is not None:
        a_exprs["tps_q"] = tps
    sub = ctx.sampled()
    s_exprs = {**snapshot.sample_exprs(sub), **stages.sample_exprs(sub), **shape.exprs_a(sub)}
    if sub is ctx:
        a = ctx.run_row("percentiles", {**a_exprs, **s_exprs})
    else:
        a = {**ctx.run_row("percentiles", a_exprs), **sub.run_row("distributions", s_exprs)}
    if not a.get("n") or a.get("total_q") is None:
        raise LogError(
            f"{log.source or 'log'}: no usable rows to audit ({log.rows.rejected} rejected)"
        )
    snap, cdf, total_q = snapshot.build(ctx, a)
    stage_rows, overlap, grids = stages.build(ctx, a, snap.p99)
    covs = shape.build_a(ctx, a)
    names = [s.name for s in stage_rows]
    shape_names = names or [TOTAL]

    slow_r, fast_r = tail.ranges(ctx, total_q, snap.max)
    slow, fast = tail.masks(ctx, slow_r, fast_r)
    b = sums.run(ctx, shape_names, covs, slow, fast, cold)
    tail_sec = tail.build(b, names, slow_r, fast_r)
    shape_rows = shape.build_b(b, covs, shape_names, tail_sec.driver)
    profiles = shape.profiles(sub, covs, shape_rows)
    if sub is not ctx and profiles:
        ctx.notes.append(
            f"input-shape profiles come from a uniform sample of about {SAMPLE_ROWS:,} rows"
        )
    shape_rows = [
        r.model_copy(update={"profile": profiles.get((r.stage, r.covariate), [])})
        for r in shape_rows
    ]

    coh = cohorts.build(ctx, slow, snap.count, tail_sec.n_slow, snap.p99)
    minutes = cold_start.timeline(ctx, names) if log.has_timestamp else []
    cold_sec = None
    if log.has_timestamp:
        cold_sec = cold_start.build(ctx, a if cold is not None else None, snap.p99, minutes)
    else:
        ctx.refusals.append(
            "the log has no timestamps: no cold-start check and no per-minute timeline"
        )
    ev = Evidence(
        snapshot=snap,
        stages=stage_rows,
        grids=grids,
        tail=tail_sec,
        shape=shape_rows,
        covariates=covs,
        cold=cold_sec,
        timeline=minutes,
        names=names,
    )
    if cold is not None:
        n_cold = sums.total(b, "n", sums.cold_is(True))
        n_warm = sums.total(b, "n", sums.cold_is(False))
        if n_cold and n_warm:
            ev.cold_stage_means = {
                n: (
                    sums.total(b, f"sy{j}", sums.cold_is(True)) / n_cold,
                    sums.total(b, f"sy{j}", sums.cold_is(False)) / n_warm,
                )
                for j, n in enumerate(names)
            }
            ev.cold_total_means = (
                sums.total(b, "s_total", sums.cold_is(True)) / n_cold,
                sums.total(b, "s_total", sums.cold_is(False)) / n_warm,
            )
    if a.get("tps_q"):
        q = a["tps_q"]
        if q[0] is not None and q[1] is not None:
            ev.tokens_per_s = (float(q[0]), float(q[1]))
    ttft_budgets, tps_budget = _llm_budgets(config, names)
    hyps = hypotheses.find(ev, ttft_budgets, tps_budget)

    if not log.stages:
        ctx.refusals.append(
            "no per-stage columns: fixes cannot be ranked without stage timings to rewrite; "
            "map them with --stage COL (repeatable) or --stages GLOB"
        )
        ranked = []
    else:
        ranked = ranking.rank(ctx, ev, hyps, cat, slow_r, ev.cold_total_means)
    rec = recommendation.recommend(snap, config.slo, hyps, ranked)
    base = compare(ctx, snap, config.baseline) if config.baseline is not None else None
    report = AuditReport(
        provenance=_provenance(ctx),
        rows=Rows(
            total=log.rows.total or snap.count,
            used=log.rows.used or snap.count,
            rejected=log.rows.rejected,
            rejected_reasons=dict(log.rows.rejected_reasons),
        ),
        slo=Percentiles(**config.slo),
        snapshot=snap,
        cdf=cdf,
        stages=stage_rows,
        overlap=overlap,
        tail=tail_sec,
        shape=shape_rows,
        cohorts=coh,
        cold_start=cold_sec,
        hypotheses=hyps,
        ranking=ranked,
        refusals=ctx.refusals,
        recommendation=rec,
        goodput=goodput.build(ctx, a),
        baseline=base,
        gated=[p for p in config.gated if p in config.slo],
        service=config.service,
    )
    return weak.mark(report)


def _tokens_per_s(ctx: Ctx, names: list[str]) -> Any | None:
    decode = next((n for n in names if hypotheses.DECODE_NAME.search(n)), None)
    cols = list(ctx.t.columns)
    tokens = output_tokens_column(cols)
    if decode is None or tokens is None:
        return None
    d = ctx.col(decode)
    k = ctx.t[tokens].cast("float64")
    ok = (d > 0) & (k > 1)
    return (k / (d / 1000.0)).quantile([0.05, 0.5], where=ok)


def _llm_budgets(config: AuditConfig, names: list[str]) -> tuple[dict[str, float], float | None]:
    spec = next(iter(config.llm.values()), None)
    out: dict[str, float] = {}
    for n in names:
        if not hypotheses.TTFT_NAME.search(n):
            continue
        if spec is not None:
            out[n] = spec.ttft_ms + spec.tail_ms
        elif "p99" in config.stage_budgets.get(n, {}):
            out[n] = config.stage_budgets[n]["p99"]
    return out, (spec.tokens_per_s if spec is not None else None)


def _provenance(ctx: Ctx) -> Provenance:
    from tailbudget import __version__

    backend = ctx.log.backend
    engine = getattr(backend, "name", None) or "duckdb"
    notes = [*ctx.log.notes, *ctx.notes, f"{ctx.passes} passes over the log on {engine}"]
    return Provenance(
        source=ctx.log.source or "(in-memory table)",
        format=ctx.log.format or "table",
        engine=str(engine),
        generated_at=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        version=__version__,
        notes=[re.sub(r"\s+", " ", n) for n in notes],
    )
