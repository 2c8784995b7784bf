"""Parquet sink: row groups written by the writer thread; the file is complete on close.

While the recorder runs, data goes to `<path>.partial`; `close()` finishes the
footer and renames it to `<path>` (a crash never leaves a truncated file at
the final name). Columns that first appear later (a stage that had not run
yet) widen the schema: earlier rows get nulls.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tailbudget.errors import TailbudgetError
from tailbudget.measure.columns import arrow_array
from tailbudget.measure.sinks.base import Batch, Sink

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

log = logging.getLogger("tailbudget.measure")


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    # A start-up guard: pyarrow loads on first use, not with this module.
    import pyarrow as pa

    keys: dict[str, None] = {}
    for row in rows:
        if len(row) != len(keys) or row.keys() - keys.keys():
            keys.update(dict.fromkeys(row))
    arrays: dict[str, pa.Array] = {}
    for key in keys:
        values = [row.get(key) for row in rows]
        if key == "ts":  # ISO-8601 text from the writer; Arrow parses it in C++
            arrays[key] = pa.array(values, type=pa.string()).cast(pa.timestamp("us", tz="UTC"))
            continue
        arrays[key] = arrow_array(values)
    return pa.table(arrays)


class ParquetSink(Sink):
    """Writes records to a Parquet file (zstd), in row groups of `row_group_rows`."""

    name = "parquet"

    def __init__(
        self, path: str | Path, *, row_group_rows: int = 20_000, compression: str = "zstd"
    ) -> None:
        # A start-up guard: pyarrow loads on first use, not with this module.
        import pyarrow.parquet  # noqa: F401

        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        if row_group_rows < 1:
            raise TailbudgetError(f"row_group_rows must be >= 1, got {row_group_rows}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.partial.touch()
        except OSError as exc:
            raise TailbudgetError(
                f"cannot write Parquet sink {str(path)!r}: {exc.strerror}; give a writable path"
            ) from exc
        self.row_group_rows = row_group_rows
        self.compression = compression
        # Each batch becomes an Arrow table at once: columnar memory the GC never scans.
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._writer: pq.ParquetWriter | None = None
        self._schema: pa.Schema | None = None
        self.rows_written = 0
        # Import everything pyarrow pulls in lazily now: the first write may be the
        # atexit flush, when Python refuses new atexit registrations (pandas' pools).
        _table([{"request_id": "warm-up", "ts": "2000-01-01T00:00:00.000000Z", "total_ms": 0.0}])

    def write(self, batch: Batch) -> None:
        if not len(batch):
            return
        found, odd, rest = batch.blocks
        parts = [block.arrow() for block in found]
        if odd:
            parts.append(_table(odd))
        self._pending.extend(_in_order(parts, [b.positions for b in found] + [rest]))
        self._pending_rows += len(batch)
        if self._pending_rows >= self.row_group_rows:
            self._write_pending()

    def _open(self, schema: pa.Schema) -> None:
        # A start-up guard: pyarrow loads on first use, not with this module.
        import pyarrow.parquet as pq

        self._writer = pq.ParquetWriter(self.partial, schema, compression=self.compression)
        self._schema = schema

    def _write_pending(self) -> None:
        if not self._pending:
            return
        # A start-up guard: pyarrow loads on first use, not with this module.
        import pyarrow as pa

        tables, self._pending, self._pending_rows = self._pending, [], 0
        try:
            merged = [pa.concat_tables(tables, promote_options="permissive")]
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # clashing types: one at a time
            merged = tables
        for table in merged:
            self._write_table(table)

    def _write_table(self, table: pa.Table) -> None:
        # A start-up guard: pyarrow loads on first use, not with this module.
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self._writer is None or self._schema is None:
            self._open(table.schema)
        elif not table.schema.equals(self._schema):
            try:
                unified = pa.unify_schemas(
                    [self._schema, table.schema], promote_options="permissive"
                )
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                # Incompatible types: keep the old ones, only add new columns.
                extra = [f for f in table.schema if f.name not in self._schema.names]
                unified = pa.schema([*self._schema, *extra])
            if not unified.equals(self._schema):
                # Rewrite what was written under the wider schema (rare: new columns).
                self._writer.close()
                old = pq.read_table(self.partial)
                self._open(unified)
                self._writer.write_table(_conform(old, unified))
        writer, schema = self._writer, self._schema
        assert writer is not None and schema is not None  # opened above
        writer.write_table(_conform(table, schema))
        self.rows_written += table.num_rows

    def flush(self) -> None:
        self._write_pending()

    def close(self) -> None:
        # A start-up guard: pyarrow loads on first use, not with this module.
        import pyarrow as pa

        self._write_pending()
        if self._writer is None:  # no records: still leave a valid (empty) file
            self._open(pa.schema([("request_id", pa.string()), ("total_ms", pa.float64())]))
        assert self._writer is not None  # opened above
        self._writer.close()
        os.replace(self.partial, self.path)


def _in_order(parts: list[pa.Table], positions: list[list[int]]) -> list[pa.Table]:
    """One table in batch order from per-shape parts (as given if their types clash)."""
    if len(parts) < 2:
        return parts
    # A start-up guard: pyarrow loads on first use, not with this module.
    import pyarrow as pa

    try:
        table = pa.concat_tables(parts, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return parts
    return [table.take(np.argsort(np.concatenate(positions), kind="stable"))]


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    # A start-up guard: pyarrow loads on first use, not with this module.
    import pyarrow as pa

    cols = []
    for f in schema:
        if f.name in table.column_names:
            col = table.column(f.name)
            if col.type != f.type:
                try:
                    col = col.cast(f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    log.warning("tailbudget: column %r changed type; values kept as nulls", f.name)
                    col = pa.nulls(len(table), f.type)
            cols.append(col)
        else:
            cols.append(pa.nulls(len(table), f.type))
    return pa.table(cols, schema=schema)
