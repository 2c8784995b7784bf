"""The LLM fields of an observation: `ttft_ms`, `tpot_ms`, `output_tokens`, `itl_ms`.

- `ttft_ms`: time to first token, a number >= 0 and at most `total_ms`;
- `tpot_ms`: time per output token; without it, derived from `ttft_ms` and
  `output_tokens` as vLLM defines it: (total - ttft) / (output_tokens - 1),
  0 for a one-token answer;
- `output_tokens`: a whole number >= 1;
- `itl_ms`: every inter-token gap (a list of numbers >= 0), or a summary
  `{"p50": ms, "p99": ms}` when the client keeps only that (its p99 is used);
  `itl_p99_ms` (with `itl_p50_ms`, as the log readers name them) is the same
  summary in flat form, the cheapest to send and parse.

Columns come out in the write-ahead log's stage layout (`StageColumn`), one
row per value: a request with 300 gaps has 300 rows in `itl`.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from tailbudget.control.columns import StageColumn
from tailbudget.control.series_windows import ITL_SUMMARY
from tailbudget.serve.limits import MAX_ITL_GAPS, MAX_OUTPUT_TOKENS

__all__ = [
    "LLM_KEYS",
    "BadField",
    "Scalar",
    "llm_columns",
    "llm_columns_of",
    "llm_series",
    "too_many_gaps",
    "values_of",
    "vouched",
]

LLM_KEYS = ("ttft_ms", "tpot_ms", "output_tokens", "itl_ms", "itl_p50_ms", "itl_p99_ms")
_NUM = frozenset({int, float})


class BadField(ValueError):
    """An LLM field is not valid; the message is the one-line reason (names the item)."""


def too_many_gaps(i: int, n: int) -> str:
    """The 400 for an observation with more inter-token gaps than MAX_ITL_GAPS."""
    return (
        f"item {i}: itl_ms has {n:,} gaps; at most {MAX_ITL_GAPS:,} per observation "
        "(send the {'p50': ms, 'p99': ms} summary for longer answers)"
    )


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def values_of(items: list[dict[str, Any]], key: str) -> list[Any]:
    """`key` of every item (None where absent); itemgetter when every item has it (faster)."""
    try:
        return list(map(operator.itemgetter(key), items))
    except KeyError:
        return [it.get(key) for it in items]


_ALL = None
Present: TypeAlias = "npt.NDArray[np.bool_] | None"
"""Which observations hold a key: a mask, or `_ALL` (None) when every one does."""
"""A present mask meaning every observation has the value (the common case, no mask made)."""


def _plain_numbers(raw: list[Any]) -> npt.NDArray[Any] | None:
    """`raw` as one array when it is certainly numbers only (floats, or ints within
    int64), else None. NumPy's own type discovery reads the list once; a JSON boolean
    would pass it as 0 or 1, so a column holding an exact 0 or 1 is left to the
    type-by-type check."""
    try:
        values = np.array(raw)
    except (ValueError, OverflowError):  # ragged lists, ints past int64
        return None
    if values.ndim != 1 or values.dtype.kind not in "if":
        return None  # None, strings, objects, nested lists
    if ((values == 0) | (values == 1)).any():
        return None
    return values


def _scalar(
    columns: Mapping[str, list[Any]], key: str, n: int
) -> tuple[npt.NDArray[np.float64] | None, Present]:
    """The key's values (NaN where absent; None when no observation has the key) and the
    present mask (`_ALL`: every observation has it); BadField naming an item."""
    raw = columns.get(key)
    if raw is None:
        return None, np.zeros(n, dtype=bool)
    fast = _plain_numbers(raw)
    if fast is not None:
        whole = fast.dtype.kind == "i"
        values = fast.astype(np.float64, copy=False)
        return vouched(values, _ALL, key, whole, lambda i: _show(raw[i]))
    kinds = set(map(type, raw))
    if not kinds <= {int, float, type(None)}:
        i = next(i for i, v in enumerate(raw) if v is not None and type(v) not in _NUM)
        raise BadField(f"item {i}: {key} must be a number >= 0, got {_show(raw[i])}")
    values = np.fromiter(raw, dtype=np.float64, count=n)  # None -> NaN
    present: Present = _ALL  # every value given: NaN is a bad one
    if type(None) in kinds:
        nan = np.isnan(values)
        if raw.count(None) == int(nan.sum()):
            present = ~nan  # every NaN is an absent key
        else:  # a NaN value (the lenient parser reads it): present, and bad below
            present = np.array([v is not None for v in raw], dtype=bool)
    return vouched(values, present, key, kinds == {int}, lambda i: _show(raw[i]))


def vouched(
    values: npt.NDArray[np.float64],
    present: Present,
    key: str,
    whole: bool,
    show: Callable[[int], str],
) -> tuple[npt.NDArray[np.float64], Present]:
    """`values` and `present` once every present value is valid for `key`, else BadField
    naming the first bad item (`show` renders its value as sent). `whole`: the values
    are known to be whole numbers (Python or Arrow integers)."""
    tokens = key == "output_tokens"
    if present is _ALL:
        # Two reductions vouch for the whole column (NaN fails both comparisons).
        lo, hi = float(values.min()), float(values.max())
        top = MAX_OUTPUT_TOKENS if tokens else math.inf
        if lo >= (1.0 if tokens else 0.0) and hi < top and (not tokens or whole):
            return values, present
    # NaN fails both comparisons, so one test catches NaN, infinities and negatives
    # (an absent value, NaN, is masked out below).
    bad = ~((values >= 0) & (values < np.inf))
    if tokens:
        bad |= (values < 1) | (values != np.floor(values)) | (values > MAX_OUTPUT_TOKENS)
    if present is not _ALL:
        bad &= present
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        want = f"a whole number in 1..{MAX_OUTPUT_TOKENS:,}" if tokens else "a number >= 0 (ms)"
        raise BadField(f"item {i}: {key} must be {want}, got {show(i)}")
    return values, present


def _column(values: npt.NDArray[np.float64], present: Present) -> StageColumn:
    if present is _ALL or present.all():  # the common case: every observation has it
        return StageColumn.every_row(values)
    index = np.flatnonzero(present).astype(np.int64)
    return StageColumn(index, values[index])


def _any(values: npt.NDArray[np.float64] | None, present: Present) -> bool:
    return values is not None and (present is _ALL or bool(present.any()))


def _itl(columns: Mapping[str, list[Any]]) -> dict[str, StageColumn]:
    if "itl_ms" not in columns:
        return {}
    raw = columns["itl_ms"]
    kinds = {type(v) for v in raw}
    if kinds <= {list, type(None)}:
        fast = _itl_lists(raw)
        if fast is not None:
            return fast
    elif kinds <= {dict, type(None)}:
        fast = _itl_summaries(raw)
        if fast is not None:
            return fast
    return _itl_checked(raw)


def _itl_lists(raw: list[Any]) -> dict[str, StageColumn] | None:
    """Every request sent a list of gaps (or nothing): one vectorized pass; None if bad."""
    lists = [v for v in raw if v]
    if not lists:
        return {}
    lengths = np.array([0 if v is None else len(v) for v in raw], dtype=np.int64)
    if lengths.max() > MAX_ITL_GAPS:
        i = int(np.argmax(lengths))
        raise BadField(too_many_gaps(i, int(lengths[i])))
    # The gaps are read straight into the array, never gathered into one more list;
    # the type check first, as fromiter would also read strings and booleans.
    if not set(map(type, itertools.chain.from_iterable(lists))) <= _NUM:
        return None
    count = int(lengths.sum())
    ms = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.float64, count=count)
    if not (np.isfinite(ms).all() and (ms >= 0).all()):
        return None
    rows = np.repeat(np.arange(len(raw), dtype=np.int64), lengths)
    return {"itl": StageColumn(rows, ms)}


def _itl_summaries(raw: list[Any]) -> dict[str, StageColumn] | None:
    """Every request sent a {p50, p99} summary (or nothing); None if any is bad."""
    p99 = [None if v is None else v.get("p99") for v in raw]
    if not {type(v) for v in p99} <= {int, float, type(None)}:
        return None
    if any(v is not None and "p50" in v for v in raw):
        return None  # the checked path vouches for each p50 against its p99
    have = np.array([v is not None for v in raw], dtype=bool)
    values = np.array(p99, dtype=np.float64)
    if not (np.isfinite(values[have]).all() and (values[have] >= 0).all()):
        return None
    rows = np.flatnonzero(have).astype(np.int64)
    return {ITL_SUMMARY: StageColumn(rows, values[rows])} if rows.size else {}


def _itl_checked(raw: list[Any]) -> dict[str, StageColumn]:
    """Item by item, naming the first bad one."""
    rows: list[int] = []
    gaps: list[Any] = []
    sum_rows: list[int] = []
    sum_p99: list[float] = []
    for i, v in enumerate(raw):
        if v is None:
            continue
        if type(v) is list:
            if len(v) > MAX_ITL_GAPS:
                raise BadField(too_many_gaps(i, len(v)))
            rows.extend([i] * len(v))
            gaps.extend(v)
            continue
        p99: Any = v.get("p99") if type(v) is dict else None
        if type(p99) not in _NUM or not (np.isfinite(p99) and p99 >= 0):
            raise BadField(
                f"item {i}: itl_ms must be a list of gaps (ms) or {{'p50': ms, 'p99': ms}}, "
                f"got {_show(v)}"
            )
        _check_p50(i, v.get("p50"), float(p99), "itl_ms.p50")
        sum_rows.append(i)
        sum_p99.append(float(p99))
    out: dict[str, StageColumn] = {}
    if gaps:
        if not {type(g) for g in gaps} <= _NUM:
            k = next(k for k, g in enumerate(gaps) if type(g) not in _NUM)
            raise BadField(
                f"item {rows[k]}: itl_ms gaps must be numbers >= 0, got {_show(gaps[k])}"
            )
        ms = np.array(gaps, dtype=np.float64)
        bad = ~(np.isfinite(ms) & (ms >= 0))
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise BadField(f"item {rows[k]}: itl_ms gaps must be numbers >= 0, got {gaps[k]!r}")
        out["itl"] = StageColumn(np.array(rows, dtype=np.int64), ms)
    if sum_rows:
        out[ITL_SUMMARY] = StageColumn(
            np.array(sum_rows, dtype=np.int64), np.array(sum_p99, dtype=np.float64)
        )
    return out


def _check_p50(i: int, p50: Any, p99: float, key: str) -> None:
    """An ITL summary's p50, when given, is a number >= 0 and at most its p99."""
    if p50 is None:
        return
    if type(p50) not in _NUM or not (math.isfinite(p50) and p50 >= 0):
        raise BadField(f"item {i}: {key} must be a number >= 0 (ms), got {_show(p50)}")
    if p50 > p99:
        raise BadField(
            f"item {i}: {key} ({p50:g}) exceeds the p99 ({p99:g}); a median cannot pass the p99"
        )


