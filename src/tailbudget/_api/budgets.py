"""The budget file's jobs: `plan`, `measure_budget` (`init --from`), `rebudget`, `export`."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tailbudget._api.inputs import (
    BudgetLike,
    Columns,
    Data,
    Slo,
    budget_of,
    objectives_of,
    source_of,
)
from tailbudget.errors import BudgetError, TailbudgetError

if TYPE_CHECKING:
    from tailbudget.budget.model import Budget
    from tailbudget.budget.objectives import Objectives
    from tailbudget.budget.plan import Plan
    from tailbudget.budgeting.proposal import Rebudget
    from tailbudget.logs.engine import Engine
    from tailbudget.logs.table import LogTable

__all__ = ["MeasuredBudget", "export", "measure_budget", "plan", "rebudget"]


def _budget(budget: BudgetLike) -> Budget:
    b = budget_of(budget)
    if b is None:
        raise BudgetError("give a budget: a file path, YAML text, a mapping or a Budget")
    return b


def plan(budget: BudgetLike, *, samples: int | None = None, seed: int | None = None) -> Plan:
    """Check that a budget's slices fit its SLO with headroom (`tailbudget plan`)."""
    # Deferred (start-up): `import tailbudget` and a first `tb.<name>` load only what
    # that name needs (bench/startup.py); every import inside a function in this
    # module is deferred for the same reason.
    from tailbudget.budget.plan import make_plan

    if samples is not None and not 1000 <= samples <= 50_000_000:
        raise BudgetError(
            f"samples must be between 1,000 and 50,000,000, got {samples}", param="samples"
        )
    if seed is not None and not 0 <= seed < 2**63:
        raise BudgetError(f"seed must be an integer from 0 to 2**63 - 1, got {seed}", param="seed")
    return make_plan(_budget(budget), samples=samples, seed=seed)


@dataclass(frozen=True)
class MeasuredBudget:
    """A budget measured from a log (`tailbudget init --from`): the commented file a team
    edits, and whether the measured service fits the objectives by the one verdict rule
    (None: none given, or a gated objective the log does not settle: `verdict`)."""

    text: str
    fits: bool | None
    notes: tuple[str, ...] = ()
    """What the measurement says beside the file (objectives the log breaches...)."""
    verdict: Literal["fits", "does_not_fit", "inconclusive"] | None = None
    """None: no objectives given."""

    @property
    def budget(self) -> Budget:
        """The file, validated."""
        from tailbudget.budget.load import parse_budget

        return parse_budget(self.text, source="the measured budget")

    def to_yaml(self) -> str:
        """The budget file's text."""
        return self.text

    def save(self, path: str | Path) -> Path:
        """Write the file; returns its path."""
        out = Path(path)
        out.write_text(self.text, encoding="utf-8")
        return out

    def __str__(self) -> str:
        return self.text

    def _repr_markdown_(self) -> str:
        # A fence longer than any backtick run in the file, so no name in it closes it.
        fence = "`" * max(3, 1 + max((len(r) for r in re.findall("`+", self.text)), default=0))
        return f"{fence}yaml\n{self.text}{fence}\n"


def _seconds_warning(log: LogTable, unit: str | None) -> list[str]:
    """A warning when the unit was not given and the figures look like seconds: a plan of
    the budget would gate a log in seconds as a 1 ms service."""
    from tailbudget.logs.units import seconds_hint

    hint = seconds_hint(log) if unit is None else None
    return [] if hint is None else [f"warning: {hint}; if so, read it again with unit s"]


