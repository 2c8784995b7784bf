"""In-memory logs: a DataFrame, an Arrow table or an Ibis table read where it already is.

DuckDB scans pandas, polars and Arrow data in place (a registered view), so a notebook's
DataFrame is audited without a copy to disk. An Ibis table stays on its own backend.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from tailbudget.errors import LogError

__all__ = ["in_memory", "is_in_memory", "label_of", "materialize"]

_KINDS = {
    "pandas": "pandas DataFrame",
    "polars": "polars DataFrame",
    "pyarrow": "Arrow table",
}


def is_in_memory(source: object) -> bool:
    """True for anything that is not a path (a str, a PathLike) or None."""
    return not (source is None or isinstance(source, str | os.PathLike))


def label_of(source: object) -> str:
    """What the report calls an in-memory log: its kind, e.g. "pandas DataFrame"."""
    if not is_in_memory(source):
        return str(source)
    root = type(source).__module__.split(".", 1)[0]
    if root == "ibis":
        return "Ibis table"
    if root == "duckdb":
        return "DuckDB relation"
    return _KINDS.get(root, type(source).__name__)


def materialize(source: Any) -> Any:
    """A source that can be scanned more than once (the audit makes several passes).

    A RecordBatchReader is read once into an Arrow table and a DuckDB relation is run
    once into one (both in memory); everything else is returned as is.
    """
    root = type(source).__module__.split(".", 1)[0]
    if root == "pyarrow" and hasattr(source, "read_all"):
        return source.read_all()
    if root == "duckdb" and hasattr(source, "arrow"):
        # A relation lives on its own connection; its rows are what the audit needs.
        # (duckdb 2 names it to_arrow_table and deprecates the older spellings)
        return (getattr(source, "to_arrow_table", None) or source.arrow)()
    return source


def in_memory(source: Any, backend: Any) -> tuple[Any, Any]:
    """(Ibis table, its backend) for an in-memory source; LogError for what is not one."""
    import ibis

    if isinstance(source, ibis.Table):
        try:
            return source, source._find_backend(use_default=False)
        except ibis.common.exceptions.IbisError:  # an unbound memtable: a view on ours
            return backend.create_view(_name(), source), backend
    data = materialize(source)
    root = type(data).__module__.split(".", 1)[0]
    if root not in _KINDS:
        raise LogError(
            f"cannot read a {type(source).__name__} as a log: give a path, a pandas or polars "
            "DataFrame, a pyarrow Table or RecordBatchReader, an Ibis table or a DuckDB relation"
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
