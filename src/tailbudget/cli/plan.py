"""`tailbudget plan`: check a budget file's slices against its SLO."""

from __future__ import annotations

import io
from pathlib import Path

import typer

from tailbudget.cli._common import TextFormat, clean_errors, emit, gate_failed, terminal_width
from tailbudget.errors import BudgetError


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
    if samples is not None and not 1000 <= samples <= 50_000_000:
        raise BudgetError(f"--samples must be between 1,000 and 50,000,000, got {samples}")
    if seed is not None and not 0 <= seed < 2**63:
        raise BudgetError(f"--seed must be an integer from 0 to 2**63 - 1, got {seed}")
    from rich.console import Console

    from tailbudget.budget import load_budget, make_plan
    from tailbudget.report.plan import plan_json, plan_markdown, print_plan

    result = make_plan(load_budget(budget), samples=samples, seed=seed)
    if format is TextFormat.json:
        emit(plan_json(result), output)
    elif format is TextFormat.md:
        emit(plan_markdown(result), output)
    elif output is None:
        # Piped to a file or another program: no wrapping, no colour codes.
        print_plan(result, Console(width=terminal_width(), soft_wrap=terminal_width() is not None))
    else:
        console = Console(record=True, width=10_000, soft_wrap=True, file=io.StringIO())
        print_plan(result, console)
        emit(console.export_text(), output)
    if not result.fits:
        worst = next((p.message for p in result.problems if p.severity == "error"), "")
        raise gate_failed(f"the budget does not fit: {worst}")
