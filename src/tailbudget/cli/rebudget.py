"""`tailbudget rebudget`: propose a budget that fits, from what a log measures."""

from __future__ import annotations

from pathlib import Path

import typer

from tailbudget.cli._common import UNIT, TextFormat, clean_errors, emit, gate_failed


@clean_errors
def rebudget_command(
    budget: Path = typer.Argument(..., help="Budget file (YAML) to re-budget."),
    log: str = typer.Argument(..., help="Latency log measured on the service."),
    engine: str | None = typer.Option(
        None, "--engine", help="Ibis backend URL, or pyspark (default: embedded DuckDB)."
    ),
    format: TextFormat = typer.Option(TextFormat.text, "--format", "-f", help="Output format."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write here, not stdout."),
    fail_on_gap: bool = typer.Option(
        False, "--fail-on-gap", help="Exit 1 when reallocation alone cannot fit the SLO."
    ),
    unit: str | None = UNIT,
) -> None:
    """Compare each slice with the log; propose slices that fit, and price the speed-ups."""
    # Deferred (start-up): keeps `tailbudget --help` fast (bench/startup.py); every
    # import inside a function in this module is deferred for the same reason.
    from tailbudget._api.budgets import rebudget
    from tailbudget.cli._unit_gate import unit_for_gate

    if fail_on_gap and engine is None:
        unit_for_gate("--fail-on-gap", [log], unit, budget)
    result = rebudget(budget, log, engine=engine, unit=unit)
    render = {
        "text": result.to_text,
        "md": result.to_markdown,
        "json": result.to_json,
        "html": result.to_html,
    }
    emit(render[format.value](), output)
    if fail_on_gap and any(v > 0 for v in result.speedup_needed_ms.values()):
        gaps = ", ".join(f"{k} {v:,.0f} ms" for k, v in result.speedup_needed_ms.items() if v > 0)
        raise gate_failed(f"--fail-on-gap: reallocation alone leaves {gaps} to save")
