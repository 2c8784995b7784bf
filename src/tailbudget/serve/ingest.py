"""Parsing `POST /v1/observations` bodies: a JSON array or NDJSON of observations.

Each observation is `{"ts": ..., "total_ms": ..., "stages": {...}, "error": ...}`:
`total_ms` is required (a finite number >= 0); `ts` is epoch seconds or an
ISO-8601 string (default: when the server received the batch); `error` is a
boolean or 0/1 (default false); `stages` is an object of stage name to
milliseconds (a name is 1 to 100 characters; at most `MAX_STAGES` names per
batch). LLM observations may add `ttft_ms`, `tpot_ms`, `output_tokens` and
`itl_ms` (see `llm_fields`). A body may also be columns, one list per key
(see `columns_body`), or an Arrow IPC stream of those columns (see
`arrow_body`). Other keys (request ids, routes) are allowed and ignored. One bad
item rejects the whole batch with a one-line reason naming the item, so a
client never has to guess which part was accepted.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from tailbudget.control.columns import StageColumn
from tailbudget.control.stage_windows import MAX_STAGES
from tailbudget.serve.arrow_body import ARROW_STREAM, parse_arrow
from tailbudget.serve.batch import (
    MAX_BATCH,
    MAX_FUTURE_S,
    MAX_PAST_S,
    MAX_STAGE_NAME,
    BadBatch,
    Batch,
    BatchTooLarge,
    _check_stage_name,
    _number,
    _short,
    _ts,
    ahead_of_clock,
    behind_clock,
    stage_name_problem,
)
from tailbudget.serve.columns_body import parse_columns
from tailbudget.serve.limits import BodyLimits
from tailbudget.serve.llm_fields import BadField, llm_columns, values_of

ParsedBatch = Batch
"""The name `parse_observations` returned before `Batch` had its own module."""

__all__ = [
    "MAX_BATCH",
    "MAX_STAGE_NAME",
    "BadBatch",
    "BatchTooLarge",
    "ParsedBatch",
    "parse_observations",
    "stage_name_problem",
]


MAX_DIGITS = 30
"""Longest integer literal in a body; observations carry ordinary numbers, and a
400-digit integer would otherwise reach float conversion and overflow."""


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise BadBatch(
            f"a number with {len(text.lstrip('-'))} digits; observations carry ordinary "
            f"numbers (at most {MAX_DIGITS} digits)"
        )
    return int(text)


def _loads(text: str, where: str) -> Any:
    """json.loads, every failure a BadBatch (bad syntax, nesting too deep, huge numbers)."""
    try:
        return json.loads(text, parse_int=_int)
    except json.JSONDecodeError as exc:
        raise BadBatch(
            f"{where}invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except BadBatch as exc:
        raise BadBatch(f"{where}{exc}") from None
    except RecursionError:
        raise BadBatch(f"{where}JSON nested too deep; an observation is a flat object") from None
    except ValueError as exc:  # e.g. an integer past Python's digit limit
        raise BadBatch(f"{where}invalid JSON ({exc})") from None


def _columnar(text: str) -> dict[str, Any] | None:
    """The body as columns (`{"total_ms": [...], ...}`), or None when it is NDJSON."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if isinstance(value, dict) and isinstance(value.get("total_ms"), list):
        return value
    return None


def _items(body: bytes) -> list[Any] | dict[str, Any]:
    head = body.lstrip()
    if head[:1] == b"[":
        # The common shape, read straight from the bytes (orjson checks the UTF-8);
        # anything else takes the checked path below, which names what is wrong.
        try:
            value = orjson.loads(head)
        except orjson.JSONDecodeError:
            value = None
        if type(value) is list and set(map(type, value)) <= {dict}:
            return value
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadBatch(f"body is not UTF-8 (byte {exc.start})") from None
    stripped = text.lstrip()
    if not stripped:
        raise BadBatch("empty body: send a JSON array or NDJSON of observations")
    if stripped[0] == "[":
        # json (slower) names the error and refuses what is hostile (deep nesting,
        # huge numbers); it also reads NaN, so that item is named by the checks.
        value = _loads(stripped, "")
        if not isinstance(value, list):
            raise BadBatch("a JSON body must be an array of observations")
        return value
    if stripped[0] == "{" and (columns := _columnar(stripped)) is not None:
        return columns
    items = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            items.append(_loads(line, f"NDJSON line {lineno}: "))
    return items


