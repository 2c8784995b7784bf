"""Which LLM benchmark tool wrote a JSON file, from its first bytes and its name.

Files that hold only aggregates (an SGLang summary line, GenAI-Perf's
`*_genai_perf.json`, AIPerf's `*_aiperf.json`) are sniffed as `aggregate`
and refused: read as a table, a run's `duration` in seconds would pass for a
request's latency in ms. The refusal names the per-request file to pass.
"""

from __future__ import annotations

import os
from typing import NoReturn

from tailbudget.errors import LogError

__all__ = ["refuse_aggregate", "sniff_bench"]

_SGLANG = (b'"mean_e2e_latency_ms"', b'"total_output_tokens_retokenized"', b'"sharegpt_output_len"')
_VLLM_SUMMARY = (b'"mean_ttft_ms"', b'"median_ttft_ms"', b'"mean_e2el_ms"')
_AGG_NAMES = ("_genai_perf.json", "_aiperf.json")
_AGG_METRICS = (b'"request_latency"', b'"time_to_first_token"', b'"ttft"')


def sniff_bench(head: bytes, path: str) -> str | None:
    """vllm | llmperf | aiperf | guidellm | sglang | aggregate, or None for other JSON."""
    if os.path.basename(path).lower().endswith(_AGG_NAMES) or _aiperf_aggregate(head):
        return "aggregate"
    if any(m in head for m in _SGLANG):
        return "sglang"
    if b'"ttfts"' in head or (b'"input_lens"' in head and b'"output_lens"' in head):
        return "vllm"
    if b'"metrics"' in head and (b'"timestamp_ns"' in head or b'"x_request_id"' in head):
        return "aiperf"
    if b'"benchmarks"' in head and (b'"scheduler_metrics"' in head or b'"request_totals"' in head):
        return "guidellm"
    if b'"end_to_end_latency_s"' in head or b'"ttft_s"' in head:
        return "llmperf"
    if any(m in head for m in _VLLM_SUMMARY):
        return "vllm"  # a summary without arrays: the vLLM reader refuses it, saying why
    return None


def _aiperf_aggregate(head: bytes) -> bool:
    """GenAI-Perf/AIPerf statistics: metric objects with avg/p99, no per-request metadata."""
    stats = b'"avg"' in head and b'"p99"' in head
    return stats and any(m in head for m in _AGG_METRICS) and b'"timestamp_ns"' not in head


def refuse_aggregate(path: str) -> NoReturn:
    """Raise the one-line refusal for an aggregates-only benchmark file."""
    raise LogError(
        f"{path}: GenAI-Perf/AIPerf statistics (aggregates only, no per-request data); "
        "pass the profile_export.jsonl from the same artifacts folder instead"
    )
