"""An LLM budget's rules on tailbudget's own metrics: each rule the export cannot express
is named with its own condition (`ttft.p95 > 450 ms`), never as "p99 > 450x baseline", and
argo-rollouts and flagger render instead of failing on goodput_vs_baseline (issue 36)."""

from __future__ import annotations

import pytest

import tailbudget as tb

LLM = """
service: chat
slo: {ttft: {p95: 500}, e2e: {p99: 9000}}
pipeline:
  - stage: llm
    budget: {p50: 1000, p95: 2000, p99: 3000}
    llm: {ttft_ms: 300, tokens_per_s: 30, output_tokens: 200}
"""


@pytest.mark.parametrize("target", ["prometheus-rules", "argo-rollouts", "flagger"])
def test_llm_rules_are_described_by_their_own_metric(target):
    text = tb.export(tb.parse_budget(LLM), to=target)
    assert "450x" not in text and "500x" not in text
    if target == "prometheus-rules":
        assert "(ttft.p95 > 450 ms) is not in this prometheus-rules export" in text
    assert f"(ttft.p99 > 1.2x baseline) is not in this {target} export" in text
    assert f"(goodput < 1x baseline) is not in this {target} export" in text


NESTED = """
service: shop
slo: {p99: 600}
pipeline:
  - stage: gateway
    budget: {p99: 60}
    calls:
      - stage: items
        budget: {p99: 100}
"""


def test_a_caller_gets_no_stage_alert_on_its_own_time():
    # Its slice is its own time; its histogram holds the call inside it (issue 36).
    text = tb.export(tb.parse_budget(NESTED), to="prometheus-rules")
    assert "TailbudgetStageOverBudgetGateway" not in text
    assert "TailbudgetStageOverBudgetItems" in text
    assert "stage 'gateway' has no over-budget alert" in text
