"""`tailbudget init`: write a commented budget file from a template."""

from __future__ import annotations

from enum import StrEnum
from importlib import resources
from pathlib import Path

import typer

from tailbudget.cli._common import clean_errors, emit
from tailbudget.errors import TailbudgetError


class Template(StrEnum):
    """Starting points for common inference services."""

    rag = "rag"
    llm_chat = "llm-chat"
    fraud = "fraud"
    recsys = "recsys"


def template_text(name: str) -> str:
    """The text of a packaged budget template."""
    return (resources.files("tailbudget.budget") / "templates" / f"{name}.yaml").read_text(
        encoding="utf-8"
    )


@clean_errors
def init_command(
    template: Template = typer.Option(Template.rag, "--template", "-t", help="Kind of service."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write the budget here (default: stdout)."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing file."),
) -> None:
    """Write a commented budget file a team can edit, then check it with `tailbudget plan`."""
    if output is not None and output.exists() and not force:
        raise TailbudgetError(f"{output} exists; pass --force to overwrite it")
    emit(template_text(template.value), output, next_step=f"tailbudget plan {output}")
