"""The LLM fields of an observation: `ttft_ms`, `tpot_ms`, `output_tokens`, `itl_ms`.

- `ttft_ms`: time to first token, a number >= 0 and at most `total_ms`;
- `tpot_ms`: time per output token; without it, derived from `ttft_ms` and
  `output_tokens` as vLLM defines it: (total - ttft) / (output_tokens - 1),
  0 for a one-token answer;
- `output_tokens`: a whole number >= 1;
- `itl_ms`: every inter-token gap (a list of numbers >= 0), or a summary
  `{"p50": ms, "p99": ms}` when the client keeps only that (its p99 is used).

Columns come out in the write-ahead log's stage layout (`StageColumn`), one
row per value: a request with 300 gaps has 300 rows in `itl`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from tailbudget.control.series_windows import ITL_SUMMARY
from tailbudget.control.wal import StageColumn

__all__ = ["LLM_KEYS", "BadField", "llm_columns"]

LLM_KEYS = ("ttft_ms", "tpot_ms", "output_tokens", "itl_ms")
_NUM = frozenset({int, float})


class BadField(ValueError):
    """An LLM field is not valid; the message is the one-line reason (names the item)."""


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _scalar(items: list[dict[str, Any]], key: str) -> tuple[npt.NDArray[np.float64], Any]:
    """The key's values (NaN where absent) and the present mask; BadField naming an item."""
    raw = [it.get(key) for it in items]
    kinds = {type(v) for v in raw}
    if not kinds <= {int, float, type(None)}:
        i = next(i for i, v in enumerate(raw) if v is not None and type(v) not in _NUM)
        raise BadField(f"item {i}: {key} must be a number >= 0, got {_show(raw[i])}")
    values = np.array(raw, dtype=np.float64)  # None -> NaN
    if type(None) in kinds:
        present = np.array([v is not None for v in raw], dtype=bool)
    else:
        present = np.ones(len(raw), dtype=bool)
    bad = present & ~(np.isfinite(values) & (values >= 0))
    if key == "output_tokens":
        bad |= present & ((values < 1) | (values != np.floor(values)))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        want = "a whole number >= 1" if key == "output_tokens" else "a number >= 0 (ms)"
        raise BadField(f"item {i}: {key} must be {want}, got {_show(raw[i])}")
    return values, present


def _column(values: npt.NDArray[np.float64], present: Any) -> StageColumn:
    index = np.flatnonzero(present).astype(np.int64)
    return StageColumn(index, values[index])


def _itl(items: list[dict[str, Any]]) -> dict[str, StageColumn]:
    rows: list[int] = []
    gaps: list[Any] = []
    sum_rows: list[int] = []
    sum_p99: list[float] = []
    for i, it in enumerate(items):
        v = it.get("itl_ms")
        if v is None:
            continue
        if type(v) is list:
            rows.extend([i] * len(v))
            gaps.extend(v)
            continue
        p99 = v.get("p99") if type(v) is dict else None
        if type(p99) not in _NUM or not (np.isfinite(p99) and p99 >= 0):
            raise BadField(
                f"item {i}: itl_ms must be a list of gaps (ms) or {{'p50': ms, 'p99': ms}}, "
                f"got {_show(v)}"
            )
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


def llm_columns(
    items: list[dict[str, Any]], total_ms: npt.NDArray[np.float64]
) -> dict[str, StageColumn]:
    """The batch's ttft / tpot / itl columns (tpot derived where only tokens are given)."""
    if not any(k in it for it in items for k in LLM_KEYS):
        return {}
    out: dict[str, StageColumn] = {}
    ttft, has_ttft = _scalar(items, "ttft_ms")
    tpot, has_tpot = _scalar(items, "tpot_ms")
    tokens, has_tokens = _scalar(items, "output_tokens")
    over = has_ttft & (ttft > total_ms)
    if over.any():
        i = int(np.flatnonzero(over)[0])
        raise BadField(
            f"item {i}: ttft_ms ({ttft[i]:g}) exceeds total_ms ({total_ms[i]:g}); "
            "the first token cannot come after the whole answer"
        )
    derive = ~has_tpot & has_ttft & has_tokens
    if derive.any():
        decode = total_ms[derive] - ttft[derive]
        steps = tokens[derive] - 1.0
        tpot[derive] = np.where(steps > 0, decode / np.maximum(steps, 1.0), 0.0)
        has_tpot = has_tpot | derive
    if has_ttft.any():
        out["ttft"] = _column(ttft, has_ttft)
    if has_tpot.any():
        out["tpot"] = _column(tpot, has_tpot)
    out.update(_itl(items))
    return out
