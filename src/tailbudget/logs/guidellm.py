"""guidellm `benchmarks.json`: per-request stats under each benchmark's `requests`.

A report holds `benchmarks[]`, one per load level of a run (a sweep has
several); each has `requests.successful`, `requests.errored` and
`requests.incomplete`, lists of request stats with `info.timings` (epoch
seconds: `request_start`, `first_token_iteration`, `request_end`, ...),
`info.status`/`info.error`, and computed `request_latency` (s),
`time_to_first_token_ms`, `inter_token_latency_ms`, `prompt_tokens`,
`output_tokens`. guidellm keeps no per-token gaps, so only each request's
mean inter-token latency is known. With `--sample-requests` the lists hold a
sample; `metrics.request_totals` says how many ran.
"""

from __future__ import annotations

from typing import Any

from tailbudget.errors import LogError
from tailbudget.logs.bench_rows import (
    BenchRows,
    as_dict,
    derived_row,
    epoch_us,
    failure_reason,
    number,
    seconds,
)

__all__ = ["guidellm_rows"]

_GROUPS = ("successful", "errored", "incomplete")


def guidellm_rows(data: Any, path: str) -> BenchRows:
    """Per-request rows from a guidellm benchmarks.json report."""
    benchmarks = data.get("benchmarks") if isinstance(data, dict) else None
    if not isinstance(benchmarks, list) or not benchmarks:
        raise LogError(
            f"{path}: not a guidellm report (no 'benchmarks' list); pass benchmarks.json"
        )
    found = BenchRows()
    held = 0
    for k, bench in enumerate(benchmarks):
        if not isinstance(bench, dict):
            raise LogError(f"{path}: guidellm benchmark {k} is not an object; the file is damaged")
        requests = bench.get("requests")
        lists = {g: requests.get(g) for g in _GROUPS} if isinstance(requests, dict) else {}
        part = BenchRows()
        for group in _GROUPS:
            for j, rec in enumerate(lists.get(group) or []):
                _request(rec, group, f"{k}:{group}:{j}", part)
        held += sum(len(v) for v in lists.values() if isinstance(v, list))
        if len(benchmarks) > 1:
            for row in part.rows:
                row["run"] = _run_label(k, bench)
        found.extend(part, "")
        _sample_note(bench, lists, k, found)
    if held == 0:
        raise LogError(
            f"{path}: a guidellm report without per-request data (its requests lists are "
            "empty); re-run guidellm keeping request stats (no sample size of 0) and pass "
            "its benchmarks.json"
        )
    return found


def _request(rec: Any, group: str, fallback_id: str, found: BenchRows) -> None:
    if not isinstance(rec, dict):
        found.skipped["not_a_request_record"] += 1
        return
    info = as_dict(rec.get("info"))
    timings = as_dict(info.get("timings"))
    start = number(timings.get("request_start"))
    if group == "incomplete":
        # Still running when the benchmark stopped: no end, and not the server's failure.
        found.skipped["incomplete"] += 1
        return
    failed = group == "errored"
    e2e = seconds(rec.get("request_latency"))
    end = number(timings.get("request_end"))
    if e2e is None and start is not None and end is not None:
        e2e = end - start
    if failed and not (isinstance(e2e, float) and e2e > 0):
        found.failed[failure_reason(info.get("error"), "errored", last_line=False)] += 1
        return
    ttft = _ttft(rec, timings, start)
    rid = rec.get("request_id") or info.get("request_id") or fallback_id
    row = derived_row(
        rid, ttft, e2e, _tokens(rec, "prompt_tokens"), _tokens(rec, "output_tokens"), failed
    )
    row["itl_mean_ms"] = number(rec.get("inter_token_latency_ms"))
    if start is not None:
        row["ts"] = epoch_us(start)
    found.rows.append(row)


def _ttft(rec: dict[str, Any], timings: dict[str, Any], start: float | None) -> float | str | None:
    ms = rec.get("time_to_first_token_ms")
    ms_value = number(ms)
    if ms_value is not None:
        return ms_value / 1000.0
    first = number(timings.get("first_token_iteration"))
    if first is not None and start is not None:
        return first - start
    return seconds(ms)


def _tokens(rec: dict[str, Any], key: str) -> object:
    value = rec.get(key)
    if value is None:
        usage = rec.get("input_metrics" if key == "prompt_tokens" else "output_metrics")
        value = usage.get("total_tokens") if isinstance(usage, dict) else None
    return value


def _run_label(k: int, bench: dict[str, Any]) -> str:
    strategy = as_dict(bench.get("config")).get("strategy")
    if isinstance(strategy, dict):
        kind = strategy.get("type_") or strategy.get("type") or ""
        rate = strategy.get("rate") or strategy.get("streams") or ""
        return f"{k}:{kind}{'@' + str(rate) if rate != '' else ''}"
    return str(k)


def _sample_note(bench: dict[str, Any], lists: dict[str, Any], k: int, found: BenchRows) -> None:
    totals = as_dict(as_dict(bench.get("metrics")).get("request_totals"))
    ran = sum(int(number(totals.get(g)) or 0) for g in _GROUPS)
    held = sum(len(v) for v in lists.values() if isinstance(v, list))
    if ran > held:
        found.notes.append(
            f"guidellm benchmark {k} holds a sample of {held} of its {ran} requests "
            "(--sample-requests): percentiles are of the sample"
        )
