"""Turning a raw Ibis table into the canonical `LogTable`, rejecting bad rows.

One code path for every backend: typed Ibis expressions only (try_cast,
isnan, CASE), one aggregate query to count rows by rejection reason, and the
canonical table stays a lazy expression on the engine.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

import ibis
import ibis.expr.datatypes as dt
import ibis.expr.operations as ops

from tailbudget.errors import LogError
from tailbudget.logs.columns import ColumnMap, engine_columns, resolve_columns
from tailbudget.logs.engine import arrow_result, count_true
from tailbudget.logs.options import ReadOptions
from tailbudget.logs.table import LogTable, RowCounts
from tailbudget.logs.units import OWN_UNITS, unit_stated

if TYPE_CHECKING:
    import ibis.expr.types as ir
    from ibis.backends import BaseBackend

__all__ = ["REASONS", "SPAN_REASONS", "canonicalize", "epoch_to_timestamp"]

SPAN_REASONS = ("span_without_trace_id", "span_without_start", "span_without_end")
"""Why a trace read from spans is rejected before its times are summed (logs/spans.py)."""

REASONS = (
    *SPAN_REASONS,
    "missing_total",
    "non_numeric",
    "nan",
    "infinite",
    "negative",
    "bad_timestamp",
)
"""Rejection reasons, in the order they are checked (a row counts under the first)."""

_UNIT_FACTOR = {"ms": 1.0, "s": 1000.0, "us": 0.001, None: 1.0}
_FALSE_WORDS = ("", "0", "false", "f", "no", "n", "none", "null", "ok", "success", "0.0")
_REASON = "_tb_reason"
_MAX_FLOAT = 1.7976931348623157e308


def canonicalize(
    raw: ir.Table,
    options: ReadOptions,
    *,
    backend: BaseBackend,
    source: str,
    fmt: str,
    notes: tuple[str, ...] = (),
    extras: tuple[str, ...] = (),
    shape: tuple[str, ...] = (),
    cache: bool = False,
    reasons: tuple[tuple[str, ir.Value], ...] = (),
) -> LogTable:
    """Resolve the mapping, build the canonical columns, count rejects, keep the rest.

    `extras` are reader-made columns carried unchanged; `shape` are covariates
    the reader adds to the user's; `reasons` are the reader's own rejections
    (name, condition on `raw`), checked first.
    """
    schema = raw.schema()
    numeric = {name for name, typ in schema.items() if typ.is_numeric()}
    opts = options.with_(shape=tuple(dict.fromkeys((*shape, *options.shape))))
    mapping = resolve_columns(list(schema.names), numeric, opts, source, extras=extras)
    factor = _UNIT_FACTOR[options.unit]

    stage_cols, checks, total, missing_total = _latency_columns(raw, mapping, source)
    # A missing stage cell means the stage did not run: 0 ms, not a bad row.
    latencies = [total, *(v.fill_null(0.0) for v in stage_cols.values())]
    any_non_numeric = ibis.or_(*(c for _, c in checks)) if checks else ibis.literal(False)

    ts, bad_ts = _timestamp(raw, mapping.timestamp, source)
    conditions = [
        *((name, cond.fill_null(False)) for name, cond in reasons),
        ("missing_total", missing_total),
        ("non_numeric", any_non_numeric),
        ("nan", ibis.or_(*(_is_nan(v, backend) for v in latencies))),
        ("infinite", ibis.or_(*(is_inf(v) for v in latencies))),
        ("negative", ibis.or_(*(v < 0 for v in latencies))),
        ("bad_timestamp", bad_ts),
    ]
    reason = ibis.cases(*((c, name) for name, c in conditions), else_=ibis.null(dt.string))

    columns, idents = _output_columns(
        raw, mapping, ts, total, own_times(stage_cols, options.calls), factor
    )
    if cache:
        # Materialised once, the reason column costs nothing to filter on later.
        annotated = materialize(backend, raw.select(**columns, **{_REASON: reason}))
        counts = _count(annotated.group_by(annotated[_REASON].name("reason")), backend, source)
        table = annotated.filter(annotated[_REASON].isnull()).drop(_REASON)
    else:
        static = [*(c for _, c in checks), *(c for _, c in reasons), bad_ts]
        clean = _clean_counts(raw, latencies, static, missing_total, mapping)
        counts = clean or _count_sums(raw, conditions, backend, source)
        if counts.rejected:
            # The same rule as `reason is null`, as plain predicates: far cheaper per row
            # than the CASE on a lazily scanned log of tens of millions of rows.
            ok = ibis.and_(
                *(~c.fill_null(False) for _, c in reasons),
                ~missing_total,
                ~any_non_numeric,
                ~bad_ts,
                *(_finite(v, backend) & (v >= 0) for v in latencies),
            )
            table = raw.select(**columns, **{_REASON: ok})
            table = table.filter(table[_REASON]).drop(_REASON)
        else:  # no row to drop: every later pass is spared the per-row checks
            table = raw.select(**columns)
    all_notes = [*notes, *mapping.notes, *_mapping_notes(mapping, options)]
    return LogTable(
        table=table,
        stages=tuple(stage_cols),
        shape=mapping.shape,
        cohorts=mapping.cohorts,
        has_timestamp=mapping.timestamp is not None,
        total_derived=mapping.total is None,
        rows=counts,
        source=source,
        format=fmt,
        notes=tuple(all_notes),
        backend=backend,
        stage_columns=idents,
        unit_stated=fmt in OWN_UNITS
        or unit_stated(options.unit, mapping.total, mapping.stages.values()),
    )


def _latency_columns(
    raw: ir.Table, mapping: ColumnMap, source: str
) -> tuple[dict[str, ir.Value], list[tuple[str, ir.Value]], ir.Value, ir.Value]:
    """Each stage's number, the non-numeric checks, the total and where it is missing."""
    checks: list[tuple[str, ir.Value]] = []
    stage_cols: dict[str, ir.Value] = {}
    for stage, column in mapping.stages.items():
        value, non_numeric = _number(raw[column], column, source)
        stage_cols[stage] = value
        checks.append(("non_numeric", non_numeric))
    if mapping.total is not None:
        total, non_numeric = _number(raw[mapping.total], mapping.total, source)
        checks.append(("non_numeric", non_numeric))
        missing_total = is_missing(total) & ~non_numeric
    else:
        parts = list(stage_cols.values())
        total = sum((p.fill_null(0.0) for p in parts[1:]), parts[0].fill_null(0.0))
        missing_total = ibis.and_(*(is_missing(p) for p in parts))
    return stage_cols, checks, total, missing_total


