"""`read_log`: detect a log's format, read it on the engine, canonicalise it."""

from __future__ import annotations

import glob as globlib
import os
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from tailbudget.errors import LogError, TailbudgetError
from tailbudget.logs.bench_sniff import refuse_aggregate, sniff_bench
from tailbudget.logs.canonical import canonicalize
from tailbudget.logs.engine import Engine, connect, engine_name
from tailbudget.logs.frames import Frame, Spooled, in_memory, label_of
from tailbudget.logs.options import ReadOptions
from tailbudget.logs.table import LogTable

__all__ = ["detect_format", "read_log"]

_EXTENSIONS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".parq": "parquet",
    ".csv": "csv",
    ".tsv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
}
_SNIFF_BYTES = 256 * 1024


def read_log(
    source: str | os.PathLike[str] | Frame | Spooled | LogTable | None,
    options: ReadOptions = ReadOptions(),
    *,
    engine: Engine = None,
) -> LogTable:
    """Read a latency log into the canonical `LogTable` on an Ibis backend.

    `source` is a file, folder or glob (Parquet, CSV, JSONL, span tables, OTLP
    or Jaeger JSON traces, vLLM, SGLang, AIPerf, guidellm or LLMPerf results),
    a table name on the engine, None with `options.query` (SQL on the engine), or data
    in memory (a pandas or polars DataFrame, an Arrow or Ibis table: logs/frames.py).
    `engine` None is an in-memory DuckDB, "pyspark" a local Spark session, else an Ibis URL.
    Raises LogError (one line, naming the file or column and the fix).
    """
    if isinstance(source, LogTable):
        return source  # already read (`tailbudget.read`): its own columns and options hold
    backend = connect(engine)
    label = "query" if source is None else label_of(source)
    try:
        if source is None or isinstance(source, str | os.PathLike):  # not is_in_memory
            return _read(source, options, backend, on_engine=engine is not None)
        raw, backend = in_memory(source, backend)
        return _tabular(raw, options, backend, label, "frame", cache=False)
    except TailbudgetError:
        raise
    except Exception as exc:  # engine and parser errors become one-line LogErrors
        fix = ""
        if isinstance(source, str | os.PathLike):  # a parser's words alone name no fix
            fix = "; check that the file is what its name says (CSV, Parquet, JSON or JSONL)"
        raise LogError(
            f"cannot read {label} on {engine_name(backend)}: {_first_line(exc).rstrip('.')}{fix}"
        ) from exc


def detect_format(path: str) -> str:
    """The format of a file from its extension, else from its first bytes."""
    files = _expand(path)
    return _file_format(files[0])


def _read(
    source: str | os.PathLike[str] | None, options: ReadOptions, backend: Any, *, on_engine: bool
) -> LogTable:
    if source is None:
        if not options.query:
            raise LogError(
                "no log given: pass a log file, or a query (SQL) on an engine (an Ibis URL)",
                param="query",
            )
        raw = _sql_table(backend, options.query)
        return _tabular(raw, options, backend, "query", "engine", cache=False)
    text = str(source)
    if options.query:
        raise LogError(f"query: give either a log ({text}) or a query, not both", param="query")
    if on_engine and not os.path.exists(text) and not any(ch in text for ch in "*?[/\\"):
        # A bare name on an engine the user named is a table there.
        raw = backend.table(text)
        return _tabular(raw, options, backend, text, "engine", cache=False)

    files = _expand(text)
    fmt = options.format or _file_format(files[0])
    if fmt == "aggregate":
        refuse_aggregate(files[0])
    if fmt in ("vllm", "llmperf", "aiperf", "guidellm", "sglang"):
        # A start-up guard: numpy, pyarrow load on first use, not with this module.
        from tailbudget.logs.llm_bench import read_llm_bench

        return read_llm_bench(files, fmt, options, backend, text)
    if fmt in ("otlp", "jaeger"):
        # A start-up guard: ijson, numpy, orjson load on first use, not with this module.
        from tailbudget.logs.traces import read_trace_json

        return read_trace_json(files, fmt, options, backend, text)
    if fmt == "json":
        fmt = "jsonl"
    if fmt not in ("parquet", "csv", "jsonl", "spans"):
        raise LogError(f"{text}: format {fmt!r} is not a file format; use parquet, csv or jsonl")
    kind = fmt
    if fmt == "spans":
        kind = _file_format(files[0])
        kind = "jsonl" if kind == "json" else kind
    raw = _read_table(backend, files, text, kind)
    return _tabular(raw, options, backend, text, fmt, cache=kind != "parquet")


def _sql_table(backend: Any, query: str) -> Any:
    """An Ibis table for a SQL query on the engine."""
    if engine_name(backend) == "duckdb":
        # ibis 12's DuckDB `.sql()` calls a method duckdb 2 removed; a view is equivalent.
        name = f"_tailbudget_query_{uuid.uuid4().hex[:12]}"
        backend.raw_sql(f'CREATE TEMP VIEW "{name}" AS {query}')
        return backend.table(name)
    return backend.sql(query)


