"""Completed traces -> one observation each: root duration, and each stage's ms on the
critical path, computed by the audit's own attribution (`logs.spans.critical_path_stages`)
on an embedded DuckDB over the batch's spans."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from tailbudget.control.stage_windows import MAX_STAGES
from tailbudget.control.traces.assembler import OpenTrace
from tailbudget.control.wal import StageColumn
from tailbudget.logs.traces import SPAN_SCHEMA

__all__ = ["Attributed", "Attributor"]

_BATCH_VIEW = "_tb_live_spans"


@dataclass(frozen=True)
class Attributed:
    """One row per completed trace (in the order given) and its stage columns."""

    traces: list[str]
    ts: npt.NDArray[np.float64]
    total_ms: npt.NDArray[np.float64]
    error: npt.NDArray[np.bool_]
    stages: dict[str, StageColumn]


class Attributor:
    """Owns one DuckDB connection (used from one thread: the receiver's flusher)."""

    def __init__(self, span_stage: Literal["operation", "service"]) -> None:
        from tailbudget.logs.engine import connect
        from tailbudget.logs.options import ReadOptions
        from tailbudget.logs.traces import SPAN_COLUMNS

        self.backend = connect(None)
        self.options = ReadOptions(span_stage=span_stage)
        self.columns = SPAN_COLUMNS
        self.named: tuple[str, ...] = ()
        """Stages named so far (sticky); the rest are `other`, as the audit folds them."""

    def _clear(self) -> None:
        _clear_tables(self.backend.con)

    def attribute(self, traces: Sequence[OpenTrace]) -> Attributed:
        from tailbudget.logs.spans import critical_path_stages

        roots = [t.root for t in traces if t.root is not None]
        table = _span_table(traces)
        # Registered by name and unregistered after (an ibis memtable stays registered
        # on the connection, holding every batch's spans).
        con = self.backend.con
        con.register(_BATCH_VIEW, table)
        try:
            per, self.named = critical_path_stages(
                self.backend.table(_BATCH_VIEW),
                self.columns,
                self.options,
                self.backend,
                "traces",
                named=self.named,
                most=MAX_STAGES - 1,
            )
        finally:
            con.unregister(_BATCH_VIEW)
            self._clear()
        stages = _stage_columns(per, [r.trace for r in roots], self.named)
        return Attributed(
            traces=[r.trace for r in roots],
            ts=np.array([r.start_ns / 1e9 for r in roots], dtype=np.float64),
            total_ms=np.array([(r.end_ns - r.start_ns) / 1e6 for r in roots], dtype=np.float64),
            error=np.array([r.error for r in roots], dtype=np.bool_),
            stages=stages,
        )


def _span_table(traces: Sequence[OpenTrace]) -> pa.Table:
    """The batch's spans as Arrow columns (a root's empty parent id is read as none by
    the span reader's own normalisation)."""
    rows = [row for trace in traces for row in trace.spans.values()]
    columns: list[Any] = list(zip(*rows, strict=True)) if rows else [()] * (len(SPAN_SCHEMA) - 1)
    arrays = [pa.array(c, type=f.type) for c, f in zip(columns, SPAN_SCHEMA, strict=False)]
    arrays.append(pa.nulls(len(rows), pa.string()))  # OTLP has no FOLLOWS_FROM
    return pa.Table.from_arrays(arrays, schema=SPAN_SCHEMA)


def _clear_tables(con: Any) -> None:
    """Drop the batch's intermediate tables: a long-running connection must not keep them."""
    names = con.sql(
        "select table_name from duckdb_tables() where temporary and table_name like '\\_%' "
        "escape '\\'"
    ).fetchall()
    for (name,) in names:
        con.execute(f'drop table if exists temp.main."{name}"')


def _stage_columns(
    per: pa.Table, traces: list[str], named: tuple[str, ...]
) -> dict[str, StageColumn]:
    """Every named stage for every trace (0 ms where the trace has none of it), as a
    stage column of a log is: the window's percentiles are then the audit's."""
    import pyarrow.compute as pc

    n = len(traces)
    columns = {stage: np.zeros(n, dtype=np.float64) for stage in named}
    at = pc.index_in(per.column("trace"), value_set=pa.array(traces, pa.string()))
    keep = pc.and_(pc.is_valid(at), pc.is_valid(per.column("stage")))
    rows = at.filter(keep).to_numpy(zero_copy_only=False).astype(np.int64)
    ms = pc.fill_null(per.column("ms").filter(keep), 0.0).to_numpy().astype(np.float64)
    stage = per.column("stage").filter(keep).combine_chunks().dictionary_encode()
    codes = stage.indices.to_numpy(zero_copy_only=False)
    for code, name in enumerate(stage.dictionary.to_pylist()):
        column = columns.get(name)
        if column is None:
            column = columns[name] = np.zeros(n, dtype=np.float64)
        mine = codes == code
        np.add.at(column, rows[mine], ms[mine])
    return {name: StageColumn.every_row(ms) for name, ms in columns.items()}
