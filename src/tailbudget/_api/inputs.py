"""What the API's arguments may be, turned into the library's own types once, here."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from tailbudget.errors import TailbudgetError

if TYPE_CHECKING:
    from tailbudget.budget.model import Budget
    from tailbudget.budget.objectives import Objectives
    from tailbudget.logs import ReadOptions

Data: TypeAlias = Any
"""A path (str or PathLike), a pandas or polars DataFrame, a pyarrow Table or
RecordBatchReader, an Ibis table, a DuckDB relation, or what `tailbudget.read` returned."""
Slo: TypeAlias = "str | Mapping[str, float] | Objectives | None"
BudgetLike: TypeAlias = Any
"""A path, YAML text, a mapping, a `Budget`, or a `MeasuredBudget`."""


def objectives_of(slo: Any, *, environment: str | None = None) -> Objectives | None:
    """`slo` as Objectives: the SLO string grammar, a {key: value} mapping of it, a budget
    file's `slo:` block in its full form ({"ttft": {"p95": 500}}), or Objectives."""
    from tailbudget.budget.objectives import Objectives, parse_objectives

    if slo is None:
        return None
    if isinstance(slo, Objectives):
        return slo if environment is None else slo.with_environment(environment)
    if isinstance(slo, Mapping) and any(isinstance(v, Mapping) for v in slo.values()):
        from tailbudget.budget.load import read_slo_block

        return read_slo_block(slo, environment=environment)  # a budget file's full form
    if isinstance(slo, Mapping):
        slo = ",".join(f"{key}={value}" for key, value in slo.items())
    if not isinstance(slo, str):
        raise TailbudgetError(
            f"slo must be a string such as 'p99=900', a mapping or Objectives, "
            f"got a {type(slo).__name__}"
        )
    return parse_objectives(slo, environment=environment)


def slo_text(slo: Any) -> str | None:
    """`slo` in the `--slo` grammar (the form some library steps still take)."""
    from tailbudget.budget.objectives import Objectives

    if slo is None or isinstance(slo, str):
        return slo
    if isinstance(slo, Mapping):
        return ",".join(f"{key}={value}" for key, value in slo.items())
    if isinstance(slo, Objectives):
        parts = [f"{o.key}={o.target_ms:g}" for o in slo]
        if slo.goodput is not None and slo.goodput.min is not None:
            parts.append(f"goodput={slo.goodput.min:g}")
        return ",".join(parts)
    raise TailbudgetError(f"slo must be a string, a mapping or Objectives, got {slo!r}")


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


def source_of(data: Data) -> Any:
    """What `read_log` takes: a path as a string, data in memory made re-readable (a
    RecordBatchReader is read once, in memory)."""
    from tailbudget._api.requests import Requests
    from tailbudget.logs.frames import is_in_memory, materialize

    if isinstance(data, Requests):
        return data.log  # read once by `tailbudget.read`, with its column options
    if isinstance(data, os.PathLike):
        return os.fspath(data)
    if is_in_memory(data):
        return materialize(data)
    return data


def sources_of(data: Data | Sequence[Data]) -> list[Any]:
    """One or several logs (the CLI's LOG given more than once) as `read_log` sources."""
    if isinstance(data, list | tuple):
        if not data:
            raise TailbudgetError("give at least one log")
        return [source_of(d) for d in data]
    return [source_of(data)]