def measure_budget(
    data: Data,
    slo: Slo = None,
    *,
    service: str | None = None,
    total: str | None = None,
    stage: Sequence[str] = (),
    stages: str | Sequence[str] | None = None,
    parallel: Sequence[str] = (),
    engine: Engine = None,
    unit: str | None = None,
    class_by: str | None = None,
) -> MeasuredBudget:
    """A budget measured from a log: each stage's slice is what the log measures.
    `parallel` lists groups of stages that run at once ("a,b" each, as `--parallel`);
    `unit` (ms, s, us) is the log's latency unit when it does not say it; `class_by`
    names the column of each request's class, and the file gets a `classes:` block
    (objectives stated as `CLASS:OBJECTIVE` in `slo`, else each class's own figures)."""
    from tailbudget.audit.profile import profile_of
    from tailbudget.budget.load import parse_budget
    from tailbudget.budget.plan import make_plan
    from tailbudget.budgeting.initial import measured_budget, slo_lines
    from tailbudget.logs import read_log
    from tailbudget.logs.units import check_log_unit

    slo, per_class = _class_parts(slo, class_by)
    objectives = objectives_of(slo)
    columns = Columns(
        total=total, stage=stage, stages=stages, unit=unit, cohorts=(class_by,) if class_by else ()
    )
    source = source_of(data)
    log = check_log_unit(read_log(source, columns.options(), engine=engine))
    if not log.stages:
        raise TailbudgetError(
            f"stages: {log.source} has no stage columns; name them with stages (column names "
            "or globs)",
            param="stages",
        )
    if objectives is not None:
        objectives.check_stages(log.stages, source=log.source)
    groups = [parallel] if isinstance(parallel, str) else parallel
    stated = tuple(tuple(s.strip() for s in group.split(",") if s.strip()) for group in groups)
    for group in stated:
        unknown = [s for s in group if s not in log.stages]
        if unknown or len(group) < 2:
            raise TailbudgetError(
                f"parallel {','.join(group)}: give two or more of the log's stages "
                f"({', '.join(log.stages)})",
                param="parallel",
            )
    profile = profile_of(log)
    if profile.used == 0:
        # Every request failed (or has no latency): nothing to measure a budget from
        # (np.quantile of nothing was an IndexError traceback).
        raise TailbudgetError(
            f"{log.source}: no successful request with a latency to measure a budget from "
            f"({profile.rows:,} rows, {profile.errors:,} failed); give a log of requests "
            "that succeeded",
            param="data",
        )
    result = measured_budget(
        log,
        profile,
        service=service or (Path(source).stem if isinstance(source, str) else "service"),
        slo_block=slo_lines(objectives) if objectives is not None else None,
        log_block=_log_block(total, bool(stage or stages), log.stages, unit),
        stated=stated,
    )
    text, notes, breaches = result.text, list(result.notes()), list(result.breaches)
    notes[:0] = _seconds_warning(log, unit)
    if class_by is not None:
        from tailbudget.budgeting.class_block import class_block

        base = parse_budget(text, source="the measured budget")
        block = class_block(log, log.cohorts[-1], per_class, base)
        text = text.rstrip("\n") + "\n" + "\n".join(block.lines) + "\n"
        notes += block.notes + [f"breach: {b}" for b in block.breaches]
        breaches += block.breaches
    if objectives is None and not per_class:
        return MeasuredBudget(text, None, tuple(notes))
    # The plan of the file judges each objective by the one verdict rule on the log's
    # counts (composition.measured.counted): None where a gated one is inconclusive. A
    # breach the audit will call (goodput's too, which plan only estimates) is not a fit.
    fits = make_plan(parse_budget(text, source="the measured budget")).fits
    if any("(inconclusive:" not in b for b in breaches):
        fits = False
    said: Literal["fits", "does_not_fit", "inconclusive"] = (
        "inconclusive" if fits is None else "fits" if fits else "does_not_fit"
    )
    return MeasuredBudget(text, fits, tuple(notes), said)


def _class_parts(slo: Slo, class_by: str | None) -> tuple[Slo, dict[str, Objectives]]:
    """The service-wide `slo` and the objectives stated per class (`premium:p95=800`, in
    a string or a mapping, as audit and simulate take them)."""
    from tailbudget.budget.classes import has_class_parts, split_class_slo

    if not (isinstance(slo, str | Mapping) and has_class_parts(slo)):
        return slo, {}
    service, stated = split_class_slo(slo)
    if class_by is None:
        raise TailbudgetError(
            f"slo {next(iter(stated))}:...: say which column holds each request's class "
            "with class_by",
            param="class_by",
        )
    return service or None, stated