def own_times(
    stage_cols: dict[str, ir.Value], calls: Mapping[str, tuple[tuple[str, ...], ...]] | None
) -> dict[str, ir.Value]:
    """Each caller's column less the calls made inside it (a budget's `calls:`): its own
    time, never below 0. A call is its column (a nested caller's holds its own calls), a
    parallel group the slowest of its branches."""
    if not calls:
        return stage_cols
    out = dict(stage_cols)
    for caller, terms in calls.items():
        if caller not in stage_cols:
            continue
        inside = [
            ibis.greatest(*cols) if len(cols) > 1 else cols[0]
            for term in terms
            if (cols := [stage_cols[s].fill_null(0.0) for s in term if s in stage_cols])
        ]
        if inside:
            spent = sum(inside[1:], inside[0])
            out[caller] = ibis.greatest(stage_cols[caller].fill_null(0.0) - spent, 0.0)
    return out


def _output_columns(
    raw: ir.Table,
    mapping: ColumnMap,
    ts: ir.Value,
    total: ir.Value,
    stage_cols: dict[str, ir.Value],
    factor: float,
) -> tuple[dict[str, ir.Value], dict[str, str]]:
    """The canonical columns (in ms) and each stage's engine identifier."""
    columns: dict[str, ir.Value] = {
        "request_id": (
            raw[mapping.request_id].cast(dt.string)
            if mapping.request_id
            else ibis.row_number().cast(dt.string)
        ),
        "ts": ts,
        "total_ms": total * factor if factor != 1.0 else total,
    }
    others = ["request_id", "ts", "total_ms", "error", *mapping.shape, *mapping.cohorts]
    idents = engine_columns(list(stage_cols), [*others, *mapping.extras])
    for stage, value in stage_cols.items():
        filled = value.fill_null(0.0)
        columns[idents[stage]] = filled * factor if factor != 1.0 else filled
    columns["error"] = _error(raw, mapping.error)
    for col in mapping.shape:
        columns[col] = _covariate(raw[col])
    for col in mapping.cohorts:
        columns[col] = raw[col].cast(dt.string)
    for col in mapping.extras:
        columns.setdefault(col, raw[col])
    return columns, idents


