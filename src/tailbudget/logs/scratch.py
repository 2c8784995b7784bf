"""A scratch copy of a log: read and checked once, for the audit's many passes."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import ibis
import ibis.expr.datatypes as dt
from ibis.backends.sql.datatypes import DuckDBType

from tailbudget.logs.engine import arrow_result, engine_name

if TYPE_CHECKING:
    import ibis.expr.types as ir
    from ibis.backends import BaseBackend

__all__ = ["ENUM_MOST", "Scratch", "scratch_copy"]

ENUM_MOST = 4_096
"""A text column with at most this many values is copied as a DuckDB ENUM (its codes)."""


@dataclass(frozen=True)
class Scratch:
    """A scratch copy of a log: `table`, and `sample` to keep a row sample of it in the
    same scratch space (dropped with it)."""

    table: ir.Table
    backend: BaseBackend
    database: tuple[str, str] | None

    def sample(self, fraction: float, seed: int) -> ir.Table:
        """A uniform sample of about `fraction` of the rows, for many passes.

        On DuckDB it is kept, once, in the scratch database, and a row is drawn when a hash
        of its position and `seed` falls under `fraction` of the hash's range: the same
        rows every run, drawn on every thread (a seeded TABLESAMPLE runs on one). Other
        engines draw their own seeded sample on each pass.
        """
        if self.database is None:
            return self.table.sample(fraction, seed=seed)
        name = f"_tailbudget_kept_{uuid.uuid4().hex[:12]}"
        cut = min(int(fraction * 2.0**64), 2**64 - 1)
        where = ".".join(_ident(part) for part in self.database)
        self.backend.raw_sql(
            f"CREATE TABLE {where}.{_ident(name)} AS SELECT * FROM "
            f"{where}.{_ident(self.table.op().name)} "
            f"WHERE hash(rowid, {int(seed)}) < {cut}::UBIGINT"
        )
        return self.backend.table(name, database=self.database)


@contextmanager
def scratch_copy(
    backend: BaseBackend, expr: ir.Table, name: str, labels: Sequence[str] = ()
) -> Iterator[Scratch]:
    """`expr` computed once, for many passes over it; dropped on exit.

    On DuckDB the copy goes to a temporary database file: it is compressed, and its
    blocks are read back from disk once they no longer fit the memory limit (an
    in-memory table would have to be spilled, and read back, in full). The text columns
    named in `labels` are stored as an ENUM when they hold at most ENUM_MOST values:
    writing codes costs a fraction of writing text, and passes group and compare codes.
    Other engines scan `expr` itself each time.
    """
    if engine_name(backend) != "duckdb":
        yield Scratch(expr, backend, None)
        return
    folder = tempfile.mkdtemp(prefix="tailbudget-scratch-")
    alias = f"_tailbudget_scratch_{uuid.uuid4().hex[:12]}"
    try:
        path = _text(os.path.join(folder, "scratch.duckdb"))
        backend.raw_sql(f"ATTACH {path} AS {alias}")
        try:
            database = (alias, "main")
            table = _copy(backend, expr, name, database, labels)
            yield Scratch(table, backend, database)
        finally:
            backend.raw_sql(f"DETACH {alias}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _copy(
    backend: BaseBackend,
    expr: ir.Table,
    name: str,
    database: tuple[str, str],
    labels: Sequence[str],
) -> ir.Table:
    enums = _few_values(backend, expr, [c for c in labels if expr[c].type().is_string()])
    if not enums:
        return backend.create_table(name, expr, database=database)

    schema = expr.schema()
    columns = ", ".join(
        f"{_ident(c)} {_enum(enums[c]) if c in enums else DuckDBType.to_string(t)}"
        for c, t in schema.items()
    )
    where = ".".join(_ident(part) for part in database)
    backend.raw_sql(f"CREATE TABLE {where}.{_ident(name)} ({columns})")
    # The text goes in as the ENUM's codes: DuckDB casts each value on insert.
    backend.insert(name, expr, database=database)
    return backend.table(name, database=database)


def _few_values(backend: BaseBackend, expr: ir.Table, columns: list[str]) -> dict[str, list[str]]:
    """The distinct non-null values of each text column that has at most ENUM_MOST, from
    one query (a distinct select per column, each cut at ENUM_MOST + 1)."""
    if not columns:
        return {}

    parts = [
        expr.select(_v=expr[c]).distinct().limit(ENUM_MOST + 1).mutate(_c=ibis.literal(k, dt.int32))
        for k, c in enumerate(columns)
    ]
    table = arrow_result(parts[0] if len(parts) == 1 else ibis.union(*parts), backend)
    found: dict[int, list[str]] = {}
    for k, v in zip(table.column("_c").to_pylist(), table.column("_v").to_pylist(), strict=True):
        if v is not None:
            found.setdefault(k, []).append(v)
    return {
        c: sorted(found.get(k, []))
        for k, c in enumerate(columns)
        if len(found.get(k, [])) <= ENUM_MOST
    }


def _enum(values: list[str]) -> str:
    if not values:
        return "VARCHAR"
    return "ENUM(" + ", ".join(map(_text, values)) + ")"


def _text(value: str) -> str:
    """A SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
