"""The proposed budget keeps an llm: block in the form its file states (issue 26)."""

from __future__ import annotations

import yaml

from tailbudget.budget.load import parse_budget
from tailbudget.budgeting.proposal import budget_yaml

DISTRIBUTIONS = """
slo: {e2e: {p99: 20000}, ttft: {p95: 500}}
pipeline:
  - stage: ttft
    budget: {p50: 350, p95: 448, p99: 450}
  - stage: decode
    budget: {p50: 5656, p95: 18826, p99: 23162}
    llm: {ttft: {p50: 349.9, p95: 448.3}, tpot: {p50: 36.98, p99: 75.77}, output_tokens: {p50: 152.5, p99: 770}}
"""


def _llm(text: str) -> dict:
    return yaml.safe_load(text)["pipeline"][1]["llm"]


def test_a_distribution_block_is_written_back_as_distributions():
    text = budget_yaml(parse_budget(DISTRIBUTIONS, source="t"))
    llm = _llm(text)
    assert "ttft_ms" not in llm and "tokens_per_s" not in llm  # derived medians, not written
    assert list(llm) == ["ttft", "tpot", "output_tokens"]  # init's order
    assert llm == _llm(DISTRIBUTIONS)
    # One flow mapping per line, as init writes it.
    assert "    tpot: {p50: 36.98, p99: 75.77}\n" in text
    assert parse_budget(text, source="t") == parse_budget(DISTRIBUTIONS, source="t")


def test_stated_medians_are_kept():
    single = DISTRIBUTIONS.replace(
        "llm: {ttft: {p50: 349.9, p95: 448.3}, tpot: {p50: 36.98, p99: 75.77}, ",
        "llm: {ttft_ms: 300, tokens_per_s: 20, ttft: {p50: 349.9}, tpot: {p50: 36.98}, ",
    )
    llm = _llm(budget_yaml(parse_budget(single, source="t")))
    assert llm["ttft_ms"] == 300 and llm["tokens_per_s"] == 20
