"""LLM load-generator results -> requests with `ttft` and `decode` stages.

Readers: vLLM `bench serve --save-result --save-detailed`, LLMPerf individual
responses, AIPerf / GenAI-Perf `profile_export.jsonl`, guidellm
`benchmarks.json` and SGLang `bench_serving --output-details`. Each becomes:
total_ms (end to end), ttft_ms, decode_ms = total - ttft, covariates
input_tokens/output_tokens, tpot_ms as vLLM defines it ((e2e - ttft) /
(output_len - 1)), every inter-token gap in `itl_ms` (a list) where the file
has them, with per-request p50/p95, and the error flag. Requests that failed
without a latency are counted in `rows.failed` with their reason. A file that
holds only aggregates is refused, naming the per-request file to pass.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tailbudget.errors import LogError
from tailbudget.logs.aiperf import aiperf_rows
from tailbudget.logs.bench_rows import (
    DECODE_BATCH,
    BenchRows,
    derived_row,
    epoch_us,
    failure_reason,
    is_number,
    seconds,
    to_arrow,
    with_decode_batch,
    with_itls,
)
from tailbudget.logs.canonical import canonicalize
from tailbudget.logs.engine import arrow_table
from tailbudget.logs.guidellm import guidellm_rows
from tailbudget.logs.options import ReadOptions
from tailbudget.logs.table import LogTable, RowCounts

__all__ = ["BENCH_FORMATS", "llmperf_rows", "read_llm_bench", "vllm_rows"]

BENCH_FORMATS = ("vllm", "llmperf", "aiperf", "guidellm", "sglang")
_EXTRAS = (DECODE_BATCH, "tpot_ms", "itl_ms", "itl_p50_ms", "itl_p95_ms", "itl_mean_ms")
_VLLM_ARRAYS = ("ttfts", "itls", "input_lens", "output_lens")
_VLLM_E2E = ("e2els", "latencies")


def read_llm_bench(
    files: Sequence[str], fmt: str, options: ReadOptions, backend: Any, label: str
) -> LogTable:
    """Read LLM benchmark result files of one format (several files are concatenated)."""
    found = BenchRows()
    for k, path in enumerate(files):
        one = _file_rows(path, fmt)
        if one.all_at_once and len(files) == 1:
            with_decode_batch(one.rows)
        found.extend(one, f"{k}:" if len(files) > 1 else "")
    failed = sum(found.failed.values())
    if not found.rows:
        detail = _reasons(found.failed + found.skipped)
        raise LogError(f"{label}: the {fmt} result holds no request with a latency{detail}")
    rows = found.rows
    table = arrow_table(backend, to_arrow(rows))
    extras = tuple(c for c in _EXTRAS if any(r.get(c) is not None for r in rows))
    cohorts = tuple(dict.fromkeys((*options.cohorts, *_reader_cohorts(rows))))
    opts = ReadOptions(
        total="total_ms",
        stages={"ttft": "ttft_ms", "decode": "decode_ms"},
        request_id="request_id",
        error="error",
        timestamp="ts" if any(r.get("ts") is not None for r in rows) else None,
        shape=options.shape,
        cohorts=cohorts,
    )
    notes = list(found.notes)
    if failed:
        notes.append(
            f"{failed} requests failed without a latency{_reasons(found.failed)}: "
            "they count as errors, not in the latency percentiles"
        )
    notes.append(
        f"{fmt} benchmark: stages ttft and decode (= end to end - ttft); "
        "tpot_ms = (e2e - ttft) / (output_tokens - 1) as vLLM defines it"
    )
    log = canonicalize(
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
    return replace(log, rows=_with_failures(log.rows, found))


def _file_rows(path: str, fmt: str) -> BenchRows:
    if fmt == "vllm":
        return vllm_rows(load_json(path), path)
    if fmt == "llmperf":
        return llmperf_rows(load_json(path), path)
    if fmt == "aiperf":
        return aiperf_rows(path)
    if fmt == "guidellm":
        return guidellm_rows(load_json(path), path)
    from tailbudget.logs.sglang import sglang_rows

    return sglang_rows(path)


def _with_failures(counts: RowCounts, found: BenchRows) -> RowCounts:
    """Row counts with the requests that never reached the table: failed and skipped."""
    reasons = dict(counts.rejected_reasons)
    for key, n in sorted(found.skipped.items()):
        reasons[key] = reasons.get(key, 0) + n
    skipped = sum(found.skipped.values())
    failed = sum(found.failed.values())
    return RowCounts(
        total=counts.total + skipped + failed,
        used=counts.used,
        rejected=counts.rejected + skipped,
        rejected_reasons=reasons,
        failed=failed,
        failed_reasons=dict(sorted(found.failed.items())),
    )


def _reader_cohorts(rows: list[dict[str, Any]]) -> tuple[str, ...]:
    """`run` when one file holds several runs (a guidellm sweep, appended SGLang lines)."""
    return ("run",) if len({r.get("run") for r in rows} - {None}) > 1 else ()


def _reasons(counter: Any) -> str:
    if not counter:
        return ""
    return " (" + ", ".join(f"{k}: {v}" for k, v in sorted(counter.items())) + ")"


def vllm_rows(data: Any, path: str) -> BenchRows:
    """Per-request rows from a vLLM --save-result JSON object."""
    if not isinstance(data, dict):
        raise LogError(f"{path}: not a vLLM result (a JSON object); pass the right format")
    if "ttfts" not in data:
        if any(k in data for k in ("mean_ttft_ms", "median_ttft_ms", "completed")):
            raise LogError(
                f"{path}: a vLLM result without per-request data (aggregates only); re-run "
                "`vllm bench serve --save-result --save-detailed` and pass that file"
            )
        raise LogError(f"{path}: not a vLLM result (no 'ttfts' array); pass the right format")
    return per_request_arrays(data, path, "vLLM")


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


def llmperf_rows(data: Any, path: str) -> BenchRows:
    """Per-request rows from an LLMPerf individual-responses JSON list."""
    records = data.get("results") if isinstance(data, dict) else data
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise LogError(f"{path}: not an LLMPerf individual-responses list; pass the right format")
    found = BenchRows()
    for i, rec in enumerate(records):
        code = rec.get("error_code")
        message = str(rec.get("error_msg") or "").strip()
        failed = (code not in (None, "", 0, 200)) or bool(message)
        ttft = seconds(rec.get("ttft_s"))
        e2e = seconds(rec.get("end_to_end_latency_s"))
        if failed and (not isinstance(e2e, float) or e2e <= 0):
            found.failed[failure_reason(f"{code or ''} {message}".strip())] += 1
            continue
        row = derived_row(
            i, ttft, e2e, rec.get("number_input_tokens"), rec.get("number_output_tokens"), failed
        )
        itl = seconds(rec.get("inter_token_latency_s"))
        row["itl_mean_ms"] = itl * 1000.0 if isinstance(itl, float) else None
        found.rows.append(row)
    return found


def _length(data: dict[str, Any], key: str, path: str, tool: str) -> int:
    value = data.get(key)
    if not isinstance(value, list):
        raise LogError(f"{path}: {tool} field {key!r} should be a per-request array")
    return len(value)


def load_json(path: str) -> Any:
    """A JSON document, or LogError naming the file."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LogError(f"{path}: not valid JSON ({exc}); check the file") from exc
