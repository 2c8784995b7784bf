"""Connecting to the Ibis backend a log is read on (DuckDB by default)."""

from __future__ import annotations

import functools
import os
import re
import shutil
import tempfile
import threading
import uuid
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeAlias

import ibis
from ibis.formats.pyarrow import PyArrowData

from tailbudget.errors import LogError

if TYPE_CHECKING:
    import ibis.expr.datatypes as dt
    import ibis.expr.types as ir
    import pyarrow as pa
    from ibis.backends import BaseBackend
    from pyspark.sql import SparkSession

__all__ = [
    "MEMORY_LIMIT_ENV",
    "Engine",
    "arrow_result",
    "capped_memory",
    "connect",
    "count_true",
    "engine_name",
    "spark_session",
]

MEMORY_LIMIT_ENV = "TAILBUDGET_MEMORY_LIMIT"
"""Environment variable: DuckDB's memory limit for the sessions tailbudget opens."""
DEFAULT_MEMORY_LIMIT = "1GB"
"""Beyond it DuckDB spills tables, sorts and hash tables to disk, so a log of any size fits."""

Engine: TypeAlias = "str | BaseBackend | None"
"""Where a log is read: None (a new in-memory DuckDB), "pyspark", an Ibis URL, or a
connected Ibis backend. (Ibis ships no type information: the checker takes a backend, a
table or a column as any value; the names say which.)"""

_SPARK_LOCK = threading.Lock()
_SPARK: dict[str, Any] = {}


def connect(engine: Engine = None) -> BaseBackend:
    """An Ibis backend: None = new in-memory DuckDB, "pyspark" = local Spark, else a URL.

    An already connected Ibis backend is returned as is.
    """

    if engine is None or engine in ("duckdb", "duckdb://", "duckdb://:memory:"):
        return _bounded(_utc(ibis.duckdb.connect()))
    if not isinstance(engine, str):
        if isinstance(engine, ibis.BaseBackend):
            return engine
        raise LogError(f"engine must be a URL string, got {type(engine).__name__}")
    if engine in ("pyspark", "pyspark://", "spark", "spark://"):
        return _pyspark_backend()
    try:
        return _bounded(_utc(ibis.connect(engine)))
    except ImportError as exc:
        scheme = engine.split(":", 1)[0]
        raise LogError(
            f"engine {engine!r} needs a backend that is not installed ({exc}); "
            f"install it with pip install 'ibis-framework[{scheme}]'"
        ) from exc
    except Exception as exc:
        raise LogError(f"cannot connect to engine {engine!r}: {_first_line(exc)}") from exc


def _utc(backend: BaseBackend) -> BaseBackend:
    """Pin a DuckDB session we opened to UTC.

    DuckDB turns TIMESTAMPTZ into TIMESTAMP (and reads offset-less text as
    TIMESTAMPTZ) in the session's time zone, which defaults to the machine's:
    the same log would give other hours on a laptop in another zone. Spark
    sessions get the same setting in `spark_session`. A backend passed in
    ready-made keeps its own setting.
    """
    if engine_name(backend) == "duckdb":
        backend.raw_sql("SET TimeZone = 'UTC'")
    return backend


def _bounded(backend: BaseBackend) -> BaseBackend:
    """Cap the memory of a DuckDB session we opened, with spilling to a private folder.

    DuckDB's default limit is 80% of the machine; the audit of a large log would take
    it all. The folder goes when the backend does.
    """
    if engine_name(backend) != "duckdb":
        return backend
    limit = os.environ.get(MEMORY_LIMIT_ENV, DEFAULT_MEMORY_LIMIT).strip()
    try:
        backend.raw_sql(f"SET memory_limit = '{limit}'")
    except Exception as exc:
        raise LogError(
            f"{MEMORY_LIMIT_ENV}={limit!r} is not a memory size; give e.g. 1GB or 512MB "
            f"({_first_line(exc)})"
        ) from None
    spill = tempfile.mkdtemp(prefix="tailbudget-duckdb-")
    backend.raw_sql(f"SET temp_directory = '{_quote(spill)}'")
    weakref.finalize(backend, shutil.rmtree, spill, True)
    return backend


