"""The parallel per-request arrays vLLM's and SGLang's benchmark outputs write (`ttfts`,
`itls`, `input_lens`, `output_lens`, `errors`, `start_times`, seconds) -> bench rows.

Shared by `logs.llm_bench` (vLLM) and `logs.sglang`, which `llm_bench` dispatches to: here
below both, so neither imports the other inside a function.
"""

from __future__ import annotations

from typing import Any

from tailbudget.errors import LogError
from tailbudget.logs.bench_rows import (
    BenchRows,
    derived_row,
    epoch_us,
    failure_reason,
    is_number,
    seconds,
    with_itls,
)

__all__ = ["per_request_arrays"]


_VLLM_ARRAYS = ("ttfts", "itls", "input_lens", "output_lens")


_VLLM_E2E = ("e2els", "latencies")


def per_request_arrays(data: dict[str, Any], path: str, tool: str) -> BenchRows:
    """Rows from the parallel per-request arrays vLLM and SGLang write (seconds)."""
    n = _length(data, "ttfts", path, tool)
    for key in (*_VLLM_ARRAYS, "errors", "start_times", *_VLLM_E2E):
        if key in data and data[key] is not None and _length(data, key, path, tool) != n:
            raise LogError(
                f"{path}: {tool} array {key!r} has {_length(data, key, path, tool)} entries, "
                f"'ttfts' has {n}; the file is damaged"
            )
    e2e_key = next((k for k in _VLLM_E2E if data.get(k) is not None), None)
    has_itls = isinstance(data.get("itls"), list)
    itls = data.get("itls") or [None] * n
    if has_itls:
        _check_gaps(itls, path, tool)
    errors = data.get("errors") or [""] * n
    ins = data.get("input_lens") or [None] * n
    outs = data.get("output_lens") or [None] * n
    starts = _starts(data.get("start_times"), n)
    found = BenchRows()
    for i in range(n):
        ttft = seconds(data["ttfts"][i])
        raw_gaps = itls[i] if isinstance(itls[i], list) else []
        gaps = [float(g) for g in raw_gaps if is_number(g)]
        failed = bool(errors[i]) and str(errors[i]).strip() != ""
        if e2e_key is not None:
            e2e = seconds(data[e2e_key][i])
        elif isinstance(ttft, float):
            e2e = ttft + sum(gaps)
        else:
            e2e = ttft
        if failed and (not isinstance(e2e, float) or e2e <= 0):
            found.failed[failure_reason(errors[i])] += 1
            continue
        row = derived_row(i, ttft, e2e, ins[i], outs[i], failed)
        if starts is not None:
            row["ts"] = starts[i]
        found.rows.append(with_itls(row, [g * 1000.0 for g in gaps] if has_itls else None))
    if e2e_key is None:
        found.notes.append(f"{tool} end-to-end latency = ttft + sum(itls)")
    if starts is not None:
        found.notes.append(
            f"{tool} start_times are a monotonic clock: ts counts from the first request's start"
        )
    elif _unlimited(data):
        found.all_at_once = True
        found.notes.append(
            f"{tool} request rate inf and no max concurrency: all {n} requests were sent at "
            "once, so the requests decoding beside each one are known from its TTFT and end"
        )
    return found


def _check_gaps(itls: list[Any], path: str, tool: str) -> None:
    """Each request's inter-token gaps are a list of numbers (seconds), or null."""
    for i, gaps in enumerate(itls):
        if gaps is None:
            continue
        if not isinstance(gaps, list):
            raise LogError(
                f"{path}: {tool} field 'itls' holds {_short(gaps)} for request {i}; each "
                "request's inter-token gaps must be a list of seconds, e.g. [0.021, 0.019]"
            )
        bad = next((g for g in gaps if not (g is None or is_number(g))), _NONE)
        if bad is not _NONE:
            raise LogError(
                f"{path}: {tool} field 'itls' holds {_short(bad)} among request {i}'s gaps; "
                "inter-token gaps must be numbers of seconds"
            )


_NONE = object()


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _unlimited(data: dict[str, Any]) -> bool:
    """An unlimited request rate with no concurrency cap: every request starts at once."""
    rate = data.get("request_rate")
    inf = rate in ("inf", "Infinity") or (isinstance(rate, float) and rate == float("inf"))
    return inf and data.get("max_concurrency") is None


def _starts(values: Any, n: int) -> list[Any] | None:
    """Request start offsets (from the first start) as times, or None without start_times."""
    if not isinstance(values, list) or not any(is_number(v) for v in values):
        return None
    zero = min(float(v) for v in values if is_number(v))
    return [epoch_us(float(v) - zero) if is_number(v) else None for v in values[:n]]


def _length(data: dict[str, Any], key: str, path: str, tool: str) -> int:
    value = data.get(key)
    if not isinstance(value, list):
        raise LogError(f"{path}: {tool} field {key!r} should be a per-request array")
    return len(value)
