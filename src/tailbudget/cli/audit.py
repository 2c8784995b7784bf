"""`tailbudget audit`: what drives the tail of a latency log, and what to fix first."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tailbudget._fmt import ms
from tailbudget.cli._common import clean_errors, emit, gate_failed
from tailbudget.errors import TailbudgetError

if TYPE_CHECKING:
    from tailbudget.audit import AuditReport


class AuditFormat(StrEnum):
    """Output formats of `audit`."""

    md = "md"
    json = "json"
    html = "html"


class Workload(StrEnum):
    """Kinds of workload; only online services have a per-request SLO."""

    online = "online"
    batch = "batch"


class Unit(StrEnum):
    """Units of the latency columns."""

    ms = "ms"
    s = "s"
    us = "us"


@contextmanager
def _progress() -> Iterator[Callable[[str], None] | None]:
    # Deferred (start-up): keeps `tailbudget --help` fast (bench/startup.py); every
    # import inside a function in this module is deferred for the same reason.
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        yield None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("reading the log", total=None)
        yield lambda label: bar.update(task, description=f"audit: {label}")


def render(report: AuditReport, fmt: str) -> str:
    """The report in md, json or html."""
    if fmt == "json":
        return report.to_json()
    if fmt == "html":
        return report.to_html()
    return report.to_markdown()


@clean_errors
def audit_command(
    log: str | None = typer.Argument(
        None,
        help="Log: Parquet (file, folder, glob), CSV, JSONL, OTLP/Jaeger JSON, vLLM or "
        "LLMPerf results; omit with --engine URL --query SQL.",
    ),
    budget: Path | None = typer.Option(
        None, "--budget", "-b", help="Budget file: SLO and log mapping."
    ),
    slo: str | None = typer.Option(
        None, "--slo", help="Objectives, e.g. p99=900,ttft.p95=500,tpot.p99=60,goodput=0.95."
    ),
    shape: list[str] = typer.Option([], "--shape", help="Covariate column (repeatable)."),
    cohort: list[str] = typer.Option([], "--cohort", help="Cohort column (repeatable)."),
    class_by: str | None = typer.Option(
        None,
        "--class-by",
        help="Column holding each request's class (tier, tenant); objectives per class "
        "come from the budget's classes: or --slo premium:p95=800.",
    ),
    events: Path | None = typer.Option(None, "--events", help="CSV of timestamp,event."),
    cold_window_min: float = typer.Option(
        5.0, "--cold-window-min", help="Minutes after an event that count as cold."
    ),
    baseline: str | None = typer.Option(
        None, "--baseline", help="Baseline log for a regression check."
    ),
    slow: str = typer.Option("p95", "--slow", help="Slow group: p95 ([p95,p99]), p99 or ms."),
    engine: str | None = typer.Option(
        None, "--engine", help="Ibis URL, or pyspark (default: DuckDB)."
    ),
    query: str | None = typer.Option(None, "--query", help="SQL on the engine giving the log."),
    query_timeout: str = typer.Option(
        "10m", "--query-timeout", help="Stop a --query's engine work after this long (DuckDB)."
    ),
    total: str | None = typer.Option(None, "--total", help="End-to-end latency column."),
    stage: list[str] = typer.Option([], "--stage", help="Stage column (repeatable)."),
    stages: str | None = typer.Option(None, "--stages", help="Glob of stage columns, e.g. '*_ms'."),
    timestamp: str | None = typer.Option(None, "--timestamp", help="Timestamp column."),
    unit: Unit | None = typer.Option(None, "--unit", help="Unit of the latency columns."),
    span_stage: str | None = typer.Option(
        None,
        "--span-stage",
        help="Span tables and traces: a stage is a service or an operation (default).",
    ),
    workload: Workload = typer.Option(Workload.online, "--workload", help="online or batch."),
    format: AuditFormat = typer.Option(AuditFormat.md, "--format", "-f", help="Output format."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write here, not stdout."),
    fail_on_breach: bool = typer.Option(
        False, "--fail-on-breach", help="Exit 1 when a gated percentile breaches."
    ),
    fail_on_regression: bool = typer.Option(
        False,
        "--fail-on-regression",
        help="With --baseline: exit 1 when a gated objective regresses beyond noise "
        "(or the logs are too small to tell).",
    ),
) -> None:
    """Find what drives the tail of a latency log and rank the fixes; exit 2 on bad input."""
    if fail_on_regression and baseline is None:
        raise TailbudgetError(
            "--fail-on-regression compares against a baseline: add --baseline LOG2"
        )
    # Imported here, not at the top: `tailbudget --help` must not load the engines.
    from tailbudget._api.audit import SECONDS_HINT, audit

    with _progress() as progress:
        report = audit(
            log, slo, budget=budget, total=total, stage=stage, stages=stages,
            timestamp=timestamp, unit=unit.value if unit is not None else None,
            span_stage=span_stage, shape=shape, cohorts=cohort, events=events,
            cold_window_min=cold_window_min, baseline=baseline, slow=slow, engine=engine,
            query=query, workload=workload.value, progress=progress,
            query_timeout=query_timeout, class_by=class_by,
        )  # fmt: skip
    seconds = [n.split(";", 1)[0] for n in report.provenance.notes if n.startswith(SECONDS_HINT)]
    if seconds and (fail_on_breach or fail_on_regression):
        _unit_for_gate(seconds[0], unit is not None, budget)
    for head in seconds:  # the report's note names the argument, not the flag
        typer.echo(f"warning: {head}; if so, run again with --unit s", err=True)
    emit(render(report, format.value), output)
    if fail_on_breach and report.breaches_gate():
        over = [
            f"{p} {ms(getattr(report.snapshot, p, None))} ms > "
            f"{ms(getattr(report.slo, p, None))} ms"
            for p in report.gated
            if report.snapshot.verdict.get(p) == "breach"
        ]
        over += [
            f"class {c.name} {o.metric}.{o.percentile} {ms(o.measured_ms)} ms > "
            f"{ms(o.target_ms)} ms"
            for c, o in report.class_breaches()
        ]
        raise gate_failed(f"--fail-on-breach: {', '.join(over) or 'a gated objective breaches'}")
    if fail_on_regression and report.regresses():
        assert report.canary is not None
        raise gate_failed(f"--fail-on-regression: canary: {report.canary.text}")


def _unit_for_gate(head: str, given: bool, budget: str | Path | None) -> None:
    """A gate never passes on latencies that look like seconds: exit 2 naming --unit
    unless the unit is stated explicitly (--unit, or log: {unit: ...} in the budget). A
    column named total_ms is not enough: a log in seconds carried that name (issue 36)."""
    if given:
        return
    if budget is not None:
        from tailbudget.budget.load import load_budget

        if "unit" in load_budget(budget).log.model_fields_set:
            return
    raise TailbudgetError(
        f"{head}, and a gate does not pass on a guessed unit: state it with --unit s if "
        "they are seconds, --unit ms if they really are milliseconds (or log: {unit: ...} "
        "in the budget)",
        param="unit",
    )
