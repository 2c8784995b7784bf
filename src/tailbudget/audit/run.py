"""`run_audit`: the whole audit in a handful of passes over the log, all on its engine.

The passes (passes.py) build the Evidence the hypothesis rules read; the ranking rewrites
the log once per fix in one more aggregate; the report is assembled from all of them.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from tailbudget.audit import hypotheses, passes, ranking, recommendation, weak
from tailbudget.audit.baseline import compare
from tailbudget.audit.config import AuditConfig
from tailbudget.audit.context import TOTAL, Ctx
from tailbudget.audit.covariates import output_tokens_column
from tailbudget.audit.evidence import Evidence
from tailbudget.audit.fixes import catalog
from tailbudget.audit.report import AuditReport, Percentiles, Provenance
from tailbudget.logs.table import LogTable, RowCounts


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
    fixes = catalog(config.fixes)  # validate overrides before any pass over the log
    dist = passes.distributions(ctx)
    split = passes.slow_vs_fast(ctx, dist)
    seen = passes.traffic(ctx, dist, split)
    ev = Evidence(
        snapshot=dist.snapshot,
        stages=tuple(dist.stages),
        grids=dist.grids,
        tail=split.tail,
        shape=tuple(split.shape),
        covariates=tuple(dist.covariates),
        cold=seen.cold,
        cold_stage_means=split.cold_stage_means,
        cold_total_means=split.cold_total_means,
        timeline=tuple(seen.timeline),
        names=tuple(dist.names),
        tokens_per_s=dist.tokens_per_s,
    )
    hyps = hypotheses.find(ev, *_llm_budgets(config, dist.names))
    if not log.stages:
        ctx.refusals.append(
            "no per-stage columns: fixes cannot be ranked without stage timings to rewrite; "
            "map them with --stage COL (repeatable) or --stages GLOB"
        )
        ranked = []
    else:
        ranked = ranking.rank(ctx, ev, hyps, fixes)
    snap = dist.snapshot
    base = compare(ctx, snap, config.baseline) if config.baseline is not None else None
    report = AuditReport(
        provenance=_provenance(ctx),
        rows=log.rows if log.rows.total else RowCounts(snap.count, snap.count, 0),
        slo=Percentiles(**config.slo),
        snapshot=snap,
        cdf=dist.cdf,
        stages=dist.stages,
        overlap=dist.overlap,
        tail=split.tail,
        shape=split.shape,
        cohorts=seen.cohorts,
        cold_start=seen.cold,
        hypotheses=hyps,
        ranking=ranked,
        refusals=ctx.refusals,
        recommendation=recommendation.recommend(snap, config.slo, hyps, ranked),
        goodput=dist.goodput,
        baseline=base,
        gated=[p for p in config.gated if p in config.slo],
        service=config.service,
    )
    return weak.mark(report)


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