_NUMBER_TYPES = frozenset({int, float})
_TS_TYPES = frozenset({int, float, type(None)})
_FLAG_TYPES = frozenset({bool, type(None)})
_LABEL_TYPES = frozenset({str, type(None)})


def parse_observations(
    body: bytes,
    *,
    now_s: float,
    content_type: str | None = None,
    limits: BodyLimits | None = None,
) -> ParsedBatch:
    """Validate a body into columns, or raise BadBatch with a one-line reason.

    `content_type` (the request's header) picks an Arrow IPC stream body; anything
    else is JSON (an array, NDJSON or columns, told apart by the body itself).
    `limits` bounds what an Arrow body decodes to (TooLarge, a 413)."""
    media = (content_type or "").partition(";")[0].strip().lower()
    if media.startswith("application/vnd.apache.arrow"):
        if media != ARROW_STREAM:
            raise BadBatch(
                f"Content-Type {media} is not read; send the Arrow IPC stream format "
                f"as {ARROW_STREAM} (pyarrow.ipc.new_stream)"
            )
        return parse_arrow(body, now_s=now_s, limits=limits or BodyLimits())
    items = _items(body)
    if isinstance(items, dict):
        return parse_columns(items, now_s=now_s)
    if not items:
        raise BadBatch("no observations in the body")
    if len(items) > MAX_BATCH:
        raise BadBatch(f"{len(items)} observations in one request; send at most {MAX_BATCH}")
    return _fast(items, now_s) or _checked(items, now_s)


def _fast(items: list[Any], now_s: float) -> ParsedBatch | None:
    """Vectorized validation of the common shape; None sends the batch to `_checked`,
    which finds and names the first bad item."""
    if set(map(type, items)) != {dict}:
        return None
    # One pass for the keys present anywhere: a column no item has costs nothing more.
    keys: set[str] = set().union(*items)
    totals = values_of(items, "total_ms")
    if not set(map(type, totals)) <= _NUMBER_TYPES:
        return None
    stamps = values_of(items, "ts") if "ts" in keys else None
    flags = values_of(items, "error") if "error" in keys else None
    if (stamps is not None and not set(map(type, stamps)) <= _TS_TYPES) or (
        flags is not None and not set(map(type, flags)) <= _FLAG_TYPES
    ):
        return None
    stages: dict[str, StageColumn] | None = {}
    if "stages" in keys:
        stages = _fast_stages(values_of(items, "stages"))
    if stages is None:
        return None
    try:
        total = np.array(totals, dtype=np.float64)
        ts = np.full(len(items), now_s) if stamps is None else np.array(stamps, dtype=np.float64)
    except OverflowError:
        return None
    if stamps is not None and None in stamps:
        ts[np.array([t is None for t in stamps], dtype=bool)] = now_s
    bad = (
        ~np.isfinite(total)
        | (total < 0)
        | ~np.isfinite(ts)
        | (ts < now_s - MAX_PAST_S)
        | (ts > now_s + MAX_FUTURE_S)
    )
    if bad.any():
        return None
    err = np.zeros(len(items), dtype=bool)
    if flags is not None:
        err = np.array([e is True for e in flags], dtype=bool)
    labels = values_of(items, "class") if "class" in keys else None
    if labels is not None and not set(map(type, labels)) <= _LABEL_TYPES:
        return None
    return ParsedBatch(ts, total, err, stages, _series(items, total, keys), labels)


def _series(
    items: list[Any], total: npt.NDArray[np.float64], keys: set[str] | None = None
) -> dict[str, StageColumn]:
    try:
        return llm_columns(items, total, keys)
    except BadField as exc:
        raise BadBatch(str(exc)) from None


