"""What the API's arguments may be, turned into the library's own types once, here."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from tailbudget._api.request_table import Requests
from tailbudget.errors import TailbudgetError

if TYPE_CHECKING:
    from tailbudget._api.budgets import MeasuredBudget
    from tailbudget.budget.classes import ClassSet
    from tailbudget.budget.model import Budget
    from tailbudget.budget.objectives import Objectives, SloLike
    from tailbudget.logs import ReadOptions
    from tailbudget.logs.frames import Frame, Spooled
    from tailbudget.logs.table import LogTable

Data: TypeAlias = "str | os.PathLike[str] | Frame | Requests | LogTable"
"""A path (str or PathLike), a pandas or polars DataFrame, a pyarrow Table or
RecordBatchReader, an Ibis table, a DuckDB relation (`logs.frames.Frame`), or what
`tailbudget.read` returned."""
Slo: TypeAlias = "SloLike | None"
"""An SLO as the API takes it: the string grammar (`p99=900,ttft.p95=500`), a {key: value}
mapping of it, a budget file's `slo:` block, Objectives, or None (the budget's)."""
BudgetLike: TypeAlias = (
    "str | os.PathLike[str] | Mapping[str, object] | Budget | MeasuredBudget | None"
)
"""A path, YAML text, a mapping, a `Budget`, a `MeasuredBudget`, or None (no budget)."""
Source: TypeAlias = "str | Frame | Spooled | LogTable"
"""A log as `read_log` takes it from the API: a path, data in memory made re-readable, or
a table `tailbudget.read` already read."""


def objectives_of(slo: Slo, *, environment: str | None = None) -> Objectives | None:
    """`slo` as Objectives (`Objectives.coerce`, the one conversion), None when not given."""
    # Deferred (start-up): `import tailbudget` and a first `tb.<name>` load only what
    # that name needs (bench/startup.py); every import inside a function in this
    # module is deferred for the same reason.
    from tailbudget.budget.objectives import Objectives

    return None if slo is None else Objectives.coerce(slo, environment=environment)


def budget_of(budget: BudgetLike) -> Budget | None:
    """`budget` as a Budget: a file path, YAML text, a mapping, a Budget or MeasuredBudget."""
    from tailbudget.budget.load import load_budget, parse_budget
    from tailbudget.budget.model import Budget

    if budget is None or isinstance(budget, Budget):
        return budget
    inner = getattr(budget, "budget", None)
    if isinstance(inner, Budget):
        return inner
    if isinstance(budget, Mapping):
        return parse_budget(dict(budget))
    if isinstance(budget, str) and "\n" in budget:
        return parse_budget(budget)
    if isinstance(budget, str | os.PathLike):
        return load_budget(Path(budget))
    raise TailbudgetError(
        f"budget must be a path, YAML text, a mapping or a Budget, got a {type(budget).__name__}"
    )


@dataclass(frozen=True)
class Columns:
    """How to find a log's columns: the CLI's --total, --stage, --stages, ... as given."""

    total: str | None = None
    stage: Sequence[str] = ()
    stages: str | Sequence[str] | None = None
    timestamp: str | None = None
    unit: str | None = None
    span_stage: str | None = None
    shape: Sequence[str] = ()
    cohorts: Sequence[str] = ()
    query: str | None = None

    def options(self, budget: Budget | None = None) -> ReadOptions:
        """ReadOptions from the budget's `log:` block, these (when given) winning."""
        from tailbudget.logs import ReadOptions

        names = tuple(self.stage)
        glob = None
        if isinstance(self.stages, str):
            glob = self.stages
        elif self.stages is not None:
            names = (*names, *self.stages)
        given: dict[str, Any] = {
            "total": self.total,
            "stages": names or None,
            "stages_glob": glob,
            "timestamp": self.timestamp,
            "unit": self.unit,
            "query": self.query,
            "span_stage": self.span_stage,
        }
        overrides = {k: v for k, v in given.items() if v is not None}
        if self.shape:
            overrides["shape"] = _names(self.shape)
        if self.cohorts:
            overrides["cohorts"] = _names(self.cohorts)
        if budget is not None:
            return ReadOptions.from_budget(budget, **overrides)
        return ReadOptions(**overrides)


def _names(value: str | Sequence[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def source_of(data: Data) -> Source:
    """What `read_log` takes: a path as a string, data in memory made re-readable (a
    RecordBatchReader is read once, in memory)."""
    from tailbudget.logs.frames import is_in_memory, materialize

    if isinstance(data, Requests):
        return data.log  # read once by `tailbudget.read`, with its column options
    if isinstance(data, os.PathLike):
        return os.fspath(data)
    if is_in_memory(data):
        return materialize(data)
    return data


def sources_of(data: Data | Sequence[Data]) -> list[Source]:
    """One or several logs (the CLI's LOG given more than once) as `read_log` sources."""
    if isinstance(data, list | tuple):
        if not data:
            raise TailbudgetError("give at least one log")
        return [source_of(d) for d in data]
    return [source_of(data)]


def classes_of(
    slo: Slo, budget: Budget | None, class_by: str | None
) -> tuple[Slo, ClassSet | None]:
    """The service-wide `slo` (class parts taken out) and the classes to measure.

    Classes come from the budget's `classes:` block; `class_by` names (or renames) the
    column, and `CLASS:OBJECTIVE` parts of an `slo` string or mapping (`premium:p95=800`,
    `{"premium:p95": 800}`) replace or add a class's objectives. Without either, no
    classes (None)."""
    from tailbudget.budget.classes import ClassSet, has_class_parts, split_class_slo

    environment = budget.environment if budget is not None else None
    given: dict[str, Objectives] = {}
    if isinstance(slo, str | Mapping) and has_class_parts(slo):
        # Each part, the service's and each class's, read once by `Objectives.coerce`.
        service, given = split_class_slo(slo, environment=environment)
        slo = service or None
        if slo is None and budget is None:
            raise TailbudgetError(
                "slo: give a service-wide objective too (e.g. p99=1500,premium:p95=800): "
                "requests of classes not listed fall under it",
                param="slo",
            )
    base = budget.class_set if budget is not None else None
    if class_by is not None and not (isinstance(class_by, str) and class_by.strip()):
        raise TailbudgetError(f"class_by must be a column name, got {class_by!r}", param="class_by")
    by = class_by or (base.by if base is not None else None)
    if by is None:
        if given:
            raise TailbudgetError(
                f"slo {next(iter(given))}:...: say which column holds each request's class "
                "with class_by (the budget's classes.by)",
                param="class_by",
            )
        return slo, None
    out = ClassSet(by, base.classes if base is not None else ())
    return slo, out.with_objectives(given) if given else out
