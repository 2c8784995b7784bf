"""The per-request table `tailbudget.read` returns, below `_api.inputs` and `_api.requests`
(both need it: inputs reads a `Requests` as the log it already holds)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ibis.expr.types as ir
    import pandas as pd  # type: ignore[import-untyped]
    import polars as pl
    import pyarrow as pa

    from tailbudget.logs import LogTable, RowCounts

__all__ = ["Requests"]


@dataclass(frozen=True)
class Requests:
    """A request a row: `request_id`, `ts` (when the log has time), `total_ms`, `error`,
    one column per stage named as the stage (its ms; for span tables and traces its
    critical-path ms in that trace), then the shape and cohort columns."""

    log: LogTable
    """The canonical table the audit reads (engine-safe column names)."""

    @property
    def table(self) -> ir.Table:
        """The Ibis table (lazy: nothing runs until it is executed or converted)."""
        log = self.log
        cols: dict[str, ir.Column] = {"request_id": log.table["request_id"]}
        if log.has_timestamp:
            cols["ts"] = log.table["ts"]
        cols["total_ms"] = log.table["total_ms"]
        cols["error"] = log.table["error"]
        for stage in log.stages:
            cols[stage] = log.table[log.stage_column(stage)]
        for name in (*log.shape, *log.cohorts):
            if name not in cols and name in log.table.columns:
                cols[name] = log.table[name]
        return log.table.select(**cols)

    @property
    def stages(self) -> tuple[str, ...]:
        """The stage names, in the log's order."""
        return self.log.stages

    @property
    def rows(self) -> RowCounts:
        """Rows read, used and rejected (by reason)."""
        return self.log.rows

    @property
    def notes(self) -> tuple[str, ...]:
        """What the reader assumed or skipped (units, spans folded into `other`...)."""
        return self.log.notes

    def to_arrow(self) -> pa.Table:
        """A pyarrow Table."""
        return self.table.to_pyarrow()

    def to_pandas(self) -> pd.DataFrame:
        """A pandas DataFrame."""
        return self.table.to_pandas()

    def to_polars(self) -> pl.DataFrame:
        """A polars DataFrame (needs polars installed)."""
        frame: pl.DataFrame = self.table.to_polars()
        return frame

    def __len__(self) -> int:
        return self.log.rows.used

    def __repr__(self) -> str:
        rows = self.log.rows
        return (
            f"<Requests from {self.log.source}: {rows.used:,} requests, "
            f"{len(self.stages)} stages ({', '.join(self.stages[:6])}"
            f"{', ...' if len(self.stages) > 6 else ''}), {rows.rejected:,} rows rejected>"
        )
