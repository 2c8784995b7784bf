"""`tailbudget audit`: what drives the tail of a latency log, and what to fix first."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from tailbudget._units import PERCENTILES
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


NO_SLO = (
    "no SLO to audit against: give --slo p99=MS (e.g. --slo p95=2800,p99=5200) or "
    "--budget FILE with an slo: block (tailbudget init writes one)"
)
BATCH = (
    "--workload batch: a batch job has no per-request latency SLO, so a tail audit does not "
    "apply; a throughput analysis (rows/s, job makespan, stragglers) is the right tool"
)


def _slow(value: str) -> str | float:
    if value in ("p95", "p99"):
        return value
    try:
        return float(value)
    except ValueError:
        raise TailbudgetError(f"--slow must be p95, p99 or a number of ms, got {value!r}") from None


_TABULAR = ("parquet", "csv", "jsonl", "engine")


def _unit_hint(report: AuditReport, fmt: str) -> AuditReport:
    """A log of plain numbers whose whole distribution sits within a few ms is most likely
    in seconds: say so (report note and stderr) rather than find nothing to fix."""
    snap = report.snapshot
    if fmt not in _TABULAR or not (0 < snap.p99 < 30.0 and snap.max < 120.0):
        return report
    hint = (
        f"latencies look like seconds, not ms (p50 {snap.p50:.3g}, p99 {snap.p99:.3g}, "
        f"max {snap.max:.3g}); if so, run again with --unit s"
    )
    typer.echo(f"warning: {hint}", err=True)
    notes = [*report.provenance.notes, hint]
    return report.model_copy(
        update={"provenance": report.provenance.model_copy(update={"notes": notes})}
    )


@contextmanager
def _progress() -> Iterator[Callable[[str], None] | None]:
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
        return report.to_json() + "\n"
    if fmt == "html":
        try:
            # Imported by name: the HTML report is an optional part of some builds.
            html_mod = importlib.import_module("tailbudget.report.html")
        except ImportError:
            raise TailbudgetError(
                "--format html is not available in this build (tailbudget.report.html is "
                "missing); use --format md or json"
            ) from None
        html: str = html_mod.render_audit_html(report)
        return html
    from tailbudget.report.audit_md import audit_markdown

    return audit_markdown(report)


def _capacity(report: AuditReport, log: str, budget: Any, slo: str | None) -> AuditReport:
    """add_capacity carries the replica count `tailbudget capacity` finds at the log's load."""
    from tailbudget.audit.fixes import with_replicas
    from tailbudget.logs import ReadOptions
    from tailbudget.sim.arrivals import ArrivalSpec
    from tailbudget.sim.capacity import capacity_curve, knee_replicas
    from tailbudget.sim.fit import ModelOptions
    from tailbudget.sim.fitting import fit_logs
    from tailbudget.sim.objectives import objectives_for

    try:
        fitted = fit_logs([log], ReadOptions.from_budget(budget), ModelOptions())
        objectives = objectives_for(budget, slo)
        spec = ArrivalSpec("log")
        rep = capacity_curve(
            fitted.model, objectives, arrivals=spec, loads=[1.0],
            log_times=fitted.log_times, scale_before=False,
        )  # fmt: skip
        point = rep.curve[0]
        knee = None
        if point.replicas is None:
            knee = knee_replicas(
                fitted.model, objectives, arrivals=spec, log_times=fitted.log_times
            )
    except TailbudgetError:
        return report  # the audit stands without it; `tailbudget capacity` says why
    conc = fitted.model.concurrency
    if fitted.model.load_slope is not None and conc.source == "measured":
        basis = "one replica = the fleet that served the log, its work growing with its load"
    else:
        basis = f"{conc.value:g} requests at once per replica, {conc.source}"
    if point.replicas is not None:
        return with_replicas(report, point.replicas, basis)
    if knee is None:
        return report
    n, _ = knee
    results = rep.curve[0].objectives  # unlimited replicas' figures are what remains
    rest = ", ".join(
        f"{r.objective.key} {r.measured_ms:,.0f} ms vs {r.objective.target_ms:,.0f}"
        for r in results
        if r.verdict == "breach" and r.measured_ms is not None
    )
    return with_replicas(report, n, basis, meets=False, rest=rest)


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
    if workload is Workload.batch:
        raise TailbudgetError(BATCH)
    if slo is None and budget is None:
        raise TailbudgetError(NO_SLO)
    if fail_on_regression and baseline is None:
        raise TailbudgetError(
            "--fail-on-regression compares against a baseline: add --baseline LOG2"
        )
    if log is None and query is None:
        raise TailbudgetError("give a LOG file, or --engine URL --query SQL")
    # Imported here, not at the top: `tailbudget --help` must not load the engines.
    from tailbudget.audit import AuditConfig, run_audit
    from tailbudget.audit.events import read_events
    from tailbudget.budget import load_budget
    from tailbudget.budget.objectives import parse_objectives
    from tailbudget.logs import ReadOptions, read_log

    b = load_budget(budget) if budget is not None else None
    overrides: dict[str, Any] = {
        k: v
        for k, v in {
            "total": total,
            "stages": tuple(stage) or None,
            "stages_glob": stages,
            "timestamp": timestamp,
            "unit": unit.value if unit is not None else None,
            "query": query,
            "span_stage": span_stage,
        }.items()
        if v is not None
    }
    if shape:
        overrides["shape"] = tuple(shape)
    if cohort:
        overrides["cohorts"] = tuple(cohort)
    options = ReadOptions.from_budget(b, **overrides) if b is not None else ReadOptions(**overrides)
    extra: dict[str, Any] = {"slow": _slow(slow), "cold_window_min": cold_window_min}
    if slo is not None:
        objectives = parse_objectives(slo, environment=b.environment if b is not None else None)
        extra["objectives"] = objectives
        extra["slo"] = {p: ms for p, ms in objectives.e2e().items() if p in PERCENTILES}
        extra["gated"] = objectives.gated_percentiles("e2e")
    if events is not None:
        extra["events"] = read_events(events)
    if baseline is not None:  # per-operation samples, for contention against the baseline
        options = options.with_(span_profile=True)
    with _progress() as progress:
        extra["progress"] = progress
        table = read_log(log, options, engine=engine)
        if baseline is not None:
            # The baseline keeps every stage of the log, so each has a before to compare with.
            same = options.with_(query=None, span_keep=table.stages)
            extra["baseline"] = read_log(baseline, same, engine=engine)
        config = AuditConfig.from_budget(b, **extra) if b is not None else AuditConfig(**extra)
        report = run_audit(table, config)
    if (
        log is not None
        and table.has_timestamp
        and any(r.fix == "add_capacity" for r in report.ranking)
    ):
        report = _capacity(report, log, b, slo)
    if unit is None:
        report = _unit_hint(report, table.format)
    emit(render(report, format.value), output)
    if fail_on_breach and report.breaches_gate():
        from tailbudget.report.fmt import ms

        over = [
            f"{p} {ms(getattr(report.snapshot, p, None))} ms > "
            f"{ms(getattr(report.slo, p, None))} ms"
            for p in report.gated
            if report.snapshot.verdict.get(p) == "breach"
        ]
        raise gate_failed(f"--fail-on-breach: {', '.join(over) or 'a gated objective breaches'}")
    if fail_on_regression and report.regresses():
        assert report.canary is not None
        raise gate_failed(f"--fail-on-regression: canary: {report.canary.text}")
