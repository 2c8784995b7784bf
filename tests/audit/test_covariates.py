"""Telling an output length (generated tokens) from an input size by the covariate's name,
including the names tailbudget's own LLM readers and recorder write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailbudget.audit.covariates import is_output_length, normalize, output_tokens_column
from tailbudget.logs import read_log
from tailbudget.measure.record import STREAM_COLUMNS

OUTPUT = [
    "output_tokens",
    "output_len",
    "output_lens",  # vLLM's raw array name
    "output_length",
    "completion_tokens",  # OpenAI usage
    "num_output_tokens",
    "number_output_tokens",  # LLMPerf's raw field
    "n_output_tokens",
    "output_token_count",
    "generated_tokens",
    "num_generated_tokens",
    "gen_tokens",
    "new_tokens",
    "max_new_tokens",
    "max_tokens",
    "decode_tokens",
    "response_tokens",
    "tokens_out",
    "gen_ai.usage.output_tokens",  # OpenTelemetry GenAI
    "gen_ai_usage_completion_tokens",
    "outputTokens",
    "CompletionTokens",
    "OUTPUT_TOKENS",
]
INPUT = [
    "input_tokens",
    "input_len",
    "prompt_tokens",
    "number_input_tokens",
    "seq_len",
    "context_tokens",
    "query_tokens",
    "total_tokens",
    "cached_tokens",
    "tokens",
    "batch_size",
    "top_k",
    "shards",
    "payload_bytes",
    "response_len",  # a response length need not be tokens generated
    "tokens_per_s",
    "output_tokens_per_s",  # a rate, not a count
    "throughput",
    "gen_ai.usage.input_tokens",
    "promptTokens",
]


@pytest.mark.parametrize("name", OUTPUT)
def test_output_lengths(name: str) -> None:
    assert is_output_length(name)


@pytest.mark.parametrize("name", INPUT)
def test_input_sizes(name: str) -> None:
    assert not is_output_length(name)


def test_normalize() -> None:
    assert normalize("gen_ai.usage.outputTokens") == "gen_ai_usage_output_tokens"
    assert normalize("  Output-Len ") == "output_len"


def test_output_tokens_column_skips_caps_and_rates() -> None:
    assert output_tokens_column(["max_tokens", "tokens_per_s", "completion_tokens"]) == (
        "completion_tokens"
    )
    assert output_tokens_column(["input_tokens", "max_new_tokens"]) is None
    assert output_tokens_column([]) is None


def test_recorder_stream_columns() -> None:
    assert [c for c in STREAM_COLUMNS if is_output_length(c)] == ["output_tokens"]


def test_llm_reader_columns(tmp_path: Path) -> None:
    vllm = {
        "ttfts": [0.2, 0.1],
        "itls": [[0.05, 0.05], [0.1]],
        "input_lens": [10, 20],
        "output_lens": [3, 2],
        "errors": ["", ""],
    }
    perf = [
        {
            "ttft_s": 0.1,
            "end_to_end_latency_s": 1.1,
            "number_input_tokens": 5,
            "number_output_tokens": 11,
            "inter_token_latency_s": 0.1,
            "error_code": None,
        }
    ]
    (tmp_path / "vllm.json").write_text(json.dumps(vllm))
    (tmp_path / "llmperf.json").write_text(json.dumps(perf))
    for name, fmt in (("vllm.json", "vllm"), ("llmperf.json", "llmperf")):
        log = read_log(str(tmp_path / name))
        assert log.format == fmt
        outputs = [c for c in log.shape if is_output_length(c)]
        inputs = [c for c in log.shape if not is_output_length(c)]
        assert len(outputs) == 1 and len(inputs) == 1, log.shape
        assert output_tokens_column(log.table.columns) == outputs[0]
