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
from tailbudget.logs.bench_arrays import per_request_arrays
from tailbudget.logs.bench_rows import (
    DECODE_BATCH,
    BenchRows,
    derived_row,
    failure_reason,
    seconds,
    to_arrow,
    with_decode_batch,
)
from tailbudget.logs.canonical import canonicalize
from tailbudget.logs.engine import arrow_table
from tailbudget.logs.guidellm import guidellm_rows
from tailbudget.logs.options import ReadOptions
from tailbudget.logs.sglang import sglang_rows
from tailbudget.logs.table import LogTable, RowCounts

__all__ = ["BENCH_FORMATS", "llmperf_rows", "read_llm_bench", "vllm_rows"]

BENCH_FORMATS = ("vllm", "llmperf", "aiperf", "guidellm", "sglang")
_EXTRAS = (DECODE_BATCH, "tpot_ms", "itl_ms", "itl_p50_ms", "itl_p95_ms", "itl_mean_ms")


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


def load_json(path: str) -> Any:
    """A JSON document, or LogError naming the file."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LogError(f"{path}: not valid JSON ({exc}); check the file") from exc
