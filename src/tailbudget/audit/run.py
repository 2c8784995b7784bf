"""`run_audit`: the whole audit in a handful of passes over the log, all on its engine.

The passes (passes.py) build the Evidence the hypothesis rules read; the ranking rewrites
the log once per fix in one more aggregate; the report is assembled from all of them.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

from tailbudget._version import __version__
from tailbudget.audit import (
    canary,
    classes,
    cold_start,
    culprits,
    e2e_drivers,
    hypotheses,
    llm_causes,
    objectives,
    passes,
    prefill,
    ranking,
    recommendation,
    suspects,
    weak,
)
from tailbudget.audit.baseline import compare
from tailbudget.audit.config import AuditConfig
from tailbudget.audit.context import TOTAL, Ctx, cohort_label
from tailbudget.audit.covariates import output_tokens_column
from tailbudget.audit.evidence import Evidence
from tailbudget.audit.fixes import catalog
from tailbudget.audit.gap import LLM_METRICS
from tailbudget.audit.report import (
    AuditReport,
    Culprit,
    Goodput,
    Hypothesis,
    ObjectiveRow,
    Percentiles,
    Provenance,
    RankedFix,
    Recommendation,
    Snapshot,
)
from tailbudget.budget.model import Budget
from tailbudget.logs.bench_rows import DECODE_BATCH
from tailbudget.logs.engine import engine_name
from tailbudget.logs.scratch import scratch_copy
from tailbudget.logs.table import LogTable, RowCounts
from tailbudget.logs.units import check_unit


def run_audit(log: LogTable, config: AuditConfig) -> AuditReport:
    """Audit a canonical log against an SLO and return the report (the JSON contract)."""
    cols = [TOTAL, "error", *(log.stage_column(s) for s in log.stages), *log.shape, *log.cohorts]
    by = config.classes.by if config.classes is not None else None
    if by is not None and by not in log.cohorts and by in log.table.columns:
        # The class column rides along as a cohort label (the API asks the reader for it).
        log = replace(log, cohorts=(*log.cohorts, by))
        cols.append(by)
    if log.has_timestamp:
        cols.append("ts")
    tokens = output_tokens_column(log.table.columns)
    if tokens is not None:
        cols.append(tokens)
    cols += [c for c in (*objectives.COLUMNS, DECODE_BATCH) if c in log.table.columns]
    keep = [c for c in dict.fromkeys(cols) if c in log.table.columns]
    if config.progress is not None and engine_name(log.backend) == "duckdb":
        config.progress("loading")
    # About a dozen passes read the same few columns: reading the log and checking its
    # rows once is cheaper than each pass doing it again.
    name = f"_tailbudget_audit_{uuid.uuid4().hex[:12]}"
    table = log.table.select(*keep)
    # Cohort columns are copied as the labels the cohort passes group by (few values: as
    # ENUM codes), so no pass turns each row's value into text again.
    table = table.mutate(**{dim: cohort_label(table[dim]) for dim in log.cohorts})
    if (flags := cold_start.window_flags(table, config)) is not None:
        table = table.mutate(**{cold_start.COLD_COLUMN: flags})
    with scratch_copy(log.backend, table, name, labels=log.cohorts) as scratch:
        ctx = Ctx(
            replace(log, table=scratch.table),
            config,
            sampler=scratch.sample,
            labelled=frozenset(log.cohorts),
        )
        return _audit(ctx)


ERROR_MAJORITY = 0.5
"""Share of error requests from which the audit draws no latency hypothesis or fix."""


def _audit(ctx: Ctx) -> AuditReport:
    log, config = ctx.log, ctx.config
    fixes = catalog(config.fixes)  # validate overrides before any pass over the log
    objectives.check(ctx)
    dist = passes.distributions(ctx)
    snap = dist.snapshot
    check_unit(log.unit_stated, snap.p50, snap.p99, snap.max)
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
    failing = snap.count > 0 and snap.errors >= ERROR_MAJORITY * snap.count
    if failing:
        # The times of failed requests say how fast they failed, not what slows service:
        # no latency hypothesis or fix (a queue bound, a shorter prompt) is drawn from them.
        ctx.refusals.append(
            f"{snap.errors:,} of {snap.count:,} requests are errors: their latencies do not say "
            "what slows the service, so no hypotheses and no fixes; fix the errors first"
        )
        hyps, ranked = [], list[RankedFix]()
    elif not log.stages:
        ctx.refusals.append(
            "no per-stage columns: fixes cannot be ranked without stage timings to rewrite; "
            "map them with stages (column names or globs)"
        )
        ranked = []
    else:
        ranked = ranking.rank(ctx, ev, hyps, fixes)
    llm = llm_causes.find(ctx, dist.objectives, fixes, snap, dist.goodput.share)
    rows = dist.objectives if failing else e2e_drivers.with_drivers(ctx, dist.objectives)
    if not failing:
        hyps = llm_causes.merged(llm.hypotheses, hyps)
        ranked = sorted([*ranked, *llm.ranking], key=lambda f: -f.score)
    base = compare(ctx, snap, config.baseline) if config.baseline is not None else None
    found, nest = suspects.collect(ctx, split.tail, dist.overlap.nested, split.event_growth)
    rec = _recommend(
        config, snap, hyps, ranked, failing, rows, llm, found, dist.goodput,
        ctx.log.rows.failed,
    )  # fmt: skip
    judged = None
    if config.baseline is not None and dist.objectives:
        judged = canary.judge(ctx, rows, dist.goodput.good or 0, config.baseline)
    class_rows, class_notes = classes.measure(ctx)
    ctx.notes.extend([*class_notes, *prefill.warm_notes(ctx)])
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
        recommendation=rec,
        goodput=dist.goodput,
        baseline=base,
        gated=[p for p in config.gated if p in config.slo],
        culprits=found,
        nesting=nest,
        objectives=rows,
        canary=judged,
        distributions=dist.metric_cdfs,
        service=config.service,
        class_by=config.classes.by if config.classes is not None else None,
        classes=class_rows if config.classes is not None else None,
    )
    report = weak.mark(report)
    # The class's breach leads, after the service-wide caveats are written.
    named = classes.naming_breached_class(report.recommendation, class_rows)
    return report.model_copy(update={"recommendation": named})


def _recommend(
    config: AuditConfig,
    snap: Snapshot,
    hyps: list[Hypothesis],
    ranked: list[RankedFix],
    failing: bool,
    objective_rows: list[ObjectiveRow],
    llm: llm_causes.Findings,
    found: list[Culprit],
    goodput: Goodput,
    failed_rows: int,
) -> Recommendation:
    """One recommendation: errors first, else the ranked fixes, the LLM causes, the culprit."""
    if failing:
        return Recommendation(
            choice="none",
            text=(
                f"{snap.errors:,} of {snap.count:,} requests failed: fix the errors before "
                "tuning latency; their times say how fast they failed, not what to speed up."
            ),
        )
    rec = recommendation.recommend(snap, config.slo, hyps, ranked)
    rec = llm_causes.recommend(objective_rows, llm, rec)
    rec = e2e_drivers.naming_every_breach(rec, objective_rows)
    rec = e2e_drivers.naming_goodput(rec, goodput, failed_rows)
    rec = recommendation.none_from_objectives(rec, objective_rows, bool(config.slo))
    thin = bool(recommendation.too_few(snap))
    # Too few requests to measure, yet surely missed: no measured breach to name a fix for.
    measured = any(o.gated and o.verdict == "breach" for o in objective_rows)
    thin_miss = thin and rec.choice != "none" and not measured
    return culprits.name_in(rec, found, no_hypothesis=not hyps, too_few=thin, thin_miss=thin_miss)


def _llm_budgets(config: AuditConfig, names: list[str]) -> tuple[dict[str, float], float | None]:
    """Each TTFT stage's p99 budget and the decode rate its slowest 5% may fall to.

    Like is compared with like: a p99 with a p99 (the stage's own slice, else the llm:
    block's TTFT at p99), and the p5 token rate with the rate at TPOT's p95. A median
    budget would flag a TTFT tail the budget itself states as normal.
    """
    spec = next(iter(config.llm.values()), None)
    out: dict[str, float] = {}
    for n in names:
        if not hypotheses.TTFT_NAME.search(n):
            continue
        if "p99" in config.stage_budgets.get(n, {}):
            out[n] = config.stage_budgets[n]["p99"]
        elif spec is not None:
            out[n] = spec.ttft_at("p99") + spec.tail_ms
    if spec is None:
        return out, None
    return out, (1000.0 / spec.tpot_at("p95") if spec.tpot is not None else spec.tokens_per_s)


def _provenance(ctx: Ctx) -> Provenance:
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


def objective_fixes(
    table: LogTable, budget: Budget, breached: Sequence[str]
) -> tuple[RankedFix, ...]:
    """The audit's ranked fixes of the breached LLM objectives (`tpot.p99` ->
    limit_decode_batch, 76 -> 39 ms on the vLLM file): the audit run on the same log and
    budget, its ranking kept for those objectives, so both commands give one figure."""
    if not any(key.split(".", 1)[0] in LLM_METRICS for key in breached):
        return ()
    report = run_audit(table, AuditConfig.from_budget(budget))
    return tuple(f for f in report.ranking if f.objective in breached)
