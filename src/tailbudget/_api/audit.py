"""`tailbudget.audit`: what drives the tail of a latency log, and what to fix first."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tailbudget._api.inputs import (
    BudgetLike,
    Columns,
    Data,
    Slo,
    budget_of,
    classes_of,
    objectives_of,
    source_of,
)
from tailbudget.errors import TailbudgetError

if TYPE_CHECKING:
    from tailbudget._api.inputs import Source
    from tailbudget.audit import AuditReport
    from tailbudget.budget.classes import ClassSet
    from tailbudget.logs import ReadOptions
    from tailbudget.logs.engine import Engine
    from tailbudget.logs.table import LogTable

__all__ = ["SECONDS_HINT", "audit"]

NO_SLO = (
    "slo: none to audit against; give slo as p99=MS (e.g. p95=2800,p99=5200) or "
    "a budget with an slo: block (tailbudget init writes one)"
)
BATCH = (
    "workload batch: a batch job has no per-request latency SLO, so a tail audit does not "
    "apply; a throughput analysis (rows/s, job makespan, stragglers) is the right tool"
)
SECONDS_HINT = "latencies look like seconds, not ms"
"""How the report's note begins when a log of plain numbers looks like seconds."""
_TABULAR = ("parquet", "csv", "jsonl", "engine", "frame")


def slow_group(value: str | float) -> str | float:
    """`slow` as the audit takes it: "p95", "p99" or a number of ms."""
    if isinstance(value, int | float) or value in ("p95", "p99"):
        return value
    try:
        return float(value)
    except ValueError:
        raise TailbudgetError(
            f"slow must be p95, p99 or a number of ms, got {value!r}", param="slow"
        ) from None


def _unit_hint(report: AuditReport) -> AuditReport:
    """A log of plain numbers whose whole distribution sits within a few ms is most likely
    in seconds: say so in the report's notes rather than find nothing to fix."""
    snap = report.snapshot
    if report.provenance.format not in _TABULAR or not (0 < snap.p99 < 30.0 and snap.max < 120.0):
        return report
    hint = (
        f"{SECONDS_HINT} (p50 {snap.p50:.3g}, p99 {snap.p99:.3g}, "
        f"max {snap.max:.3g}); if so, read it again with unit s"
    )
    notes = [*report.provenance.notes, hint]
    return report.model_copy(
        update={"provenance": report.provenance.model_copy(update={"notes": notes})}
    )


def _timeout_s(query_timeout: str | float) -> float:
    # Deferred (start-up): `import tailbudget` and a first `tb.<name>` load only what
    # that name needs (bench/startup.py); every import inside a function in this
    # module is deferred for the same reason.
    from tailbudget._units import parse_duration_s

    limit = parse_duration_s(query_timeout, field="query_timeout", param="query_timeout")
    if not limit > 0:
        raise TailbudgetError(
            f"query_timeout must be a positive time such as 10m, got {query_timeout!r}",
            param="query_timeout",
        )
    return limit


def _read(
    source: Source, options: ReadOptions, engine: Engine, classes: ClassSet | None
) -> tuple[LogTable, ClassSet | None]:
    """The log, and the classes with the reader's name of their column; a missing class
    column is named as `class_by` (not as a cohort)."""
    from tailbudget.logs import read_log

    try:
        table = read_log(source, options, engine=engine)
        if classes is not None and classes.by not in table.cohorts:
            classes = replace(classes, by=_column(table.cohorts, classes.by))
        return table, classes
    except TailbudgetError as exc:
        by = classes.by if classes is not None else None
        if by is not None and str(exc).startswith(f"cohorts: column {by!r}"):
            text = str(exc).removeprefix("cohorts: ")
            raise TailbudgetError(f"class_by: {text}", param="class_by") from None
        raise


def _with_class_column(options: ReadOptions, classes: ClassSet | None) -> ReadOptions:
    """The reader carries the class column as a cohort (a column, or a span attribute)."""
    if classes is None or classes.by in options.cohorts:
        return options
    return options.with_(cohorts=(*options.cohorts, classes.by))