def llm_columns(
    items: list[dict[str, Any]],
    total_ms: npt.NDArray[np.float64],
    keys: set[str] | None = None,
) -> dict[str, StageColumn]:
    """The batch's ttft / tpot / itl columns (tpot derived where only tokens are given).

    `keys`: every key the items carry, when the caller already has them."""
    if keys is None:
        keys = set().union(*items)
    if keys.isdisjoint(LLM_KEYS):
        return {}
    return llm_columns_of({k: values_of(items, k) for k in LLM_KEYS if k in keys}, total_ms)


def llm_columns_of(
    columns: Mapping[str, list[Any]], total_ms: npt.NDArray[np.float64]
) -> dict[str, StageColumn]:
    """The same from per-key value lists aligned with the batch (None: absent)."""
    n = int(total_ms.shape[0])
    return llm_series(lambda key: _scalar(columns, key, n), lambda: _itl(columns), total_ms)


Scalar = Callable[[str], tuple[npt.NDArray[np.float64] | None, Present]]
"""A key's values (NaN where absent, None when no observation has it) and its present
mask (`_ALL` when every observation has it), validated; BadField naming an item."""


def llm_series(
    scalar: Scalar,
    itl: Callable[[], dict[str, StageColumn]],
    total_ms: npt.NDArray[np.float64],
) -> dict[str, StageColumn]:
    """The batch's series from a reader of scalar keys and of the inter-token gaps,
    whatever the body form (JSON lists, Arrow columns)."""
    n = int(total_ms.shape[0])
    out: dict[str, StageColumn] = {}
    ttft, has_ttft = scalar("ttft_ms")
    if ttft is not None:
        over = ttft > total_ms  # NaN (absent) compares False
        if over.any():
            i = int(np.flatnonzero(over)[0])
            raise BadField(
                f"item {i}: ttft_ms ({ttft[i]:g}) exceeds total_ms ({total_ms[i]:g}); "
                "the first token cannot come after the whole answer"
            )
        if _any(ttft, has_ttft):
            out["ttft"] = _column(ttft, has_ttft)
    tpot = _tpot(scalar, total_ms, ttft, has_ttft)
    if tpot is not None:
        out["tpot"] = tpot
    out.update(itl())
    p99, has_p99 = scalar("itl_p99_ms")
    p50, _ = scalar("itl_p50_ms")
    if p50 is not None and p99 is not None:
        over = p50 > p99  # NaN (either absent) compares False
        if over.any():
            i = int(np.flatnonzero(over)[0])
            _check_p50(i, float(p50[i]), float(p99[i]), "itl_p50_ms")
    if _any(p99, has_p99):
        assert p99 is not None
        given = [c for c in (out.get("itl"), out.get(ITL_SUMMARY)) if c is not None]
        if given:  # the gaps (or the object form) win
            has_p99 = np.ones(n, dtype=bool) if has_p99 is _ALL else has_p99.copy()
            for col in given:
                has_p99[col.index] = False
        flat = _column(p99, has_p99)
        if ITL_SUMMARY in out:
            merged = np.concatenate([out[ITL_SUMMARY].index, flat.index])
            order = np.argsort(merged, kind="stable")
            ms = np.concatenate([out[ITL_SUMMARY].ms, flat.ms])
            flat = StageColumn(merged[order], ms[order])
        if len(flat):
            out[ITL_SUMMARY] = flat
    return out


