"""In-memory logs: a DataFrame, an Arrow table or an Ibis table read where it already is.

DuckDB scans pandas, polars and Arrow data in place (a registered view), so a notebook's
DataFrame is audited without a copy to disk. An Ibis table stays on its own backend.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

import ibis

from tailbudget.errors import LogError

if TYPE_CHECKING:
    import duckdb
    import ibis.expr.types as ir
    import pandas as pd  # type: ignore[import-untyped]
    import polars as pl
    import pyarrow as pa
    from ibis.backends import BaseBackend

__all__ = ["Frame", "Spooled", "in_memory", "is_in_memory", "label_of", "materialize", "spool"]

Frame: TypeAlias = (
    "pd.DataFrame | pl.DataFrame | pa.Table | pa.RecordBatchReader | ir.Table"
    " | duckdb.DuckDBPyRelation"
)
"""A log in memory: what `read_log` reads where it is. (pandas, Arrow, Ibis and DuckDB
ship no type information: the checker takes those as any value.)"""

_KINDS = {
    "pandas": "pandas DataFrame",
    "polars": "polars DataFrame",
    "pyarrow": "Arrow table",
}


SPOOL_BATCH_ROWS = 65_536
"""Rows a spooled relation or reader holds in memory at once."""


@dataclass(frozen=True)
class Spooled:
    """A one-shot source (a RecordBatchReader, a DuckDB relation) written batch by batch
    to a scratch Parquet file: read in bounded memory, as a file is, and re-readable
    (simulate reads its log twice; a reader read twice was empty: "no rows")."""

    path: str
    label: str


_SPOOL_DIR: list[str] = []


def _spool_dir() -> str:
    if not _SPOOL_DIR:
        folder = tempfile.mkdtemp(prefix="tailbudget-spool-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _SPOOL_DIR.append(folder)
    return _SPOOL_DIR[0]


def _reader_of(source: object, label: str) -> pa.RecordBatchReader:
    """A RecordBatchReader over `source` (a reader itself, or a DuckDB relation's rows)."""
    if type(source).__module__.split(".", 1)[0] == "pyarrow":
        return source
    try:
        # DuckDB 2 deprecates fetch_record_batch (an error under the suite's warnings)
        fetch = getattr(source, "to_arrow_reader", None) or getattr(
            source, "fetch_record_batch", None
        )
        if fetch is None:
            raise TypeError(f"a {type(source).__name__} is neither a reader nor a relation")
        return fetch(SPOOL_BATCH_ROWS)
    except Exception as exc:  # duckdb.Error: a closed connection, a failing query
        raise LogError(
            f"cannot read the {label}: {str(exc).splitlines()[0]} (a relation is read "
            "on its own connection, which must still be open)"
        ) from None


def spool(source: object) -> Spooled:
    # object: materialize tells a reader or relation by its module, not by its type
    """`source` streamed to a scratch Parquet file, one batch in memory at a time."""
    # A start-up guard: pyarrow loads on first use, not with this module.
    import pyarrow.parquet as pq

    label = "DuckDB relation" if label_of(source) == "DuckDB relation" else "RecordBatchReader"
    reader = _reader_of(source, label)
    path = os.path.join(_spool_dir(), f"{_name()}.parquet")
    try:
        with pq.ParquetWriter(path, reader.schema) as out:
            for batch in reader:
                out.write_batch(batch)
    except LogError:
        raise
    except Exception as exc:
        raise LogError(f"cannot read the {label}: {str(exc).splitlines()[0]}") from None
    return Spooled(path, label)


def is_in_memory(source: object) -> bool:
    """True for anything that is not a path (a str, a PathLike) or None."""
    return not (source is None or isinstance(source, str | os.PathLike))


def label_of(source: object) -> str:
    """What the report calls an in-memory log: its kind, e.g. "pandas DataFrame"."""
    if not is_in_memory(source):
        return str(source)
    if isinstance(source, Spooled):
        return source.label
    root = type(source).__module__.split(".", 1)[0]
    if root == "ibis":
        return "Ibis table"
    if root == "duckdb":
        return "DuckDB relation"
    return _KINDS.get(root, type(source).__name__)


def materialize(source: Frame | Spooled) -> Frame | Spooled:
    """A source that can be scanned more than once (the audit makes several passes).

    A RecordBatchReader is read once into an Arrow table and a DuckDB relation is run
    once into one (both in memory); everything else is returned as is.
    """
    root = type(source).__module__.split(".", 1)[0]
    if (root == "pyarrow" and hasattr(source, "read_all")) or (
        root == "duckdb" and hasattr(source, "arrow")
    ):
        # A reader is read once and a relation lives on its own connection (a 300M-row
        # one was materialised whole: DuckDB's out-of-memory at 3-6 GB): both are
        # streamed to a scratch Parquet file and read from there, as files are.
        return spool(source)
    if root == "pandas":
        _check_pandas(source)
    return source


def _check_pandas(frame: pd.DataFrame) -> None:
    """A pandas column of datetimes mixing zoned and naive values has no one type; DuckDB
    fails on it deep in the audit (ConversionException), so it is refused here."""
    for name in frame.columns:
        column = frame[name]
        if column.dtype != object:
            continue
        values = column.dropna()
        kinds = {type(v).__name__ for v in values.iloc[:1000]}
        if not kinds & {"datetime", "Timestamp"}:
            continue
        zoned = {getattr(v, "tzinfo", None) is not None for v in values if hasattr(v, "tzinfo")}
        if len(zoned) > 1:
            raise LogError(
                f"pandas DataFrame: column {str(name)!r} mixes timezone-aware and naive "
                "datetimes; make them one kind, e.g. pd.to_datetime(df[col], utc=True)",
                param="timestamp",
            )


def in_memory(source: Frame | Spooled, backend: BaseBackend) -> tuple[ir.Table, BaseBackend]:
    """(Ibis table, its backend) for an in-memory source; LogError for what is not one."""

    if isinstance(source, ibis.Table):
        try:
            return source, source._find_backend(use_default=False)
        except ibis.common.exceptions.IbisError:  # an unbound memtable: a view on ours
            return backend.create_view(_name(), source), backend
    data = materialize(source)
    if isinstance(data, Spooled):
        return backend.read_parquet(data.path), backend
    root = type(data).__module__.split(".", 1)[0]
    if root not in _KINDS:
        raise LogError(
            f"cannot read a {type(source).__name__} as a log: give a path, a pandas or polars "
            "DataFrame, a pyarrow Table or RecordBatchReader, an Ibis table or a DuckDB relation"
        )
    names = getattr(data, "column_names", None) or list(data.columns)
    bad = next((str(n) for n in names if "\x00" in str(n)), None)
    if bad is not None:
        # DuckDB cuts a name at its NUL: the column would vanish or take another's name.
        raise LogError(
            f"{label_of(source)}: column {bad!a} holds U+0000 NUL; rename the column",
            param="stages",
        )
    con = getattr(backend, "con", None)
    if con is None or not hasattr(con, "register"):
        # Not DuckDB (Spark, a database URL): Ibis uploads the data to that engine.
        return ibis.memtable(data), backend
    name = _name()
    con.register(name, data)
    return backend.table(name), backend


def _name() -> str:
    return f"_tailbudget_frame_{uuid.uuid4().hex[:12]}"