def materialize(backend: BaseBackend, expr: ir.Table) -> ir.Table:
    """The expression computed once into a temporary table on the engine.

    Text formats and span roll-ups are costly to recompute and the audit runs
    many queries; Parquet stays a lazy scan. Falls back to the lazy expression
    on backends without temporary tables.
    """
    name = f"_tailbudget_{uuid.uuid4().hex[:12]}"
    if getattr(backend, "name", "") == "pyspark":
        return _spark_persist(backend, expr, name)
    try:
        return backend.create_table(name, expr, temp=True)
    except (NotImplementedError, TypeError, AttributeError):
        return expr


def _spark_persist(backend: BaseBackend, expr: ir.Table, name: str) -> ir.Table:
    # ibis' PySpark backend has no temporary tables; a persisted temp view is one.
    try:
        backend._run_pre_execute_hooks(expr)
        frame = backend._session.sql(backend.compile(expr)).persist()
        frame.createOrReplaceTempView(name)
        return backend.table(name)
    except AttributeError:  # private hooks moved in another ibis version: stay lazy
        return expr


def epoch_to_timestamp(value: ir.NumericValue) -> ir.TimestampValue:
    """A numeric epoch (s, ms, us or ns, told apart by magnitude) as a timestamp."""
    ms = ibis.cases(
        (value.abs() > 1e17, value / 1e6),
        (value.abs() > 1e14, value / 1e3),
        (value.abs() > 1e11, value),
        else_=value * 1e3,
    )
    # Interval arithmetic, because Spark converts UNIX time only at second resolution.
    return ibis.timestamp("1970-01-01 00:00:00") + ms.cast(dt.int64).as_interval("ms")


@ibis.udf.scalar.builtin(name="isfinite")  # type: ignore[untyped-decorator]
def _duckdb_isfinite(x: float) -> bool:  # type: ignore[empty-body]
    """DuckDB's isfinite()."""


def is_missing(value: ir.Value) -> ir.BooleanValue:
    """Null and not NaN, on every engine (ibis' PySpark isnull() is also true for NaN)."""
    return value.isnull() & ~value.isnan().fill_null(False)


def is_inf(value: ir.NumericValue) -> ir.BooleanValue:
    """+-infinity (ibis 12 compiles isinf() to a constant FALSE on PySpark)."""
    return (value > _MAX_FLOAT) | (value < -_MAX_FLOAT)


def _finite(value: ir.Value, backend: BaseBackend) -> ir.Value:
    """Neither NaN nor infinite (see _is_nan for why DuckDB gets isfinite())."""
    if getattr(backend, "name", "") == "duckdb":
        return _duckdb_isfinite(value)
    return ~value.isnan() & ~is_inf(value)


def _is_nan(value: ir.Value, backend: BaseBackend | None) -> ir.Value:
    """NaN test that survives DuckDB's Parquet statistics.

    DuckDB 2 folds isnan() to false when a Parquet column's min/max (which
    leave NaN out) say there is none, so NaN rows would slip through; its
    isfinite() is not folded.
    """
    if getattr(backend, "name", "") == "duckdb":
        return value.isnan() | (~_duckdb_isfinite(value) & ~value.isinf())
    return value.isnan()


