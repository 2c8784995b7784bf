"""LLM load-generator results -> requests with `ttft` and `decode` stages.

vLLM `bench serve --save-result` JSON holds per-request arrays (`ttfts` and
`itls` in seconds, `input_lens`, `output_lens`, `errors`, and in newer
versions `e2els`); LLMPerf's individual-responses JSON is a list of request
records (`ttft_s`, `end_to_end_latency_s`, token counts, `error_code`).
Both become: total_ms (end to end), ttft_ms, decode_ms = total - ttft,
covariates input_tokens/output_tokens, tpot_ms as vLLM defines it
((e2e - ttft) / (output_len - 1)), inter-token p50/p95 (vLLM) or mean
(LLMPerf), and the error flag.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from tailbudget.errors import LogError
from tailbudget.logs.canonical import canonicalize
from tailbudget.logs.engine import arrow_table
from tailbudget.logs.options import ReadOptions
from tailbudget.logs.table import LogTable

__all__ = ["llmperf_rows", "read_llm_bench", "vllm_rows"]

_EXTRAS = ("tpot_ms", "itl_p50_ms", "itl_p95_ms", "itl_mean_ms")
_VLLM_ARRAYS = ("ttfts", "itls", "input_lens", "output_lens")


def read_llm_bench(
    files: Sequence[str], fmt: str, options: ReadOptions, backend: Any, label: str
) -> LogTable:
    """Read vLLM or LLMPerf result files (several files are concatenated)."""
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for k, path in enumerate(files):
        data = _load_json(path)
        prefix = f"{k}:" if len(files) > 1 else ""
        if fmt == "vllm":
            part, note = vllm_rows(data, path)
        else:
            part, note = llmperf_rows(data, path), None
        for row in part:
            row["request_id"] = prefix + str(row["request_id"])
        rows.extend(part)
        if note and note not in notes:
            notes.append(note)
    if not rows:
        raise LogError(f"{label}: the {fmt} result holds no requests")
    table = arrow_table(backend, _to_arrow(rows))
    extras = tuple(c for c in _EXTRAS if any(r.get(c) is not None for r in rows))
    opts = ReadOptions(
        total="total_ms",
        stages={"ttft": "ttft_ms", "decode": "decode_ms"},
        request_id="request_id",
        error="error",
        timestamp="ts" if any(r.get("ts") is not None for r in rows) else None,
        shape=options.shape,
        cohorts=options.cohorts,
    )
    notes.append(
        f"{fmt} benchmark: stages ttft and decode (= end to end - ttft); "
        "tpot_ms = (e2e - ttft) / (output_tokens - 1) as vLLM defines it"
    )
    return canonicalize(
        table,
        opts,
        backend=backend,
        source=label,
        fmt=fmt,
        notes=tuple(notes),
        extras=extras,
        shape=("input_tokens", "output_tokens"),
        cache=True,
    )


def vllm_rows(data: Any, path: str) -> tuple[list[dict[str, Any]], str | None]:
    """Per-request rows from a vLLM --save-result JSON object."""
    if not isinstance(data, dict) or "ttfts" not in data:
        raise LogError(f"{path}: not a vLLM result (no 'ttfts' array); pass the right format")
    n = _length(data, "ttfts", path)
    for key in (*_VLLM_ARRAYS, "errors", "e2els"):
        if key in data and _length(data, key, path) != n:
            raise LogError(
                f"{path}: vLLM array {key!r} has {_length(data, key, path)} entries, "
                f"'ttfts' has {n}; the file is damaged"
            )
    itls = data.get("itls") or [None] * n
    e2els = data.get("e2els")
    errors = data.get("errors") or [""] * n
    ins = data.get("input_lens") or [None] * n
    outs = data.get("output_lens") or [None] * n
    rows = []
    for i in range(n):
        ttft = _seconds(data["ttfts"][i])
        gaps = [g for g in (itls[i] or []) if _is_number(g)] if isinstance(itls[i], list) else []
        failed = bool(errors[i]) and str(errors[i]).strip() != ""
        if e2els is not None:
            e2e = _seconds(e2els[i])
        elif isinstance(ttft, float):
            e2e = ttft + sum(float(g) for g in gaps)
        else:
            e2e = ttft
        if failed and (not isinstance(e2e, float) or e2e <= 0):
            ttft = e2e = None  # a failed request has no latency to report
        row = _derived(i, ttft, e2e, ins[i], outs[i], failed)
        if gaps:
            ms = np.asarray(gaps, dtype=float) * 1000.0
            row["itl_p50_ms"] = float(np.percentile(ms, 50))
            row["itl_p95_ms"] = float(np.percentile(ms, 95))
        rows.append(row)
    note = None if e2els is not None else "vLLM end-to-end latency = ttft + sum(itls)"
    return rows, note


def llmperf_rows(data: Any, path: str) -> list[dict[str, Any]]:
    """Per-request rows from an LLMPerf individual-responses JSON list."""
    records = data.get("results") if isinstance(data, dict) else data
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise LogError(f"{path}: not an LLMPerf individual-responses list; pass the right format")
    rows = []
    for i, rec in enumerate(records):
        code = rec.get("error_code")
        failed = (code not in (None, "", 0, 200)) or bool(str(rec.get("error_msg") or "").strip())
        ttft = _seconds(rec.get("ttft_s"))
        e2e = _seconds(rec.get("end_to_end_latency_s"))
        if failed and (not isinstance(e2e, float) or e2e <= 0):
            ttft = e2e = None
        row = _derived(
            i, ttft, e2e, rec.get("number_input_tokens"), rec.get("number_output_tokens"), failed
        )
        itl = _seconds(rec.get("inter_token_latency_s"))
        row["itl_mean_ms"] = itl * 1000.0 if isinstance(itl, float) else None
        rows.append(row)
    return rows


def _derived(i: int, ttft: Any, e2e: Any, n_in: Any, n_out: Any, failed: bool) -> dict[str, Any]:
    """One canonical row; values that are not numbers stay as text so they get rejected."""
    numbers = isinstance(ttft, float) and isinstance(e2e, float)
    out = float(n_out) if _is_number(n_out) else None
    tpot = None
    if numbers and out is not None and out > 1:
        tpot = (e2e - ttft) / (out - 1) * 1000.0
    return {
        "request_id": str(i),
        "total_ms": e2e * 1000.0 if isinstance(e2e, float) else e2e,
        "ttft_ms": ttft * 1000.0 if isinstance(ttft, float) else ttft,
        "decode_ms": (e2e - ttft) * 1000.0 if numbers else None,
        "input_tokens": float(n_in) if _is_number(n_in) else None,
        "output_tokens": out,
        "tpot_ms": tpot,
        "error": failed,
    }


def _seconds(value: Any) -> Any:
    """A float for numbers, None for null, the text itself otherwise (to be rejected)."""
    if value is None:
        return None
    if _is_number(value):
        return float(value)
    return str(value)


def _is_number(value: Any) -> bool:
    """A JSON number that fits a float (NaN and inf included: they are rejected later)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, float) or abs(value) < 2**1000


def _to_arrow(rows: list[dict[str, Any]]) -> pa.Table:
    columns: dict[str, list[Any]] = {}
    for key in dict.fromkeys(k for r in rows for k in r):
        values = [r.get(key) for r in rows]
        if key == "error":
            columns[key] = [bool(v) for v in values]
        elif all(v is None or isinstance(v, float) for v in values):
            columns[key] = values
        else:  # mixed numbers and text: keep text, canonicalisation counts it as non_numeric
            columns[key] = [None if v is None else str(v) for v in values]
    return pa.table(columns)


def _length(data: dict[str, Any], key: str, path: str) -> int:
    value = data.get(key)
    if not isinstance(value, list):
        raise LogError(f"{path}: vLLM field {key!r} should be a per-request array")
    return len(value)


def _load_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LogError(f"{path}: not valid JSON ({exc}); check the file") from exc
