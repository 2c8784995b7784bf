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
        index = {r.trace: i for i, r in enumerate(roots)}
        rows = [row for trace in traces for row in trace.spans.values()]
        columns: list[Any] = [list(c) for c in zip(*rows, strict=True)] if rows else []
        if not columns:
            columns = [[] for _ in range(len(SPAN_SCHEMA) - 1)]
        columns[2] = [p or None for p in columns[2]]
        columns.append(pa.nulls(len(rows), pa.string()))  # OTLP has no FOLLOWS_FROM
        table = pa.Table.from_arrays(
            [pa.array(c, type=f.type) for c, f in zip(columns, SPAN_SCHEMA, strict=True)],
            schema=SPAN_SCHEMA,
        )
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
        stages = _stage_columns(per, index, self.named)
        return Attributed(
            traces=[r.trace for r in roots],
            ts=np.array([r.start_ns / 1e9 for r in roots], dtype=np.float64),
            total_ms=np.array([(r.end_ns - r.start_ns) / 1e6 for r in roots], dtype=np.float64),
            error=np.array([r.error for r in roots], dtype=np.bool_),
            stages=stages,
        )


def _clear_tables(con: Any) -> None:
    """Drop the batch's intermediate tables: a long-running connection must not keep them."""
    names = con.sql(
        "select table_name from duckdb_tables() where temporary and table_name like '\\_%' "
        "escape '\\'"
    ).fetchall()
    for (name,) in names:
        con.execute(f'drop table if exists temp.main."{name}"')


def _stage_columns(
    per: pa.Table, index: dict[str, int], named: tuple[str, ...]
) -> dict[str, StageColumn]:
    """Every named stage for every trace (0 ms where the trace has none of it), as a
    stage column of a log is: the window's percentiles are then the audit's."""
    n = len(index)
    columns = {stage: np.zeros(n, dtype=np.float64) for stage in named}
    for trace, stage, ms in zip(
        per.column("trace").to_pylist(),
        per.column("stage").to_pylist(),
        per.column("ms").to_pylist(),
        strict=True,
    ):
        at = index.get(trace)
        if at is not None and stage is not None:
            column = columns.get(stage)
            if column is None:
                column = columns[stage] = np.zeros(n, dtype=np.float64)
            column[at] += float(ms or 0.0)
    return {stage: StageColumn.every_row(ms) for stage, ms in columns.items()}