def _fast_stages(per_item: list[Any]) -> dict[str, StageColumn] | None:
    """Stage columns when every stage time is a finite number >= 0 under a valid name;
    None otherwise (`_checked` then names the bad item)."""
    rows: dict[str, list[int]] = {}
    values: dict[str, list[Any]] = {}
    for i, st in enumerate(per_item):
        if not st:  # None or {}: no stage times in this item
            if st is not None and type(st) is not dict:
                return None
            continue
        if type(st) is not dict:
            return None
        for name, ms in st.items():
            column = rows.get(name)
            if column is None:
                column = rows[name] = []
                values[name] = []
            column.append(i)
            values[name].append(ms)
    if len(rows) > MAX_STAGES or not all(_good_name(name) for name in rows):
        return None
    out: dict[str, StageColumn] = {}
    for name, column in rows.items():
        if not {type(v) for v in values[name]} <= _NUMBER_TYPES:
            return None
        try:
            ms = np.array(values[name], dtype=np.float64)
        except OverflowError:
            return None
        if not (np.isfinite(ms).all() and (ms >= 0).all()):
            return None
        out[name] = StageColumn(np.array(column, dtype=np.int64), ms)
    return out


def _good_name(name: str) -> bool:
    try:
        _check_stage_name(0, name, 0)
    except BadBatch:
        return False
    return True


def _checked(items: list[Any], now_s: float) -> ParsedBatch:
    """Item-by-item validation, with the reason for the first bad item."""
    n = len(items)
    ts = np.empty(n, dtype=np.float64)
    total = np.empty(n, dtype=np.float64)
    err = np.zeros(n, dtype=bool)
    stages: dict[str, tuple[list[int], list[float]]] = {}
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise BadBatch(f"item {i}: must be an object with total_ms, got {_short(item)}")
        t = _number(item.get("total_ms"))
        if t is None or t < 0:
            raise BadBatch(
                f"item {i}: total_ms must be a number >= 0 (milliseconds), "
                f"got {_short(item.get('total_ms'))}"
            )
        total[i] = t
        ts[i] = _item_ts(i, item, now_s)
        err[i] = _item_error(i, item)
        _item_stages(i, item, stages)
        label = item.get("class")
        if label is not None and not isinstance(label, str):
            raise BadBatch(
                f"item {i}: class must be a string (the request's class, e.g. premium), "
                f"got {_short(label)}"
            )
    columns = {
        name: StageColumn(np.array(rows, dtype=np.int64), np.array(ms, dtype=np.float64))
        for name, (rows, ms) in stages.items()
    }
    labels = [item.get("class") for item in items] if any("class" in i for i in items) else None
    return ParsedBatch(ts, total, err, columns, _series(items, total), labels)


def _item_ts(i: int, item: dict[str, Any], now_s: float) -> float:
    when = _ts(item.get("ts"), now_s)
    if when is None:
        raise BadBatch(
            f"item {i}: ts must be epoch seconds or an ISO-8601 time with a zone, "
            f"got {_short(item.get('ts'))}"
        )
    if when > now_s + MAX_FUTURE_S:
        raise ahead_of_clock(i, when - now_s)
    if when < now_s - MAX_PAST_S:
        raise behind_clock(i, _short(item.get("ts")), now_s - when)
    return when


def _item_error(i: int, item: dict[str, Any]) -> bool:
    e = item.get("error", False)
    if e is None or e is False or e == 0:
        return False
    if e is True or e == 1:
        return True
    raise BadBatch(f"item {i}: error must be true/false or 0/1, got {_short(e)}")


def _item_stages(
    i: int, item: dict[str, Any], stages: dict[str, tuple[list[int], list[float]]]
) -> None:
    st = item.get("stages")
    if st is None:
        return
    if not isinstance(st, dict):
        raise BadBatch(f"item {i}: stages must be an object of name -> ms, got {_short(st)}")
    for name, ms in st.items():
        x = _number(ms)
        if x is None or x < 0:
            raise BadBatch(f"item {i}: stages.{name} must be a number >= 0 (ms), got {_short(ms)}")
        column = stages.get(name)
        if column is None:
            _check_stage_name(i, name, len(stages))
            column = stages[name] = ([], [])
        column[0].append(i)
        column[1].append(x)
