"""`tailbudget.read`: the per-request table every command works on, to take anywhere."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tailbudget._api.inputs import BudgetLike, Columns, Data, budget_of, source_of
from tailbudget._api.request_table import Requests

if TYPE_CHECKING:
    from tailbudget.logs.engine import Engine

__all__ = ["Requests", "read"]


def read(
    data: Data,
    *,
    budget: BudgetLike = None,
    total: str | None = None,
    stage: Sequence[str] = (),
    stages: str | Sequence[str] | None = None,
    timestamp: str | None = None,
    unit: str | None = None,
    span_stage: str | None = None,
    shape: Sequence[str] = (),
    cohorts: Sequence[str] = (),
    engine: Engine = None,
    query: str | None = None,
) -> Requests:
    """Read a log (a path, DataFrame, Arrow or Ibis table, DuckDB relation) into its
    per-request table. Keyword arguments are the CLI's options (`--total`, `--stages`,
    ...); `stages` is a glob string (as `--stages`) or a list of columns (as `--stage`)."""
    # Deferred (start-up): `import tailbudget` and a first `tb.<name>` load only what
    # that name needs (bench/startup.py); every import inside a function in this
    # module is deferred for the same reason.
    from tailbudget.logs import read_log

    columns = Columns(
        total=total, stage=stage, stages=stages, timestamp=timestamp, unit=unit,
        span_stage=span_stage, shape=shape, cohorts=cohorts, query=query,
    )  # fmt: skip
    source = None if data is None else source_of(data)
    return Requests(read_log(source, columns.options(budget_of(budget)), engine=engine))
