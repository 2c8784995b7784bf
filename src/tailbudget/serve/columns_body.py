"""Columnar observation bodies: one JSON list per key, the cheapest form to send at volume.

    {"total_ms": [812.5, 640.1], "ts": [1764570000.2, null], "error": [false, true],
     "ttft_ms": [120.4, null], "output_tokens": [200, null], "itl_p99_ms": [41.0, null],
     "stages": {"retrieval": [80.2, 75.0]}}

`total_ms` is required; every list has its length; `null` means absent for that
observation (a `ts` of null is when the server received the batch). The rules
are those of the row form (`ingest`), and an error names the observation by
its position: `item 3: ttft_ms must be a number >= 0 (ms), got -1`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from tailbudget.control.columns import StageColumn
from tailbudget.serve.batch import (
    MAX_BATCH,
    MAX_FUTURE_S,
    MAX_PAST_S,
    BadBatch,
    _check_stage_name,
    _short,
    _ts,
    ahead_of_clock,
    behind_clock,
)
from tailbudget.serve.batch import (
    Batch as ParsedBatch,
)
from tailbudget.serve.llm_fields import LLM_KEYS, BadField, llm_columns_of

__all__ = ["Show", "checked_stage", "checked_stamps", "checked_totals", "parse_columns"]

_NUM = frozenset({int, float})

Show = Callable[[int], str]
"""Renders item i's value as the client sent it, for an error message."""


def _list(obj: dict[str, Any], key: str, n: int) -> list[Any] | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != n:
        got = f"{len(value)} values" if isinstance(value, list) else _short(value)
        raise BadBatch(f"column {key} must be a list of {n} values (one per total_ms), got {got}")
    return value


def _totals(raw: list[Any]) -> npt.NDArray[np.float64]:
    if set(map(type, raw)) <= _NUM:
        return checked_totals(np.array(raw, dtype=np.float64), lambda i: _short(raw[i]))
    i = next(i for i, v in enumerate(raw) if type(v) not in _NUM)
    raise BadBatch(f"item {i}: total_ms must be a number >= 0 (milliseconds), got {_short(raw[i])}")


def checked_totals(total: npt.NDArray[np.float64], show: Show) -> npt.NDArray[np.float64]:
    """`total` once every value is a finite number >= 0; else BadBatch naming the item."""
    bad = ~(np.isfinite(total) & (total >= 0))
    if not bad.any():
        return total
    i = int(np.flatnonzero(bad)[0])
    raise BadBatch(f"item {i}: total_ms must be a number >= 0 (milliseconds), got {show(i)}")


def _stamps(raw: list[Any] | None, n: int, now_s: float) -> npt.NDArray[np.float64]:
    if raw is None:
        return np.full(n, now_s)
    if set(map(type, raw)) <= {int, float, type(None)}:
        ts = np.array(raw, dtype=np.float64)
        ts[np.isnan(ts)] = now_s  # null: received now
    else:
        ts = np.array([_ts(v, now_s) if v is not None else now_s for v in raw], dtype=float)
    return checked_stamps(ts, now_s, lambda i: _short(raw[i]))


def checked_stamps(
    ts: npt.NDArray[np.float64], now_s: float, show: Show
) -> npt.NDArray[np.float64]:
    """`ts` (epoch seconds, absent ones already `now_s`) once each is a time within the
    bounds around the server clock; else BadBatch naming the item."""
    bad = ~np.isfinite(ts) | (ts < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise BadBatch(
            f"item {i}: ts must be epoch seconds or an ISO-8601 time with a zone, got {show(i)}"
        )
    ahead = ts > now_s + MAX_FUTURE_S
    if ahead.any():
        i = int(np.flatnonzero(ahead)[0])
        raise ahead_of_clock(i, float(ts[i]) - now_s)
    behind = ts < now_s - MAX_PAST_S
    if behind.any():
        i = int(np.flatnonzero(behind)[0])
        raise behind_clock(i, show(i), now_s - float(ts[i]))
    return ts


def _errors(raw: list[Any] | None, n: int) -> npt.NDArray[np.bool_]:
    if raw is None:
        return np.zeros(n, dtype=bool)
    if set(map(type, raw)) <= {bool, type(None)}:
        return np.array([v is True for v in raw], dtype=bool)
    for i, v in enumerate(raw):
        if not (v is None or v in (0, 1)) or isinstance(v, float | str):
            raise BadBatch(f"item {i}: error must be true/false or 0/1, got {_short(v)}")
    return np.array([bool(v) for v in raw], dtype=bool)


def _stages(raw: Any, n: int) -> dict[str, StageColumn]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise BadBatch(f"stages must be an object of name -> list of ms, got {_short(raw)}")
    out: dict[str, StageColumn] = {}
    for k, name in enumerate(raw):
        _check_stage_name(0, name, k)
        col = _list(raw, name, n)
        assert col is not None
        column = _stage(name, col)
        if column is not None:
            out[name] = column
    return out


def _stage(name: str, col: list[Any]) -> StageColumn | None:
    if not set(map(type, col)) <= {int, float, type(None)}:
        i = next(i for i, v in enumerate(col) if v is not None and type(v) not in _NUM)
        raise BadBatch(f"item {i}: stages.{name} must be a number >= 0 (ms), got {col[i]!r}")
    ms = np.array(col, dtype=np.float64)
    have = np.array([v is not None for v in col], dtype=bool)
    return checked_stage(name, ms, have, lambda i: repr(col[i]))


def checked_stage(
    name: str, ms: npt.NDArray[np.float64], have: npt.NDArray[np.bool_] | None, show: Show
) -> StageColumn | None:
    """A stage's column once every time it carries is a number >= 0 (`have`: which
    observations carry one; None: every one); else BadBatch naming the item. None
    when no observation carries it."""
    carried = np.ones(ms.shape[0], dtype=bool) if have is None else have
    bad = carried & ~(np.isfinite(ms) & (ms >= 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise BadBatch(f"item {i}: stages.{name} must be a number >= 0 (ms), got {show(i)}")
    if have is None or have.all():
        return StageColumn.every_row(ms)
    if not have.any():
        return None
    index = np.flatnonzero(have).astype(np.int64)
    return StageColumn(index, ms[index])


def parse_columns(obj: dict[str, Any], *, now_s: float) -> ParsedBatch:
    """Validate a columnar body, or raise BadBatch with a one-line reason."""
    raw_total = obj["total_ms"]
    n = len(raw_total)
    if n == 0:
        raise BadBatch("no observations in the body")
    if n > MAX_BATCH:
        raise BadBatch(f"{n} observations in one request; send at most {MAX_BATCH}")
    total = _totals(raw_total)
    ts = _stamps(_list(obj, "ts", n), n, now_s)
    error = _errors(_list(obj, "error", n), n)
    stages = _stages(obj.get("stages"), n)
    columns = {k: v for k in LLM_KEYS if (v := _list(obj, k, n)) is not None}
    try:
        series = llm_columns_of(columns, total) if columns else {}
    except BadField as exc:
        raise BadBatch(str(exc)) from None
    return ParsedBatch(ts, total, error, stages, series, _labels(_list(obj, "class", n)))


def _labels(raw: list[Any] | None) -> list[str | None] | None:
    """The `class` column: text (or null) per observation."""
    if raw is None:
        return None
    bad = next((i for i, v in enumerate(raw) if v is not None and not isinstance(v, str)), None)
    if bad is not None:
        raise BadBatch(
            f"item {bad}: class must be a string (the request's class, e.g. premium), "
            f"got {_short(raw[bad])}"
        )
    return list(raw)
