"""The replay's input: a log as time-ordered numpy arrays (ts, total_ms, error).

Reads through `tailbudget.logs.read_log`, so replay reads every format and
column mapping the audit reads, and counts bad rows the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tailbudget.budget.metric import LLM_SERIES
from tailbudget.control.columns import StageColumn
from tailbudget.control.llm_log import RawSeries, order_series, read_series
from tailbudget.errors import LogError
from tailbudget.logs.options import SEND_TIME_FORMATS, ReadOptions
from tailbudget.logs.units import check_log_unit

if TYPE_CHECKING:
    from tailbudget.logs.table import LogTable

__all__ = ["ReplayLog", "load_replay_log", "p99_of_log"]


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
    series: dict[str, StageColumn] = field(default_factory=dict)
    """LLM series (ttft, tpot, itl) indexing the sorted rows, when the log has them."""
    stages: dict[str, StageColumn] = field(default_factory=dict)
    """Pipeline stage times (the LLM series aside) indexing the sorted rows."""
    labels: npt.NDArray[np.object_] | None = None
    """Each sorted row's class (the `classes.by` column as text), when asked for."""
    at_completion: bool = False
    """True when `ts_s` is each request's completion (the log's send time + its e2e): the
    log's timestamp was the send time, and a live service sees a request when it ends."""

    def subset(self, mask: npt.NDArray[np.bool_]) -> ReplayLog:
        """The rows where `mask` holds (one class's requests), series re-indexed."""
        return replace(
            self,
            ts_s=self.ts_s[mask],
            total_ms=self.total_ms[mask],
            error=self.error[mask],
            series=subset_series(self.series, mask),
            stages=subset_series(self.stages, mask),
            labels=None if self.labels is None else self.labels[mask],
        )

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


def subset_series(
    series: dict[str, StageColumn], mask: npt.NDArray[np.bool_]
) -> dict[str, StageColumn]:
    """Columns indexing the rows where `mask` holds, re-indexed to those rows."""
    position = np.cumsum(mask) - 1
    out: dict[str, StageColumn] = {}
    for name, col in series.items():
        kept = mask[col.index]
        if kept.any():
            out[name] = StageColumn(position[col.index[kept]].astype(np.int64), col.ms[kept])
    return out


def _clean(
    ts: npt.NDArray[np.float64],
    total: npt.NDArray[np.float64],
    err: npt.NDArray[np.bool_],
    source: str,
    fmt: str,
    notes: list[str],
    absolute: bool,
    series: RawSeries | None = None,
    stages: RawSeries | None = None,
    labels: npt.NDArray[np.object_] | None = None,
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
    columns = order_series(series, keep, order) if series else {}
    stage_columns = order_series(stages, keep, order) if stages else {}
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
        series=columns,
        stages=stage_columns,
        labels=None if labels is None else labels[keep][order],
    )


def _via_read_log(
    source: Any,
    timestamp: str | None,
    total: str | None,
    error: str | None,
    unit: str | None,
    class_by: str | None = None,
) -> ReplayLog:
    # A start-up guard: the readers load Ibis and DuckDB, which `serve` never needs.
    from tailbudget.logs.read import read_log

    opts: dict[str, Any] = {}
    for key, value in (
        ("timestamp", timestamp),
        ("total", total),
        ("error", error),
        ("unit", unit),
    ):
        if value is not None:
            opts[key] = value
    if class_by is not None:
        opts["cohorts"] = (class_by,)
    table = check_log_unit(read_log(source, ReadOptions(**opts)))
    return replay_log_of(table, class_by=table.cohorts[-1] if class_by is not None else None)