def _log_block(
    total: str | None, named: bool, stages: tuple[str, ...], unit: str | None = None
) -> list[str]:
    # How to read the log again (audit, rebudget): only what was not the default.
    lines: list[str] = []
    if total:
        lines.append(f"  total: {total}")
    if unit is not None and unit != "ms":
        lines.append(f"  unit: {unit}")
    if named:
        lines.append("  stages: {" + ", ".join(f"{s}: {s}" for s in stages) + "}")
    return ["log:", *lines] if lines else []


def rebudget(
    budget: BudgetLike, data: Data, *, engine: Engine = None, unit: str | None = None
) -> Rebudget:
    """Compare each slice with what the log measures; propose slices that fit, and price
    the speed-ups (`tailbudget rebudget`). `unit` (ms, s, us) overrides the budget's
    `log: unit:` for a log that does not say its unit."""
    from dataclasses import replace

    from tailbudget.audit.fixes import catalog
    from tailbudget.audit.profile import profile_of
    from tailbudget.audit.run import objective_fixes
    from tailbudget.budgeting.proposal import rebudget as propose
    from tailbudget.logs import ReadOptions, read_log
    from tailbudget.logs.units import check_log_unit

    b = _budget(budget)
    read = ReadOptions.from_budget(b, unit=unit)
    by = b.classes.by if b.classes is not None else None
    if by is not None:
        read = read.with_(cohorts=(*read.cohorts, by))
    try:
        table = check_log_unit(read_log(source_of(data), read, engine=engine))
    except TailbudgetError:
        if by is None:
            raise
        # A log without the class column is re-budgeted for the service alone.
        read, by = ReadOptions.from_budget(b, unit=unit), None
        table = check_log_unit(read_log(source_of(data), read, engine=engine))
    found = propose(b, profile_of(table), catalog(b.fixes))
    breached = [o.objective for o in found.objectives if o.verdict == "breach"]
    fixes = objective_fixes(table, b, breached)
    found = replace(found, objective_options=fixes) if fixes else found
    if by is None:
        return found
    return replace(found, class_proposals=_class_proposals(b, table, table.cohorts[-1]))


def _class_proposals(
    b: Budget, table: LogTable, column: str
) -> tuple[tuple[str, int, Rebudget], ...]:
    """Each class's own proposal: its view of the budget (its stages and objectives)
    against its own requests; a class without requests in the log is left out."""
    from dataclasses import replace

    from tailbudget.audit.fixes import catalog
    from tailbudget.audit.profile import profile_of
    from tailbudget.budget.plan_classes import class_budget
    from tailbudget.budgeting.proposal import rebudget as propose
    from tailbudget.logs.table import RowCounts

    assert b.classes is not None
    out = []
    for name in b.classes.specs():
        sub_table = table.table.filter(table.table[column].cast("string") == name)
        n = int(sub_table.count().to_pyarrow().as_py())
        if n == 0:
            continue
        sub = replace(table, table=sub_table, rows=RowCounts(n, n, 0))
        view = class_budget(b, name)
        out.append((name, n, propose(view, profile_of(sub), catalog(view.fixes))))
    return tuple(out)


def export(
    budget: BudgetLike,
    to: str,
    *,
    metrics: str = "tailbudget",
    prometheus_url: str | None = None,
    verdict_url: str | None = None,
    namespace: str | None = None,
    scale_target: str | None = None,
    burn: str | None = None,
) -> str:
    """The budget as configuration for `to`: prometheus-rules, keda, argo-rollouts,
    flagger, openslo or grafana (`tailbudget export`)."""
    from tailbudget.export import TARGETS, ExportOptions, parse_burn_windows
    from tailbudget.export import export as render

    given: dict[str, Any] = {  # ExportOptions' own defaults stand where None
        "prometheus_url": prometheus_url,
        "verdict_url": verdict_url,
        "namespace": namespace,
        "target_name": scale_target,
        "burn_windows": parse_burn_windows(burn) if burn else None,
    }
    options = ExportOptions(metrics=metrics, **{k: v for k, v in given.items() if v is not None})
    if to not in TARGETS:
        raise BudgetError(f"to must be one of {', '.join(TARGETS)}, got {to!r}", param="to")
    return render(_budget(budget), to, options)
