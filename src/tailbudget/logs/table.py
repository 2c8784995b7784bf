"""The canonical log table every reader produces and every audit step consumes.

Canonical columns (Ibis types):
  request_id  string
  ts          timestamp (UTC), null when the log has none
  total_ms    float64 end-to-end latency in milliseconds
  <stage>_ms  float64 per stage, one column per name in `stages`; the column's name is an
              engine-safe identifier (`stage_columns`), the stage keeps the log's name
  error       boolean (false when the log has no error column)
  covariates  numeric columns named in `shape`, as the log gave them
  cohorts     string columns named in `cohorts`
Rows a reader rejected are not in `table`; they are counted in `rows`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ibis.expr.types as ir
    import numpy as np
    import numpy.typing as npt
    from ibis.backends import BaseBackend


@dataclass(frozen=True, slots=True)
class RowCounts:
    """How many rows were read, used and rejected (by reason).

    `failed` counts requests a benchmark recorded as failed without any latency
    (cancelled, refused): they are errors, so they belong in an error rate's
    denominator, but hold no time to rank. total = used + rejected + failed.
    """

    total: int
    used: int
    rejected: int
    rejected_reasons: dict[str, int] = field(default_factory=dict)
    failed: int = 0
    failed_reasons: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class LogTable:
    """A latency log in canonical form, on an Ibis backend (DuckDB by default)."""

    table: ir.Table
    """ibis.Table with the canonical columns above."""
    stages: tuple[str, ...]
    shape: tuple[str, ...] = ()
    cohorts: tuple[str, ...] = ()
    has_timestamp: bool = False
    total_derived: bool = False
    """True when the log had no total and total_ms is the sum of stages."""
    rows: RowCounts = field(default_factory=lambda: RowCounts(0, 0, 0))
    source: str = ""
    format: str = ""
    """parquet | csv | jsonl | otlp | jaeger | spans | vllm | llmperf | aiperf | guidellm | sglang |
    engine"""
    notes: tuple[str, ...] = ()
    """Facts about the input the report should state (units assumed, spans skipped...)."""
    backend: BaseBackend = None
    """The Ibis backend holding `table` (every reader sets it)."""
    attribution: str = ""
    """How stage times were derived: "critical_path" or "self" (span tables), "" as logged."""
    stage_columns: dict[str, str] = field(default_factory=dict)
    """Stage name (as the log wrote it) -> its column in `table`; `<stage>_ms` when absent."""
    unit_stated: bool = True
    """False when the latency unit was assumed (ms) from a column that does not name it."""
    span_profile: Mapping[tuple[str, str], npt.NDArray[np.float64]] | None = None
    """Span tables read with `span_profile`: {(stage, operation key): sample of ms}."""

    def stage_column(self, stage: str) -> str:
        """Column name of a stage on the engine."""
        return self.stage_columns.get(stage, f"{stage}_ms")
