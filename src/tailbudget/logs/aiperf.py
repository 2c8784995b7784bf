"""AIPerf (and GenAI-Perf's successor format) `profile_export.jsonl`: one request a line.

Each line: `metadata` (`timestamp_ns` epoch ns, `x_request_id`, `worker_id`, kept as
the `worker_id` column) and `metrics`,
each metric `{value, unit}` (`ttft`, `request_latency`, `inter_chunk_latency`
as a list, `input_sequence_length`, `output_sequence_length`), and `error`
({code, type, message}) for a failed request, which has no latency when it
was cancelled (code 499). Units are read from each metric, not assumed.
"""

from __future__ import annotations

import json
from typing import Any

from tailbudget.errors import LogError
from tailbudget.logs.bench_rows import (
    BenchRows,
    as_dict,
    derived_row,
    epoch_us,
    failure_reason,
    is_number,
    number,
    text_lines,
    with_itls,
)

__all__ = ["WORKER", "aiperf_rows"]

WORKER = "worker_id"
"""The column holding each request's AIPerf worker (`metadata.worker_id`): a natural class
for `--class-by worker_id`."""

_TO_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}


def aiperf_rows(path: str) -> BenchRows:
    """Per-request rows from an AIPerf profile_export.jsonl file."""
    found = BenchRows()
    records = 0
    for line_no, line in text_lines(path):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            found.skipped["bad_json_line"] += 1
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("metrics"), dict):
            found.skipped["not_a_request_record"] += 1
            continue
        records += 1
        _record(rec, line_no, found)
    if records == 0:
        raise LogError(
            f"{path}: no AIPerf request record (lines with 'metadata' and 'metrics'); "
            "pass the profile_export.jsonl from the AIPerf artifacts folder"
        )
    return found


def _record(rec: dict[str, Any], line_no: int, found: BenchRows) -> None:
    meta = as_dict(rec.get("metadata"))
    metrics = rec["metrics"]
    rid = meta.get("x_request_id") or f"line{line_no}"
    err = rec.get("error")
    failed = bool(err)
    ttft = _seconds(metrics.get("ttft"))
    e2e = _seconds(metrics.get("request_latency"))
    if failed and not (isinstance(e2e, float) and e2e > 0):
        found.failed[_reason(err)] += 1
        return
    out = _value(metrics.get("output_sequence_length"))
    if out is None:
        out = _value(metrics.get("output_token_count"))
    row = derived_row(rid, ttft, e2e, _value(metrics.get("input_sequence_length")), out, failed)
    start = number(meta.get("timestamp_ns"))
    if start is not None:
        row["ts"] = epoch_us(start / 1e9)
    worker = meta.get("worker_id")
    if isinstance(worker, (str, int)) and not isinstance(worker, bool) and str(worker):
        row[WORKER] = str(worker)  # the worker that sent it: a natural class (--class-by)
    found.rows.append(with_itls(row, _gaps_ms(metrics.get("inter_chunk_latency"))))


def _reason(err: object) -> str:
    if isinstance(err, dict):
        code, kind = err.get("code"), err.get("type")
        text = " ".join(str(p) for p in (code, kind) if p not in (None, ""))
        return failure_reason(text or err.get("message"))
    return failure_reason(err)


def _value(metric: object) -> object:
    return metric.get("value") if isinstance(metric, dict) else metric


def _seconds(metric: object) -> float | str | None:
    """A metric in seconds (its own unit; ms when it has none), text when not a number."""
    value = _value(metric)
    if value is None:
        return None
    if not is_number(value):
        return str(value)
    unit = metric.get("unit", "ms") if isinstance(metric, dict) else "ms"
    factor = _TO_SECONDS.get(str(unit).lower())
    if factor is None:
        return f"{value} {unit}"  # an unknown unit is rejected as non-numeric, not guessed
    return float(value) * factor


def _gaps_ms(metric: object) -> list[float] | None:
    values = _value(metric)
    if not isinstance(values, list):
        return None
    unit = metric.get("unit", "ms") if isinstance(metric, dict) else "ms"
    factor = _TO_SECONDS.get(str(unit).lower(), 1e-3) * 1000.0
    return [float(v) * factor for v in values if is_number(v)]