def replay_log_of(table: LogTable, *, class_by: str | None = None) -> ReplayLog:
    """A canonical log reduced to what the controller sees (with each row's class from
    column `class_by`, when given); LogError without timestamps."""
    # A start-up guard: pyarrow loads on first use, not with this module.
    import pyarrow as pa

    source = table.source
    if not table.has_timestamp:
        raise LogError(
            f"{source}: the log has no timestamp, and replay needs one: name its column as "
            "timestamp (or log: {timestamp: COLUMN} in the budget); a log without start "
            "times can be run at a stated load by simulate, with arrivals poisson:RATE",
            param="timestamp",
        )
    wanted = [
        c for c in ("ttft_ms", "tpot_ms", "output_tokens", "itl_ms") if c in table.table.columns
    ]
    # Stage times too (rules on `<stage>.p99` read them); ttft is a series, not a stage.
    stage_cols = {
        s: table.stage_column(s)
        for s in table.stages
        if s not in LLM_SERIES and table.stage_column(s) not in wanted
    }
    extra = [class_by] if class_by is not None else []
    arrow = table.table.select("ts", "total_ms", "error", *wanted, *stage_cols.values(), *extra)
    arrow = arrow.to_pyarrow()
    raw_ts = arrow.column("ts")
    micros = raw_ts.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).fill_null(0)
    ts = np.asarray(micros.to_numpy(zero_copy_only=False), dtype=np.float64) / 1e6
    ts[np.asarray(raw_ts.is_null().to_numpy(zero_copy_only=False), dtype=bool)] = np.nan
    tot = np.asarray(arrow.column("total_ms").to_numpy(zero_copy_only=False), dtype=np.float64)
    err = np.asarray(
        arrow.column("error").fill_null(False).to_numpy(zero_copy_only=False), dtype=bool
    )
    at_completion = table.format in SEND_TIME_FORMATS
    if at_completion:
        # A load generator's timestamp is the send time; a live service observes a request
        # when it completes, so replay feeds (and orders) it at send time + e2e.
        done = np.isfinite(tot) & (tot >= 0)
        ts = np.where(done, ts + np.where(done, tot, 0.0) / 1000.0, ts)
    finite = ts[np.isfinite(ts)]
    # small numbers are seconds from the log's start, not dates in 1970
    absolute = not (finite.size and float(np.median(finite)) < 1e8)
    notes = [n for n in table.notes if "failed without a latency" not in n]
    failed = int(getattr(table.rows, "failed", 0))
    if failed:
        # the audit counts them as errors; replay has no latency (and no window) for them
        why = ", ".join(f"{k}: {v}" for k, v in table.rows.failed_reasons.items())
        notes.append(
            f"{failed} requests failed without a latency ({why}): replay has no time for "
            "them, so its windows and error rate leave them out"
        )
    if not absolute:
        notes.append("timestamps are offsets (seconds from the log's start), not dates")
    stages = {
        s: np.asarray(arrow.column(c).to_numpy(zero_copy_only=False), dtype=np.float64)
        for s, c in stage_cols.items()
    }
    labels = None
    if class_by is not None:
        raw = arrow.column(class_by).cast(pa.string()).fill_null("(null)")
        labels = np.asarray(raw.to_pylist(), dtype=object)
    out = _clean(
        ts, tot, err, source, table.format, notes, absolute, read_series(arrow, tot), stages,
        labels,
    )  # fmt: skip
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
        series=out.series,
        stages=out.stages,
        labels=out.labels,
        at_completion=at_completion,
    )


def load_replay_log(
    source: str | Path | Any,
    *,
    timestamp: str | None = None,
    total: str | None = None,
    error: str | None = None,
    unit: str | None = None,
    class_by: str | None = None,
) -> ReplayLog:
    """Read `source` (a path, or data in memory as `read_log` takes it) with the log
    readers into time-ordered arrays (each row's class from `class_by`); LogError on
    failure."""
    path = str(source) if isinstance(source, Path) else source
    return _via_read_log(path, timestamp, total, error, unit, class_by)


def p99_of_log(log: ReplayLog) -> float:
    """The p99 (ms) of a whole log, e.g. a baseline run."""
    return float(np.quantile(log.total_ms, 0.99))