def _baseline(
    baseline: Data, options: ReadOptions, table: LogTable, classes: ClassSet | None, engine: Engine
) -> LogTable | None:
    """The baseline log, read as the log was: it keeps every stage of the log, so each has
    a before to compare with, and not the class column, which a baseline need not hold."""
    from tailbudget.logs import read_log

    if baseline is None:
        return None
    cohorts = tuple(c for c in options.cohorts if classes is None or c != classes.by)
    same = options.with_(query=None, span_keep=table.stages, cohorts=cohorts)
    return read_log(source_of(baseline), same, engine=engine)


def _column(cohorts: Sequence[str], by: str) -> str:
    """The reader's name of the class column (a log may spell it in another case)."""
    return next((c for c in cohorts if c.lower() == by.lower()), by)


def audit(
    data: Data,
    slo: Slo = None,
    *,
    budget: BudgetLike = None,
    total: str | None = None,
    stage: Sequence[str] = (),
    stages: str | Sequence[str] | None = None,
    timestamp: str | None = None,
    unit: str | None = None,
    span_stage: str | None = None,
    shape: Sequence[str] = (),
    cohorts: Sequence[str] = (),
    events: str | Path | None = None,
    cold_window_min: float = 5.0,
    baseline: Data | None = None,
    slow: str | float = "p95",
    engine: Engine = None,
    query: str | None = None,
    workload: str = "online",
    progress: Callable[[str], None] | None = None,
    query_timeout: str | float = "10m",
    class_by: str | None = None,
) -> AuditReport:
    """Audit a latency log against `slo` (or the budget's objectives); the report is the
    `audit --format json` document (`.to_json()`), and renders itself in Jupyter.
    A `query`'s engine work stops after `query_timeout` (DuckDB: logs/deadline.py).
    `class_by` names the column of each request's class: every class (the budget's
    `classes:`, `CLASS:OBJECTIVE` parts of `slo`) is measured on its own requests."""
    from tailbudget.audit import AuditConfig, run_audit
    from tailbudget.audit.events import read_events
    from tailbudget.logs.deadline import query_deadline
    from tailbudget.logs.engine import connect

    if workload == "batch":
        raise TailbudgetError(BATCH, param="workload")
    if slo is None and budget is None:
        raise TailbudgetError(NO_SLO, param="slo")
    if data is None and query is None:
        raise TailbudgetError(
            "give data (a log file or a table), or a query (SQL) on an engine", param="query"
        )
    b = budget_of(budget)
    slo, classes = classes_of(slo, b, class_by)
    columns = Columns(
        total=total, stage=stage, stages=stages, timestamp=timestamp, unit=unit,
        span_stage=span_stage, shape=shape, cohorts=cohorts, query=query,
    )  # fmt: skip
    options = _with_class_column(columns.options(b), classes)
    environment = b.environment if b is not None else None
    objectives = objectives_of(slo, environment=environment)
    if objectives is None:  # no slo: the budget's (an slo or a budget is given)
        assert b is not None
        objectives = b.objectives
    slow_at = slow_group(slow)
    read = read_events(Path(events)) if events is not None else ()
    source = None if data is None else source_of(data)
    if baseline is not None:  # per-operation samples, for contention against the baseline
        options = options.with_(span_profile=True)
    limit = _timeout_s(query_timeout)
    if query is not None:
        engine = connect(engine)  # the same connection, so the deadline can interrupt it
    with query_deadline(engine, limit) if query is not None else nullcontext():
        table, classes = _read(source, options, engine, classes)
        before = _baseline(baseline, options, table, classes, engine)
        config = AuditConfig.from_budget(b) if b is not None else AuditConfig(objectives)
        config = replace(
            config, objectives=objectives, slow=slow_at, events=read,
            cold_window_min=cold_window_min, baseline=before, progress=progress, classes=classes,
        )  # fmt: skip
        report = run_audit(table, config)
    if (
        source is not None
        and table.has_timestamp
        and any(r.fix == "add_capacity" for r in report.ranking)
    ):
        from tailbudget._api.audit_capacity import with_capacity

        report = with_capacity(report, source, b, objectives_of(slo))
    return _unit_hint(report) if unit is None else report
