"""`tailbudget plan`: check a budget file's slices against its SLO."""

from __future__ import annotations

from pathlib import Path

import typer

from tailbudget.cli._common import TextFormat, clean_errors, emit, gate_failed, terminal_width


@clean_errors
def plan_command(
    budget: Path = typer.Argument(..., help="Budget file (YAML); see `tailbudget init`."),
    format: TextFormat = typer.Option(TextFormat.text, "--format", "-f", help="Output format."),
    samples: int | None = typer.Option(
        None, "--samples", help="Monte Carlo samples (default: the file's, or 200,000)."
    ),
    seed: int | None = typer.Option(None, "--seed", help="Random seed of the composition."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write here, not stdout."),
) -> None:
    """Check that the stage slices fit the SLO with headroom; exit 1 when they do not."""
    # Deferred (start-up): keeps `tailbudget --help` fast (bench/startup.py); every
    # import inside a function in this module is deferred for the same reason.
    from tailbudget._api.budgets import plan

    result = plan(budget, samples=samples, seed=seed)
    if format is TextFormat.json:
        emit(result.to_json(), output)
    elif format is TextFormat.md:
        emit(result.to_markdown(), output)
    elif format is TextFormat.html:
        emit(result.to_html(), output)
    elif output is None:
        from rich.console import Console

        from tailbudget.report.plan import print_plan

        # Piped to a file or another program: no wrapping, no colour codes.
        print_plan(result, Console(width=terminal_width(), soft_wrap=terminal_width() is not None))
    else:
        emit(result.to_text(), output)
    if result.fits is False:  # inconclusive (None) does not gate
        worst = next((p.message for p in result.problems if p.severity == "error"), "")
        said = "is not checked" if result.not_checked else "does not fit"
        raise gate_failed(f"the budget {said}: {worst}")