_UNITS = {"": 1, "b": 1, "bytes": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS.update({"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40})


@contextmanager
def capped_memory(backend: BaseBackend, cap: str) -> Iterator[None]:
    """DuckDB's memory limit lowered to `cap` for a block, then restored.

    Left alone when the user chose a limit (TAILBUDGET_MEMORY_LIMIT), on other engines,
    and when the session's limit is already lower.
    """
    if engine_name(backend) != "duckdb" or os.environ.get(MEMORY_LIMIT_ENV, "").strip():
        yield
        return
    before = str(backend.raw_sql("SELECT current_setting('memory_limit')").fetchone()[0])
    current, wanted = _bytes(before), _bytes(cap)
    if current is None or wanted is None or current <= wanted:
        yield
        return
    try:
        backend.raw_sql(f"SET memory_limit = '{_quote(cap)}'")
    except Exception:  # what the session holds cannot be evicted: keep its limit
        yield
        return
    try:
        yield
    finally:
        backend.raw_sql(f"SET memory_limit = '{_quote(before)}'")


def _bytes(size: str) -> float | None:
    """'953.6 MiB', '1GB' -> bytes; None when it does not read as a size."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", size)
    if match is None or match.group(2).lower() not in _UNITS:
        return None
    try:
        return float(match.group(1)) * _UNITS[match.group(2).lower()]
    except ValueError:
        return None


def _quote(text: str) -> str:
    return text.replace("'", "''")


def arrow_table(backend: BaseBackend, table: pa.Table) -> ir.Table:
    """An Ibis table on `backend` holding a pyarrow Table (nulls kept as nulls).

    Spark receives the Arrow data directly: going through pandas, as ibis'
    memtable does there, would turn float nulls into NaN.
    """

    if engine_name(backend) == "pyspark":
        try:
            frame = backend._session.createDataFrame(table)
        except (TypeError, ValueError, AttributeError):
            return ibis.memtable(table)
        name = f"_tailbudget_arrow_{uuid.uuid4().hex[:12]}"
        frame.createOrReplaceTempView(name)
        return backend.table(name)
    return ibis.memtable(table)


@contextmanager
def one_thread(backend: BaseBackend) -> Iterator[None]:
    """Run what the block runs on one DuckDB thread (other engines: unchanged).

    DuckDB merges the partial states of an approximate quantile in whatever order
    its threads finish, so the same query can answer slightly differently twice;
    on one thread it answers the same every time. For passes over small tables
    (a row sample), where the second thread saves little."""
    if engine_name(backend) != "duckdb":
        yield
        return
    before = int(backend.raw_sql("SELECT current_setting('threads')").fetchone()[0])
    backend.raw_sql("SET threads = 1")
    try:
        yield
    finally:
        backend.raw_sql(f"SET threads = {before}")


def arrow_result(expr: ir.Expr, backend: BaseBackend | None = None) -> pa.Table:
    """`expr` run on `backend` (else its own), as Ibis' `to_pyarrow` returns it.

    On DuckDB, without Ibis' DuckDB result converter: that module imports pandas, half a
    second of start-up spent on a library no Arrow result needs.
    """
    backend = expr._find_backend() if backend is None else backend
    relation = getattr(backend, "_to_duckdb_relation", None)
    if engine_name(backend) != "duckdb" or relation is None:
        return backend.to_pyarrow(expr)
    return expr.__pyarrow_result__(relation(expr).to_arrow_table(), data_mapper=_arrow_mapper())


@functools.cache
def _arrow_mapper() -> type[PyArrowData]:

    class _NullAware(PyArrowData):  # type: ignore[misc]
        """Ibis' own DuckDB mapper, where a column of type null comes back as nulls."""

        @classmethod
        def convert_column(cls, column: pa.Array, dtype: dt.DataType) -> pa.Array:
            if dtype.is_null():
                # A start-up guard: pyarrow loads on first use, not with this module.
                import pyarrow as pa

                return pa.nulls(len(column))
            return super().convert_column(column, dtype)

    return _NullAware


_COUNT_IF = frozenset({"duckdb", "pyspark"})


def count_true(backend: BaseBackend, pred: ir.BooleanValue) -> ir.IntegerScalar:
    """Aggregate: how many rows the boolean `pred` is true for (null counts as false).

    DuckDB and Spark have `count_if`; on DuckDB it takes about 60% of the time of the
    portable sum of 0/1 casts, which other engines get.
    """
    if engine_name(backend) in _COUNT_IF:
        return _count_if()(pred)
    return pred.cast("int64").sum()


@functools.cache
def _count_if() -> Any:  # Ibis' UDF (untyped)

    def count_if(arg: bool) -> int:  # type: ignore[empty-body]
        """The engine's count_if."""

    return ibis.udf.agg.builtin(count_if, name="count_if")


def engine_name(backend: object) -> str:
    """The backend's short name (duckdb, pyspark, ...)."""
    return str(getattr(backend, "name", type(backend).__name__))


def spark_session() -> SparkSession:
    """The process-wide local[2] SparkSession (created on first use, then reused)."""
    with _SPARK_LOCK:
        if "session" not in _SPARK:
            try:
                # A start-up guard: pyspark loads on first use, not with this module.
                from pyspark.sql import SparkSession
            except ImportError as exc:
                raise LogError(
                    "engine 'pyspark' needs PySpark; "
                    "install it with pip install 'tailbudget[spark]'"
                ) from exc
            # Servers here bind to loopback only; Spark's driver is one.
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            session = (
                SparkSession.builder.master("local[2]")
                .config("spark.driver.host", "127.0.0.1")
                .config("spark.driver.bindAddress", "127.0.0.1")
                .appName("tailbudget")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .config("spark.sql.session.timeZone", "UTC")
                .config("spark.driver.memory", "1g")
                .getOrCreate()
            )
            session.sparkContext.setLogLevel("ERROR")
            _SPARK["session"] = session
        found: SparkSession = _SPARK["session"]
        return found


def _pyspark_backend() -> BaseBackend:
    session = spark_session()
    with _SPARK_LOCK:
        if "backend" not in _SPARK:
            try:
                _SPARK["backend"] = ibis.pyspark.connect(session)
            except ImportError as exc:  # ibis' pyspark extra missing
                raise LogError(
                    "engine 'pyspark' needs ibis' PySpark backend; "
                    "install it with pip install 'tailbudget[spark]'"
                ) from exc
        return _SPARK["backend"]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
