"""`tailbudget init`: write a commented budget file from a template or a measured log."""

from __future__ import annotations

from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any

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
) -> None:
    """Write a commented budget file a team can edit, then check it with `tailbudget plan`."""
    if output is not None and output.exists() and not force:
        raise TailbudgetError(f"{output} exists; pass --force to overwrite it")
    if from_log is None:
        if slo is not None:
            raise TailbudgetError("--slo goes with --from LOG; a template has its own slo: block")
        emit(template_text(template.value), output, next_step=f"tailbudget plan {output}")
        return
    columns = {"total": total, "stages": tuple(stage) or None, "stages_glob": stages}
    text, fits, notes = _from_log(from_log, slo, service, columns, parallel, engine)
    where = str(output) if output is not None else "the budget"
    if fits is not None:
        verdict = "fits" if fits else "does NOT fit"
        typer.echo(f"the measured service {verdict} the objectives in {where}", err=True)
    for line in notes:
        typer.echo(line, err=True)
    emit(text, output, next_step=f"tailbudget plan {output}")


def _from_log(
    source: str,
    slo: str | None,
    service: str | None,
    columns: dict[str, Any],
    parallel: list[str],
    engine: str | None,
) -> tuple[str, bool | None, list[str]]:
    from tailbudget.audit.budgeting.initial import measured_budget, slo_lines
    from tailbudget.audit.budgeting.profile import profile_of
    from tailbudget.budget.load import parse_budget
    from tailbudget.budget.objectives import parse_objectives
    from tailbudget.budget.plan import make_plan
    from tailbudget.logs import ReadOptions, read_log

    objectives = parse_objectives(slo) if slo is not None else None
    options = ReadOptions(**{k: v for k, v in columns.items() if v is not None})
    log = read_log(source, options, engine=engine)
    if not log.stages:
        raise TailbudgetError(
            f"{source}: no stage columns found; name them with --stage COL or --stages GLOB"
        )
    if objectives is not None:
        objectives.check_stages(log.stages, source=source)
    stated = tuple(tuple(s.strip() for s in group.split(",") if s.strip()) for group in parallel)
    for group in stated:
        unknown = [s for s in group if s not in log.stages]
        if unknown or len(group) < 2:
            raise TailbudgetError(
                f"--parallel {','.join(group)}: give two or more of the log's stages "
                f"({', '.join(log.stages)})"
            )
    result = measured_budget(
        log,
        profile_of(log),
        service=service or Path(source).stem,
        slo_block=slo_lines(objectives) if objectives is not None else None,
        log_block=_log_block(columns, log.stages),
        stated=stated,
    )
    fits = None
    if objectives is not None:
        fits = make_plan(parse_budget(result.text, source="the measured budget")).fits
    return result.text, fits, result.notes()


def _log_block(columns: dict[str, Any], stages: tuple[str, ...]) -> list[str]:
    # How to read the log again (audit, rebudget): only what was not the default.
    lines: list[str] = []
    if columns.get("total"):
        lines.append(f"  total: {columns['total']}")
    if columns.get("stages") or columns.get("stages_glob"):
        lines.append("  stages: {" + ", ".join(f"{s}: {s}" for s in stages) + "}")
    return ["log:", *lines] if lines else []
