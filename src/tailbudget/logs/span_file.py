"""A trace file's span table, kept on disk (Parquet) a chunk at a time.

The reader then holds one chunk of spans, never every span: DuckDB scans the file
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
    """A temporary Parquet file of span tables of one schema, a row group each.

    Use as a context manager: the file and its view on the engine go on exit, so
    whatever reads `table()` must be computed (materialised) inside the block.
    """

    def __init__(self, schema: pa.Schema) -> None:
        self._schema = schema
        self._folder = tempfile.mkdtemp(prefix="tailbudget-spans-")
        self._path = os.path.join(self._folder, "spans.parquet")
        self._writer: pq.ParquetWriter | None = None
        self._views: list[tuple[Any, str]] = []
        self.rows = 0
        """Span rows added so far."""

    def write(self, chunk: pa.Table) -> None:
        """One chunk of spans (of the file's schema)."""
        if not chunk.num_rows:
            return
        if self._writer is None:
            self._writer = pq.ParquetWriter(self._path, self._schema)
        self._writer.write_table(chunk)
        self.rows += chunk.num_rows

    def table(self, backend: Any) -> Any:
        """The rows as an Ibis table on `backend` (a Parquet scan on DuckDB)."""
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
