"""`tailbudget init`: write a commented budget file from a template or a measured log."""

from __future__ import annotations

from enum import StrEnum
from importlib import resources
from pathlib import Path

import typer

from tailbudget.cli._common import UNIT, clean_errors, emit, output_exists
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
    from_log: str | None = typer.Option(
        None, "--from", help="Measure the budget from this latency log instead of a template."
    ),
    slo: str | None = typer.Option(
        None, "--slo", help="With --from: the objectives, e.g. p99=900,ttft.p95=500."
    ),
    service: str | None = typer.Option(None, "--service", help="With --from: service name."),
    total: str | None = typer.Option(None, "--total", help="End-to-end latency column."),
    stage: list[str] = typer.Option([], "--stage", help="Stage column (repeatable)."),
    stages: str | None = typer.Option(None, "--stages", help="Glob of stage columns."),
    parallel: list[str] = typer.Option(
        [], "--parallel", help="Stages that run at once, comma-separated (repeatable)."
    ),
    engine: str | None = typer.Option(None, "--engine", help="Ibis backend URL, or pyspark."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write the budget here (default: stdout)."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing file."),
    class_by: str | None = typer.Option(
        None,
        "--class-by",
        help="With --from: the column of each request's class; writes a classes: block.",
    ),
    unit: str | None = UNIT,
) -> None:
    """Write a commented budget file a team can edit, then check it with `tailbudget plan`."""
    if output is not None and output_exists(output) and not force:
        raise TailbudgetError(f"{output} exists; pass --force to overwrite it")
    if from_log is None:
        if slo is not None or class_by is not None:
            flag = "--slo" if slo is not None else "--class-by"
            raise TailbudgetError(f"{flag} goes with --from LOG; a template has its own blocks")
        emit(template_text(template.value), output, next_step=f"tailbudget plan {output}")
        return
    # Deferred (start-up): keeps `tailbudget --help` fast (bench/startup.py); every
    # import inside a function in this module is deferred for the same reason.
    from tailbudget._api.budgets import measure_budget

    measured = measure_budget(
        from_log, slo, service=service, total=total, stage=stage, stages=stages,
        parallel=parallel, engine=engine, unit=unit, class_by=class_by,
    )  # fmt: skip
    where = str(output) if output is not None else "the budget"
    if measured.verdict == "inconclusive":
        typer.echo(
            f"the measured service is inconclusive against the objectives in {where}: the "
            "log is too short to settle a gated one (neither a fit nor a breach)",
            err=True,
        )
    elif measured.fits is not None:
        verdict = "fits" if measured.fits else "does NOT fit"
        typer.echo(f"the measured service {verdict} the objectives in {where}", err=True)
    for line in measured.notes:
        typer.echo(line, err=True)
    emit(measured.text, output, next_step=f"tailbudget plan {output}")
