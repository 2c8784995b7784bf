"""Reading the logs a model is fitted from into numpy arrays.

Every format the audit reads goes through `logs.read_log` (same rows used,
same rows rejected). vLLM benchmark results are also opened as JSON for what
the canonical table drops: the offered request rate, the run's duration and
every inter-token gap.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from tailbudget.logs import ReadOptions, read_log
from tailbudget.logs.bench_rows import is_number
from tailbudget.logs.units import check_log_unit
from tailbudget.sim.bounds import check_span, parse_max_events
from tailbudget.sim.fit import LoggedRequests

__all__ = ["LLMExtras", "read_logged"]


@dataclass(frozen=True)
class LLMExtras:
    """What a vLLM result holds beyond per-request rows."""

    rate_per_s: float
    """The benchmark's request rate; inf = all requests at once."""
    duration_s: float
    itls_ms: tuple[npt.NDArray[np.float64], ...]


def _col(arrow: Any, name: str) -> npt.NDArray[np.float64] | None:
    if name not in arrow.column_names:
        return None
    return np.asarray(arrow.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)


def _vllm_extras(path: str) -> LLMExtras | None:
    if not path.endswith(".json"):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or "ttfts" not in data or "duration" not in data:
        return None
    raw_rate = data.get("request_rate", "inf")
    try:
        rate = float(raw_rate)
    except (TypeError, ValueError):
        rate = float("inf")
    itls = tuple(
        np.asarray([g for g in x if is_number(g)], dtype=np.float64) * 1000.0
        for x in data.get("itls") or []
        if isinstance(x, list)
    )
    return LLMExtras(rate, float(data["duration"]), itls)


def read_logged(
    path: Any, options: ReadOptions, *, max_events: int | None = None, classes: bool = False
) -> tuple[LoggedRequests, LLMExtras | None]:
    """One log (a path, or data in memory) as arrays (sorted by time when it has time),
    plus vLLM extras; a log whose times span more minutes than `max_events`
    (sim/bounds.py) is refused."""
    table = check_log_unit(read_log(path, options))
    cols = ["total_ms", "error", *(table.stage_column(s) for s in table.stages)]
    cols += [c for c in ("input_tokens", "output_tokens") if c in table.shape]
    if table.has_timestamp:
        cols.append("ts")
    kcol = table.cohorts[-1] if classes and table.cohorts else None
    if kcol is not None:  # the class column, asked for as the last cohort (_api/sim.py)
        cols.append(kcol)
    arrow = table.table.select(*cols).to_pyarrow()
    total = _col(arrow, "total_ms")
    assert total is not None
    err = np.asarray(arrow.column("error").fill_null(False).to_numpy(zero_copy_only=False), bool)
    stages = {s: np.nan_to_num(_col(arrow, table.stage_column(s))) for s in table.stages}  # type: ignore[arg-type]
    ts = None
    if table.has_timestamp:
        micros = arrow.column("ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        ts = np.asarray(micros.fill_null(0).to_numpy(zero_copy_only=False), np.float64) / 1e6
    order = np.argsort(ts, kind="stable") if ts is not None else np.arange(total.size)
    if ts is not None and ts.size:
        check_span(
            table.source, float(ts[order[0]]), float(ts[order[-1]]), parse_max_events(max_events)
        )
    in_order = {k: v[order] for k, v in stages.items()}
    logged = LoggedRequests(
        source=table.source,
        total_ms=total[order],
        error=err[order],
        ts_s=None if ts is None else ts[order],
        stages=in_order,
        input_tokens=_pick(_col(arrow, "input_tokens"), order),
        output_tokens=_pick(_col(arrow, "output_tokens"), order),
        # in time order with the rest (it kept the file's order: an AIPerf file, written
        # as requests finish, paired each TTFT with another request's end and length)
        ttft_ms=in_order.get("ttft"),
        classes=None if kcol is None else _labels(arrow, kcol)[order],
    )
    extras = _vllm_extras(str(path)) if table.format == "vllm" else None
    if extras is not None:
        logged = replace(logged, rate_per_s=extras.rate_per_s, duration_s=extras.duration_s)
    return logged, extras


def _labels(arrow: Any, col: str) -> npt.NDArray[np.str_]:
    """A class column as strings (a missing value: the empty class, judged by the service's
    objectives as an unlisted class is)."""
    values = arrow.column(col).cast("string").fill_null("").to_pylist()
    return np.asarray(values, dtype=np.str_)


def _pick(
    values: npt.NDArray[np.float64] | None, order: npt.NDArray[np.intp]
) -> npt.NDArray[np.float64] | None:
    return None if values is None else np.nan_to_num(values[order], nan=1.0)