def _number(column: ir.Value, name: str, source: str) -> tuple[ir.Value, ir.Value]:
    """(float64 value or null, flag set when the cell holds text that is no number)."""
    typ = column.type()
    if typ.is_numeric():
        return column.cast(dt.float64), ibis.literal(False)
    if typ.is_boolean():
        # true/false audited as 1/0 ms passed any objective: a flag is not a latency.
        raise LogError(
            f"{source}: latency column {name!r} holds booleans (true/false), not times; "
            "map the right column with total (a column) or stages (column names or globs)",
            param="total",
        )
    if typ.is_string():
        text = column.strip().nullif("")
        value = text.try_cast(dt.float64)
        return value, text.notnull() & is_missing(value)
    if typ.is_null():
        return ibis.null(dt.float64), ibis.literal(False)
    raise LogError(
        f"{source}: latency column {name!r} has type {typ}, not a number; "
        "map the right column with total (a column) or stages (column names or globs)",
        param="total",
    )


def _timestamp(raw: ir.Table, column: str | None, source: str) -> tuple[ir.Value, ir.Value]:
    if column is None:
        return ibis.null(dt.timestamp), ibis.literal(False)
    value = raw[column]
    typ = value.type()
    if typ.is_timestamp():
        return value.cast(dt.timestamp), ibis.literal(False)
    if typ.is_date() or (typ.is_unknown() and "TIMESTAMP" in str(typ).upper()):
        # Ibis has no type for DuckDB's TIMESTAMP_NS / TIMESTAMPTZ_NS (pyarrow's default
        # for nanosecond Parquet); the engine casts them to a plain timestamp itself.
        return value.cast(dt.timestamp), ibis.literal(False)
    if typ.is_numeric():
        number = value.cast(dt.float64)
        bad = _is_nan(number, None) | is_inf(number)
        ok = number.notnull() & ~bad
        return ibis.ifelse(ok, epoch_to_timestamp(number), ibis.null(dt.timestamp)), bad.fill_null(
            False
        )
    if typ.is_string():
        text = value.strip().nullif("")
        number = text.try_cast(dt.float64)
        parsed = ibis.coalesce(
            # Through a zoned type, so an offset ("+02:00", "Z") moves the time to UTC
            # rather than being dropped; text without one is read as UTC.
            text.try_cast(dt.Timestamp(timezone="UTC")).cast(dt.timestamp),
            ibis.ifelse(
                _is_nan(number, None) | is_inf(number),
                ibis.null(dt.timestamp),
                epoch_to_timestamp(number),
            ),
        )
        return parsed, text.notnull() & parsed.isnull()
    raise LogError(
        f"{source}: timestamp column {column!r} has type {typ}; "
        "give a time or epoch column with timestamp",
        param="timestamp",
    )


def _error(raw: ir.Table, column: str | None) -> ir.Value:
    if column is None:
        return ibis.literal(False)
    value = raw[column]
    typ = value.type()
    if typ.is_boolean():
        return value.fill_null(False)
    if typ.is_numeric():
        return (value.cast(dt.float64) != 0).fill_null(False)
    text = value.cast(dt.string).strip().lower()
    return (text.notnull() & ~text.isin(_FALSE_WORDS)).fill_null(False)


def _covariate(column: ir.Value) -> ir.Value:
    typ = column.type()
    if typ.is_numeric():
        return column
    if typ.is_boolean():
        return column.cast(dt.int64)
    return column.cast(dt.string).strip().try_cast(dt.float64)


