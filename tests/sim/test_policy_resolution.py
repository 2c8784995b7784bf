"""simulate and capacity resolve the budget policy as replay and serve do (issue 26)."""

from __future__ import annotations

import pytest

import tailbudget
from tailbudget.budget.load import parse_budget
from tailbudget.budget.objectives import parse_objectives
from tailbudget.budget.policy import policy_for, resolve_policy
from tests.conftest import SHARED_DATA

SLO = "ttft.p95=1000,tpot.p99=100,e2e.p99=60000"
BUDGET = """
slo: {e2e: {p99: 60000}, ttft: {p95: 1000}, tpot: {p99: 100}}
pipeline:
  - stage: ttft
    budget: {p95: 900}
  - stage: decode
    budget: {p99: 50000}
"""


def test_the_same_objectives_get_the_same_rules():
    by_slo = policy_for("default", parse_objectives(SLO))
    by_budget = resolve_policy(parse_budget(BUDGET, source="t"))
    assert by_slo.rules == by_budget.rules
    assert by_slo.source == by_budget.source == "default (LLM), scaled to ttft.p95 = 1000 ms"
    up = next(r for r in by_slo.rules if r.action == "scale_up")
    assert (up.metric, up.threshold) == ("ttft.p95", 900.0)


def test_simulate_runs_the_llm_default_on_ttft():
    grid = SHARED_DATA / "vllm_grid"
    if not grid.is_dir():
        pytest.skip(f"real data folder not found: {grid}")
    logs = [*grid.glob("*qps_01.json"), *grid.glob("*qps_04.json")]
    rep = tailbudget.simulate(logs, SLO, arrivals="burst:200", policy="budget")
    assert any(
        "default (LLM), scaled to ttft.p95 = 1000 ms, on each request's time to first token" in n
        for n in rep.notes
    ), rep.notes
    # The ttft.p95 rule reads each request's TTFT (the burst's is over 900 ms): it acts.
    assert [d.metric for d in rep.runs[0].decisions if d.action == "scale_up"][:1] == ["ttft.p95"]
    md = rep.to_markdown()
    assert "[[" not in md and "(9.352, 43.98), (48.98, 57.58)" in md


def test_a_budgets_llm_block_is_said_not_to_feed_the_model(tmp_path):
    grid = SHARED_DATA / "vllm_grid"
    if not grid.is_dir():
        pytest.skip(f"real data folder not found: {grid}")
    logs = [*grid.glob("*qps_01.json"), *grid.glob("*qps_04.json")]
    budget = tmp_path / "b.yaml"
    tailbudget.measure_budget(logs[0], SLO).save(budget)
    rep = tailbudget.simulate(logs, budget=budget, arrivals="burst:50", policy="fixed")
    said = "the budget's llm: block (decode) is not used here but for its prefix_hit_rate"
    assert any(said in n for n in rep.notes), rep.notes
    # The same objectives get the same policy as replay: the budget's, resolved once.
    assert any("default (LLM), scaled to ttft.p95 = 1000 ms" in n for n in rep.notes)
