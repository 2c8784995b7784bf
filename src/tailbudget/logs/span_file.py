"""Span rows parsed from trace files, kept on disk (Parquet) a chunk at a time.

The reader then holds one chunk of rows, never every span: DuckDB scans the file
(and spills its joins within its memory limit); other engines get the file's
Arrow table.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from types import TracebackType
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tailbudget.logs.engine import _quote, arrow_table, engine_name

__all__ = ["SpanFile"]


class SpanFile:
    """A temporary Parquet file of span rows, written `chunk_rows` rows at a time.

    Use as a context manager: the file and its view on the engine go on exit, so
    whatever reads `table()` must be computed (materialised) inside the block.
    """

    def __init__(self, schema: pa.Schema, chunk_rows: int) -> None:
        self._schema = schema
        self._chunk_rows = max(1, chunk_rows)
        self._chunk: list[dict[str, Any]] = []
        self._folder = tempfile.mkdtemp(prefix="tailbudget-spans-")
        self._path = os.path.join(self._folder, "spans.parquet")
        self._writer: pq.ParquetWriter | None = None
        self._views: list[tuple[Any, str]] = []
        self.rows = 0
        """Span rows added so far."""

    def add(self, row: dict[str, Any]) -> None:
        """One span row (keys named as the schema's fields)."""
        self._chunk.append(row)
        self.rows += 1
        if len(self._chunk) >= self._chunk_rows:
            self._flush()

    def table(self, backend: Any) -> Any:
        """The rows as an Ibis table on `backend` (a Parquet scan on DuckDB)."""
        self._flush()
        # From the row count, not the writer: a second call finds the writer closed.
        if not self.rows:
            return arrow_table(backend, self._schema.empty_table())
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if engine_name(backend) != "duckdb":
            return arrow_table(backend, pq.read_table(self._path, schema=self._schema))
        name = f"_tailbudget_spans_{uuid.uuid4().hex[:12]}"
        path = _quote(self._path)
        backend.raw_sql(f"CREATE TEMP VIEW {name} AS SELECT * FROM read_parquet('{path}')")
        self._views.append((backend, name))
        return backend.table(name)

    def _flush(self) -> None:
        if not self._chunk:
            return
        batch = pa.Table.from_pylist(self._chunk, schema=self._schema)
        self._chunk = []
        if self._writer is None:
            self._writer = pq.ParquetWriter(self._path, self._schema)
        self._writer.write_table(batch)

    def __enter__(self) -> SpanFile:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._writer is not None:
            self._writer.close()
        for backend, name in self._views:
            # The session may already be closed; the view goes with it then.
            with contextlib.suppress(Exception):
                backend.raw_sql(f"DROP VIEW IF EXISTS {name}")
        shutil.rmtree(self._folder, ignore_errors=True)