def _clean_counts(
    raw: ir.Table,
    latencies: list[ir.Value],
    static: list[ir.Value],
    missing: ir.Value,
    mapping: ColumnMap,
) -> RowCounts | None:
    """The counts of a log with no bad row, proved by sums and minima (one cheap scan;
    Parquet answers counts and minima from its statistics); None when not proved.

    Only for typed columns, where text and timestamp checks are constant false: a sum
    is finite only when no value is NaN or infinite, and a minimum of at least 0 leaves
    no negative value. A sum that overflows is not proof, and the full count runs.
    """
    if not all(_is_false(c) for c in static):
        return None
    aggs: dict[str, ir.Value] = {"n": raw.count()}
    if mapping.total is not None:  # a null total is missing: counted from the statistics
        aggs["n_missing"] = raw.count() - raw[mapping.total].count()
    else:  # a derived total is missing when every stage is
        aggs["n_missing"] = missing.cast(dt.int64).sum()
    for i, v in enumerate(latencies):
        aggs[f"s{i}"], aggs[f"m{i}"] = v.sum(), v.min()
    row = arrow_result(raw.aggregate(**aggs)).to_pylist()[0]
    n = int(row["n"] or 0)
    if n == 0 or int(row["n_missing"] or 0) != 0:
        return None
    for i in range(len(latencies)):
        s, m = row[f"s{i}"], row[f"m{i}"]
        if s is None or m is None or not math.isfinite(float(s)) or float(m) < 0:
            return None
    return RowCounts(n, n, 0)


def _is_false(expr: ir.Value) -> bool:
    """Whether `expr` is the literal FALSE (a check that cannot fire on this column type)."""
    op = expr.op()
    return isinstance(op, ops.Literal) and op.value is False


def _count_sums(
    raw: ir.Table, conditions: list[tuple[str, ir.Value]], backend: BaseBackend, source: str
) -> RowCounts:
    """Rows by rejection reason as sums of first-match flags: one scan, no grouping."""
    aggs: dict[str, ir.Value] = {"n": raw.count()}
    earlier = ibis.literal(False)
    for i, (_, cond) in enumerate(conditions):
        flag = cond.fill_null(False)
        aggs[f"r{i}"] = count_true(backend, flag & ~earlier)
        earlier = earlier | flag
    row = arrow_result(raw.aggregate(**aggs), backend).to_pylist()[0]
    if int(row["n"]) == 0:
        return _row_counts(0, {}, source)  # raises: no rows
    by_reason = {name: int(row[f"r{i}"]) for i, (name, _) in enumerate(conditions)}
    return _row_counts(int(row["n"]), {k: v for k, v in by_reason.items() if v}, source)


def _count(grouped: ir.GroupedTable, backend: BaseBackend, source: str) -> RowCounts:
    """Rows by rejection reason, in one aggregate query (`grouped` is by reason)."""
    result = backend.execute(grouped.aggregate(n=ibis._.count()))
    by_reason: dict[str, int] = {}
    used = 0
    for row in result.to_dict("records"):
        key = row["reason"]
        if key is None or key != key:  # null comes back as None or NaN
            used += int(row["n"])
        else:
            by_reason[str(key)] = int(row["n"])
    return _row_counts(used + sum(by_reason.values()), by_reason, source)


def _row_counts(total: int, by_reason: dict[str, int], source: str) -> RowCounts:
    used = total - sum(by_reason.values())
    if total == 0:
        raise LogError(f"{source}: the log has no rows; check the file (or the query)")
    if used == 0:
        detail = ", ".join(f"{k}: {v}" for k, v in sorted(by_reason.items()))
        raise LogError(
            f"{source}: all {total} rows were rejected ({detail}); "
            "check the column mapping (total, stages) and the unit"
        )
    ordered = {k: by_reason[k] for k in REASONS if k in by_reason}
    return RowCounts(total, used, total - used, ordered)


def _mapping_notes(mapping: ColumnMap, options: ReadOptions) -> list[str]:
    notes: list[str] = []
    if mapping.total is None:
        notes.append(
            f"the log has no total column: total_ms is the sum of {len(mapping.stages)} stages"
        )
    if mapping.request_id is None:
        notes.append("the log has no request id: request_id is the row number")
    if options.unit not in (None, "ms"):
        notes.append(f"latencies converted from {options.unit} to ms")
    return notes
