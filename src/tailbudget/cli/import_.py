"""`tailbudget import openslo FILE`: start a budget file from OpenSLO SLO documents."""

from __future__ import annotations

from pathlib import Path

import typer

from tailbudget.cli._common import clean_errors, emit
from tailbudget.errors import BudgetError


@clean_errors
def import_command(
    kind: str = typer.Argument(..., help="What FILE holds: openslo."),
    file: Path = typer.Argument(..., help="OpenSLO v1 YAML (one or more kind: SLO documents)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write here, not stdout."),
) -> None:
    """Start a budget file (service, SLO percentiles, error rate) from another tool's SLOs."""
    if kind != "openslo":
        raise BudgetError(f"import reads: openslo, got {kind!r}")
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BudgetError(f"{file}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BudgetError(f"{file}: cannot read ({exc.__class__.__name__})") from None
    # Deferred (start-up): keeps `tailbudget --help` fast (bench/startup.py); every
    # import inside a function in this module is deferred for the same reason.
    from tailbudget.export.openslo import import_openslo

    emit(import_openslo(text, source=str(file)), output)