def _tpot(
    scalar: Scalar,
    total_ms: npt.NDArray[np.float64],
    ttft: npt.NDArray[np.float64] | None,
    has_ttft: Present,
) -> StageColumn | None:
    """tpot as given, else derived as vLLM defines it where ttft and tokens are given."""
    n = int(total_ms.shape[0])
    tpot, has_tpot = scalar("tpot_ms")
    tokens, has_tokens = scalar("output_tokens")
    if ttft is None or tokens is None or has_tpot is _ALL:
        return _column(tpot, has_tpot) if tpot is not None and _any(tpot, has_tpot) else None
    if tpot is None and has_ttft is _ALL and has_tokens is _ALL:
        # The common case, every observation with ttft and tokens: no masks.
        steps = tokens - 1.0
        derived = np.where(steps > 0, (total_ms - ttft) / np.maximum(steps, 1.0), 0.0)
        return StageColumn.every_row(derived)
    if tpot is None:
        tpot = np.full(n, np.nan)
    full = np.ones(n, dtype=bool)
    given = full if has_tpot is _ALL else has_tpot
    derive = ~given & (full if has_ttft is _ALL else has_ttft)
    derive &= full if has_tokens is _ALL else has_tokens
    if derive.any():
        decode = total_ms[derive] - ttft[derive]
        steps = tokens[derive] - 1.0
        tpot[derive] = np.where(steps > 0, decode / np.maximum(steps, 1.0), 0.0)
        given = given | derive
    return _column(tpot, given) if given.any() else None