def _tabular(
    raw: Any, options: ReadOptions, backend: Any, label: str, fmt: str, *, cache: bool
) -> LogTable:
    # A start-up guard: numpy, pyarrow load on first use, not with this module.
    from tailbudget.logs.spans import read_span_table, span_columns

    found = span_columns(list(raw.columns))
    if fmt == "spans" or (found is not None and options.format is None):
        if found is None:
            raise LogError(
                f"{label}: not a span table (needs trace id, span id and parent id columns); "
                f"columns are: {', '.join(raw.columns)}"
            )
        return read_span_table(raw, found, options, backend, label, fmt="spans")
    return canonicalize(raw, options, backend=backend, source=label, fmt=fmt, cache=cache)


def _read_table(backend: Any, files: list[str], label: str, kind: str) -> Any:
    many = len(files) > 1
    is_duck = engine_name(backend) == "duckdb"
    target: Any = files if (many and is_duck) else (files[0] if not many else label)
    if kind == "parquet":
        return backend.read_parquet(target)
    if kind == "csv":
        options: dict[str, Any] = {}
        if files[0].endswith(".tsv"):
            options = {"delim": "\t"} if is_duck else {"sep": "\t"}
        if is_duck:
            # Sniff types from every row, not a sample: one bad cell deep in the file
            # then makes its column text (the row is counted as non-numeric) instead
            # of failing the whole read at that line.
            options["sample_size"] = -1
        return backend.read_csv(target, **options)
    if is_duck:
        return backend.read_json(target)
    return backend.read_json(target, multiLine=_is_json_array(files[0]))


def _expand(path: str) -> list[str]:
    """The files a path, folder or glob names (sorted), or LogError."""
    if any(ch in path for ch in "*?["):
        files = sorted(f for f in globlib.glob(path, recursive=True) if os.path.isfile(f))
        if not files:
            raise LogError(f"no file matches {path!r}; check the glob (quote it in the shell)")
        return files
    p = Path(path)
    if p.is_dir():
        found = [f for f in p.rglob("*") if f.is_file() and _ext(f.name) in _EXTENSIONS]
        if not found:
            raise LogError(f"{path}: folder holds no .parquet, .csv, .jsonl or .json file")
        top = Counter(_ext(f.name) for f in found).most_common(1)[0][0]
        return sorted(str(f) for f in found if _ext(f.name) == top)
    if not p.exists():
        raise LogError(f"{path}: no such file")
    if not p.is_file():
        raise LogError(f"{path}: not a regular file")
    if p.stat().st_size == 0:
        raise LogError(f"{path}: the file is empty")
    try:
        with p.open("rb"):
            pass
    except OSError as exc:
        raise LogError(f"{path}: cannot open ({exc.strerror})") from exc
    return [str(p)]


def _file_format(path: str) -> str:
    ext = _ext(path)
    head = _head(path)
    if ext == ".parquet" or ext in (".pq", ".parq") or head.startswith(b"PAR1"):
        return "parquet"
    if ext in (".json", ".jsonl", ".ndjson") or head.lstrip()[:1] in (b"{", b"["):
        sniffed = _sniff_json(head, path)
        if sniffed:
            return sniffed
        if ext == ".json" and head.lstrip()[:1] == b"{" and not _is_ndjson(head):
            return "json"
        return "jsonl"
    if ext in (".csv", ".tsv"):
        return "csv"
    first = head.split(b"\n", 1)[0]
    if b"," in first or b"\t" in first:
        return "csv"
    raise LogError(
        f"{path}: unknown log format (extension {ext or 'none'!r}); "
        "use .parquet, .csv, .jsonl or .json, or pass the format explicitly"
    )


def _sniff_json(head: bytes, path: str) -> str | None:

    if b'"resourceSpans"' in head or b'"resource_spans"' in head:
        return "otlp"
    bench = sniff_bench(head, path)
    if bench is not None:
        return bench
    if b'"traceID"' in head and (b'"processes"' in head or b'"operationName"' in head):
        return "jaeger"
    return None


def _is_ndjson(head: bytes) -> bool:
    lines = [ln for ln in head.splitlines()[:3] if ln.strip()]
    return len(lines) > 1 and all(ln.strip().startswith(b"{") for ln in lines)


def _is_json_array(path: str) -> bool:
    return _head(path).lstrip()[:1] == b"["


def _head(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(_SNIFF_BYTES)
    except OSError as exc:
        raise LogError(f"{path}: cannot read ({exc.strerror})") from exc


def _ext(name: str) -> str:
    lower = name.lower()
    if lower.endswith(".gz"):
        lower = lower[:-3]
    return os.path.splitext(lower)[1]


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return lines[0][:300] if lines else type(exc).__name__
