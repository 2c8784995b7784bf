"""The LLM series of a log for replay: ttft, tpot and inter-token gaps, row-aligned.

A log read by `tailbudget.logs.read_log` keeps a time to first token as the
`ttft` stage (`ttft_ms`); LLM benchmark readers add `tpot_ms`, `output_tokens`
and `itl_ms` (a list of gaps per request). Replay hands them to the controller
exactly as `serve` does with posted observations: tpot derived as vLLM defines
it where only tokens are known, every gap of `itl_ms` in the itl window.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from tailbudget.control.columns import StageColumn

__all__ = ["RawSeries", "order_series", "read_series", "slice_series"]

RawSeries = dict[str, Any]
"""Per series: a float array aligned with the log's rows (NaN: absent), or for `itl`
a list of per-row gap lists."""


def _floats(column: Any) -> npt.NDArray[np.float64]:
    values = column.to_numpy(zero_copy_only=False)
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def read_series(arrow: Any, total_ms: npt.NDArray[np.float64]) -> RawSeries:
    """ttft / tpot / itl of an Arrow table of the canonical log (only those it has)."""
    names = set(arrow.column_names)
    out: RawSeries = {}
    if "ttft_ms" in names:
        out["ttft"] = _floats(arrow.column("ttft_ms"))
    if "tpot_ms" in names:
        out["tpot"] = _floats(arrow.column("tpot_ms"))
    if "ttft" in out and "output_tokens" in names:
        tokens = _floats(arrow.column("output_tokens"))
        tpot = out.get("tpot", np.full(total_ms.shape, np.nan))
        derive = np.isnan(tpot) & np.isfinite(out["ttft"]) & (tokens >= 1)
        steps = np.maximum(tokens - 1.0, 1.0)
        tpot[derive] = np.where(
            tokens[derive] > 1, (total_ms[derive] - out["ttft"][derive]) / steps[derive], 0.0
        )
        out["tpot"] = tpot
    if "itl_ms" in names:
        out["itl"] = arrow.column("itl_ms").to_pylist()
    return out


def order_series(
    raw: RawSeries, keep: npt.NDArray[np.bool_], order: npt.NDArray[np.intp]
) -> dict[str, StageColumn]:
    """The kept rows' series in time order, as columns indexing the sorted rows."""
    out: dict[str, StageColumn] = {}
    for name, values in raw.items():
        if name == "itl":
            kept = [values[i] for i in np.flatnonzero(keep)]
            per_row = [kept[i] or [] for i in order]
            rows = np.repeat(np.arange(len(per_row)), [len(g) for g in per_row])
            gaps = np.array([g for lst in per_row for g in lst], dtype=np.float64)
            ok = np.isfinite(gaps) & (gaps >= 0)
            col = StageColumn(rows[ok].astype(np.int64), gaps[ok])
        else:
            v = np.asarray(values, dtype=np.float64)[keep][order]
            ok = np.isfinite(v) & (v >= 0)
            col = StageColumn(np.flatnonzero(ok).astype(np.int64), v[ok])
        if len(col):
            out[name] = col
    return out


def slice_series(series: dict[str, StageColumn], lo: int, hi: int) -> dict[str, StageColumn]:
    """The part of each column for rows [lo, hi), re-indexed from 0."""
    out: dict[str, StageColumn] = {}
    for name, col in series.items():
        a, b = np.searchsorted(col.index, (lo, hi), side="left")
        if b > a:
            out[name] = StageColumn(col.index[a:b] - lo, col.ms[a:b])
    return out
