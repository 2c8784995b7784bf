"""The replay's input: a log as time-ordered numpy arrays (ts, total_ms, error).

Uses `tailbudget.logs.read_log` when the log readers are present, so replay
reads every format audit reads; until then (or for the plain formats) a small
DuckDB reader handles Parquet, CSV and JSONL with the same column options.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tailbudget.errors import LogError

__all__ = ["ReplayLog", "load_replay_log", "p99_of_log"]

_TS_NAMES = ("ts", "timestamp", "time", "t", "start_time", "starttime", "datetime", "t_s")
_TOTAL_NAMES = (
    "total_ms",
    "latency_ms",
    "duration_ms",
    "elapsed_ms",
    "response_time_ms",
    "total",
    "latency",
    "duration",
    "end_to_end_latency_ms",
)
_ERROR_NAMES = ("error", "is_error", "failed", "err")
_STATUS_NAMES = ("status_code", "status", "http_status")
_UNIT = {"ms": 1.0, "s": 1000.0, "us": 0.001}


@dataclass(frozen=True)
class ReplayLog:
    """A log reduced to what the controller sees, sorted by time."""

    ts_s: npt.NDArray[np.float64]
    """Seconds since the Unix epoch (or since an arbitrary zero for relative logs)."""
    total_ms: npt.NDArray[np.float64]
    error: npt.NDArray[np.bool_]
    source: str
    format: str
    rows_total: int
    rejected_reasons: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    absolute_time: bool = True
    """False when timestamps are offsets (seconds from an arbitrary zero)."""

    @property
    def rows(self) -> dict[str, Any]:
        """Row counts in the audit contract's shape."""
        rejected = sum(self.rejected_reasons.values())
        return {
            "total": self.rows_total,
            "used": int(self.ts_s.size),
            "rejected": rejected,
            "rejected_reasons": dict(self.rejected_reasons),
        }


def _format_of(path: Path, given: str | None) -> str:
    if given:
        return given
    name = path.name.lower()
    for suffix, fmt in (
        (".parquet", "parquet"),
        (".pq", "parquet"),
        (".csv", "csv"),
        (".tsv", "csv"),
        (".jsonl", "jsonl"),
        (".ndjson", "jsonl"),
        (".json", "jsonl"),
    ):
        if name.endswith(suffix) or name.endswith(suffix + ".gz"):
            return fmt
    raise LogError(f"{path}: cannot tell the format from the name; use .parquet, .csv or .jsonl")


def _pick(columns: list[str], given: str | None, names: tuple[str, ...], what: str) -> str | None:
    lower = {c.lower(): c for c in columns}
    if given is not None:
        if given in columns:
            return given
        if given.lower() in lower:
            return lower[given.lower()]
        raise LogError(f"no column {given!r} for the {what}; columns are: {', '.join(columns)}")
    return next((lower[n] for n in names if n in lower), None)


