"""Shared state of one audit: the Ibis table, derived expressions, and how to run a pass."""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import ibis

from tailbudget.audit.config import AuditConfig
from tailbudget.logs.columns import UNATTRIBUTED as UNATTRIBUTED
from tailbudget.logs.engine import arrow_result, count_true, one_thread
from tailbudget.logs.table import LogTable

if TYPE_CHECKING:
    import ibis.expr.types as ir
    import pyarrow as pa

TOTAL = "total_ms"

OVERLAP_TOLERANCE_MS = 1.0
"""Integer-ms logs round each stage; a sum over the total by less than this is rounding."""

SAMPLE_ROWS = 250_000
"""Distribution shapes (CDF plot, gap test, covariate bins) come from a row sample this big."""

NULL_LABEL = "(null)"
"""The cohort value of a request whose dimension is null."""

NESTED_SHARE = 0.05
"""Above this share of requests with sum(stages) > total, stages are treated as nested."""


@dataclass
class Ctx:
    """One audit in progress: the log, its config and the figures of earlier passes."""

    log: LogTable
    config: AuditConfig
    passes: int = 0
    parent: Ctx | None = None
    """The full-log context of a sample context; passes are counted on the root."""
    notes: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    sampler: Callable[[float, int], ir.Table] | None = None
    """Draws a row sample kept for many passes (the scratch copy's), if any."""
    labelled: frozenset[str] = frozenset()
    """Cohort columns the table already holds as labels (`cohort_label`)."""
    _sample: Ctx | None = field(default=None, repr=False)

    @property
    def t(self) -> ir.Table:
        """The Ibis table."""
        return self.log.table

    def col(self, stage: str) -> ir.NumericColumn:
        """Latency expression of a stage (nulls as 0), `unattributed`, or the total."""
        if stage == UNATTRIBUTED:
            return self.t[TOTAL] - self.stage_sum()
        if stage == TOTAL:
            return self.t[TOTAL]
        return self.t[self.log.stage_column(stage)].cast("float64")

    def sampled(self) -> Ctx:
        """A context over a uniform row sample of about SAMPLE_ROWS (itself when small)."""
        n = self.log.rows.used
        if n <= 2 * SAMPLE_ROWS:
            return self
        if self._sample is None:
            # Several passes read the sample: drawn once, it costs one scan, not one each.
            if self.sampler is not None:
                table = self.sampler(SAMPLE_ROWS / n, self.config.seed)
            else:
                table = self.t.sample(SAMPLE_ROWS / n, seed=self.config.seed)
            self._sample = Ctx(
                replace(self.log, table=table), self.config, parent=self, labelled=self.labelled
            )
        return self._sample

    def cohort(self, dim: str) -> ir.StringColumn:
        """A cohort dimension's label per request (see `cohort_label`)."""
        column = self.t[dim]
        return column if dim in self.labelled else cohort_label(column)

    def count(self, pred: ir.BooleanValue) -> ir.IntegerScalar:
        """Aggregate: how many rows `pred` is true for (see `count_true`)."""
        return count_true(self.log.backend, pred)

    def instant(self, epoch_s: float) -> ir.TimestampScalar:
        """An epoch second as a literal of the log's `ts` (see `instant`)."""
        return instant(self.t["ts"], epoch_s)

    def stage_sum(self) -> ir.NumericColumn:
        """Sum of every stage column (a missing stage counts as 0)."""
        cols = [
            self.t[self.log.stage_column(s)].cast("float64").fill_null(0.0) for s in self.log.stages
        ]
        out = cols[0]
        for c in cols[1:]:
            out = out + c
        return out

    def run_row(self, label: str, exprs: dict[str, ir.Scalar]) -> dict[str, Any]:
        """Run one aggregate pass over the log and return its single row as Python values."""
        self._progress(label)
        expr = self.t.aggregate(**exprs)
        return py_row(self._execute(expr)[0])

    def run_frame(self, label: str, expr: ir.Table) -> list[dict[str, Any]]:
        """Run a grouped pass and return its rows as dicts of Python values."""
        self._progress(label)
        return [{k: _py(v) for k, v in row.items()} for row in self._execute(expr)]

    def run_arrow(self, label: str, expr: ir.Table) -> pa.Table:
        """Run a pass returning many rows, as a pyarrow Table."""
        self._progress(label)
        return to_arrow(self.log, expr)

    def _progress(self, label: str) -> None:
        root = self
        while root.parent is not None:
            root = root.parent
        root.passes += 1
        if self.config.progress is not None:
            self.config.progress(label)

    def _execute(self, expr: ir.Table) -> list[dict[str, Any]]:
        # Arrow, not pandas: results are small, and this skips a pandas round trip.
        # An approximate quantile (a small log's CDF, bins and grids; the sample's
        # input-shape profiles) is the same every run only when computed on one thread;
        # on a table this small it costs little.
        with one_thread(self.log.backend) if self._small() else nullcontext():
            return list(to_arrow(self.log, expr).to_pylist())

    def _small(self) -> bool:
        """A row sample, or a log no bigger than one (its passes run on one thread)."""
        return self.parent is not None or self.log.rows.used <= 2 * SAMPLE_ROWS


def instant(ts: ir.TimestampValue, epoch_s: float) -> ir.TimestampScalar:
    """An epoch second as a literal of the type of `ts` (a UTC wall-clock timestamp).

    Comparing `ts` with it costs a row far less than turning each `ts` into seconds.
    """

    wall = datetime.fromtimestamp(epoch_s, UTC).replace(tzinfo=None)
    return ibis.literal(wall, type=ts.type())


def cohort_label(column: ir.Column) -> ir.StringColumn:
    """A cohort dimension's value as text, NULL_LABEL for null."""
    return column.cast("string").fill_null(NULL_LABEL)


def to_arrow(log: LogTable, expr: ir.Expr) -> pa.Table:
    """Run an expression on the log's backend and return a pyarrow Table."""
    return arrow_result(expr, log.backend)


def py_row(row: dict[str, Any]) -> dict[str, Any]:
    """A result row as plain Python values, None for NaN."""
    return {k: _py(v) for k, v in row.items()}


def _py(v: Any) -> Any:
    """Plain Python values, None for NaN."""
    if isinstance(v, list):
        return [_py(x) for x in v]
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def fnum(v: Any, default: float = 0.0) -> float:
    """A result value as float, with a default for null."""
    if v is None:
        return default
    return float(v)