def _epoch_seconds(values: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64], str]:
    """Numeric timestamps -> seconds, guessing the unit from the magnitude."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return values, "s"
    mag = float(np.median(np.abs(finite)))
    for unit, scale, lo in (("ns", 1e-9, 1e17), ("us", 1e-6, 1e14), ("ms", 1e-3, 1e11)):
        if mag >= lo:
            return values * scale, unit
    return values, "s"


def _duckdb_read(
    path: Path,
    fmt: str,
    timestamp: str | None,
    total: str | None,
    error: str | None,
    unit: str | None,
) -> ReplayLog:
    import duckdb

    con = duckdb.connect()
    reader = {
        "parquet": "read_parquet(?)",
        "csv": "read_csv(?, auto_detect=true)",
        "jsonl": "read_json_auto(?, format='newline_delimited')",
    }[fmt]
    try:
        rel = con.sql(f"SELECT * FROM {reader}", params=[str(path)])
        columns = list(rel.columns)
        types = {c: str(t).upper() for c, t in zip(rel.columns, rel.types, strict=True)}
    except duckdb.Error as exc:
        raise LogError(f"{path}: cannot read as {fmt} ({str(exc).splitlines()[0]})") from None
    ts_col = _pick(columns, timestamp, _TS_NAMES, "timestamp")
    if ts_col is None:
        raise LogError(
            f"{path}: no timestamp column (looked for {', '.join(_TS_NAMES[:4])}); replay needs "
            "one: pass --timestamp COL"
        )
    total_col = _pick(columns, total, _TOTAL_NAMES, "total latency")
    if total_col is None:
        raise LogError(
            f"{path}: no total latency column (looked for {', '.join(_TOTAL_NAMES[:4])}); "
            "pass --total COL"
        )
    err_col = _pick(columns, error, _ERROR_NAMES, "error flag")
    status_col = None if err_col else _pick(columns, None, _STATUS_NAMES, "status")
    notes: list[str] = []
    q = _ident
    ts_type = types[ts_col]
    if "TIMESTAMP" in ts_type or ts_type == "DATE":
        ts_expr = f"epoch_us({q(ts_col)}::TIMESTAMPTZ)::DOUBLE / 1e6"
        ts_kind = "time"
    elif ts_type in ("VARCHAR", "JSON"):
        ts_expr = (
            f"COALESCE(epoch_us(TRY_CAST({q(ts_col)} AS TIMESTAMPTZ))::DOUBLE / 1e6, "
            f"TRY_CAST({q(ts_col)} AS DOUBLE))"
        )
        ts_kind = "text"
    else:
        ts_expr = f"TRY_CAST({q(ts_col)} AS DOUBLE)"
        ts_kind = "number"
    if err_col is not None:
        e = q(err_col)
        err_expr = (
            f"COALESCE(TRY_CAST({e} AS BOOLEAN), TRY_CAST({e} AS DOUBLE) <> 0, "
            f"lower(TRY_CAST({e} AS VARCHAR)) NOT IN ('', 'ok', 'none', 'null', 'false'), false)"
        )
    elif status_col is not None:
        err_expr = f"COALESCE(TRY_CAST({q(status_col)} AS DOUBLE) >= 500, false)"
        notes.append(f"errors: {status_col} >= 500")
    else:
        err_expr = "false"
        notes.append("no error column: error rate is 0 and the error rollback rule never fires")
    sql = (
        f"SELECT {ts_expr} AS ts, TRY_CAST({q(total_col)} AS DOUBLE) AS total, "
        f"{err_expr} AS error FROM {reader}"
    )
    try:
        arrow = con.execute(sql, [str(path)]).fetchnumpy()
    except duckdb.Error as exc:
        raise LogError(f"{path}: cannot read as {fmt} ({str(exc).splitlines()[0]})") from None
    ts = np.asarray(arrow["ts"], dtype=np.float64)
    total_v = np.asarray(arrow["total"], dtype=np.float64)
    err_v = np.asarray(arrow["error"], dtype=bool)
    absolute = True
    if ts_kind in ("number", "text"):
        ts, ts_unit = _epoch_seconds(ts)
        if ts_unit != "s":
            notes.append(f"timestamp {ts_col}: numbers read as Unix epoch {ts_unit}")
        finite = ts[np.isfinite(ts)]
        if finite.size and float(np.median(finite)) < 1e8:
            absolute = False
            notes.append(f"timestamp {ts_col}: small numbers read as seconds from the log's start")
    scale, unit_note = _unit_scale(total_col, unit)
    if unit_note:
        notes.append(unit_note)
    return _clean(ts, total_v * scale, err_v, str(path), fmt, notes, absolute)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _unit_scale(column: str, unit: str | None) -> tuple[float, str]:
    if unit is not None:
        if unit not in _UNIT:
            raise LogError(f"--unit must be ms, s or us, got {unit!r}")
        return _UNIT[unit], ""
    if re.search(r"(_s|_sec|_seconds)$", column.lower()):
        return 1000.0, f"total {column}: seconds, from the name"
    if re.search(r"(_us|_micros)$", column.lower()):
        return 0.001, f"total {column}: microseconds, from the name"
    return 1.0, ""


def _clean(
    ts: npt.NDArray[np.float64],
    total: npt.NDArray[np.float64],
    err: npt.NDArray[np.bool_],
    source: str,
    fmt: str,
    notes: list[str],
    absolute: bool,
) -> ReplayLog:
    reasons: dict[str, int] = {}
    bad_ts = ~np.isfinite(ts)
    bad_total = ~np.isfinite(total) & ~bad_ts
    negative = np.isfinite(total) & (total < 0) & ~bad_ts
    for name, mask in (
        ("missing or unreadable timestamp", bad_ts),
        ("missing or non-numeric total", bad_total),
        ("negative total", negative),
    ):
        if mask.any():
            reasons[name] = int(mask.sum())
    keep = ~(bad_ts | bad_total | negative)
    if not keep.any():
        why = ", ".join(f"{v} {k}" for k, v in reasons.items()) or "empty"
        raise LogError(f"{source}: no usable rows ({why})")
    ts, total, err = ts[keep], total[keep], err[keep]
    order = np.argsort(ts, kind="stable")
    return ReplayLog(
        ts_s=ts[order],
        total_ms=total[order],
        error=err[order],
        source=source,
        format=fmt,
        rows_total=int(keep.size),
        rejected_reasons=reasons,
        notes=tuple(notes),
        absolute_time=absolute,
    )


class _NoTimestamp(LogError):
    """The log was read but has no time: nothing to retry."""


def _via_read_log(
    source: str, timestamp: str | None, total: str | None, error: str | None, unit: str | None
) -> ReplayLog | None:
    try:
        from tailbudget.logs import ReadOptions, read_log
    except ImportError:
        return None
    opts: dict[str, Any] = {}
    for key, value in (
        ("timestamp", timestamp),
        ("total", total),
        ("error", error),
        ("unit", unit),
    ):
        if value is not None:
            opts[key] = value
    table = read_log(source, ReadOptions(**opts))
    if not table.has_timestamp:
        raise _NoTimestamp(
            f"{source}: the log has no timestamp; replay needs one: pass --timestamp COL"
        )
    import pyarrow as pa

    arrow = table.table.select("ts", "total_ms", "error").to_pyarrow()
    raw_ts = arrow.column("ts")
    micros = raw_ts.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).fill_null(0)
    ts = np.asarray(micros.to_numpy(zero_copy_only=False), dtype=np.float64) / 1e6
    ts[np.asarray(raw_ts.is_null().to_numpy(zero_copy_only=False), dtype=bool)] = np.nan
    tot = np.asarray(arrow.column("total_ms").to_numpy(zero_copy_only=False), dtype=np.float64)
    err = np.asarray(
        arrow.column("error").fill_null(False).to_numpy(zero_copy_only=False), dtype=bool
    )
    finite = ts[np.isfinite(ts)]
    # small numbers are seconds from the log's start, not dates in 1970
    absolute = not (finite.size and float(np.median(finite)) < 1e8)
    notes = list(table.notes)
    if not absolute:
        notes.append("timestamps are offsets (seconds from the log's start), not dates")
    out = _clean(ts, tot, err, source, table.format, notes, absolute)
    reasons = dict(table.rows.rejected_reasons)
    for k, v in out.rejected_reasons.items():
        reasons[k] = reasons.get(k, 0) + v
    return ReplayLog(
        ts_s=out.ts_s,
        total_ms=out.total_ms,
        error=out.error,
        source=source,
        format=table.format,
        rows_total=table.rows.total,
        rejected_reasons=reasons,
        notes=out.notes,
        absolute_time=out.absolute_time,
    )


def load_replay_log(
    source: str | Path,
    *,
    timestamp: str | None = None,
    total: str | None = None,
    error: str | None = None,
    unit: str | None = None,
    fmt: str | None = None,
) -> ReplayLog:
    """Read `source` into time-ordered arrays; LogError with a one-line reason on failure."""
    path = Path(source)
    try:
        via = _via_read_log(str(source), timestamp, total, error, unit)
    except _NoTimestamp:
        raise
    except LogError as exc:
        # read_log knows more formats; for the plain tabular ones a refusal there
        # (e.g. a column type it does not map yet) is retried with the direct reader
        if not path.exists() or _plain_format(path) is None:
            raise
        out = _duckdb_read(path, _format_of(path, fmt), timestamp, total, error, unit)
        note = f"read with the direct DuckDB reader (read_log: {str(exc).splitlines()[0]})"
        return replace(out, notes=(*out.notes, note))
    if via is not None:
        return via
    if not path.exists():
        raise LogError(f"{path}: log file not found")
    return _duckdb_read(path, _format_of(path, fmt), timestamp, total, error, unit)


def _plain_format(path: Path) -> str | None:
    try:
        return _format_of(path, None)
    except LogError:
        return None


def p99_of_log(log: ReplayLog) -> float:
    """The p99 (ms) of a whole log, e.g. a baseline run."""
    return float(np.quantile(log.total_ms, 0.99))
