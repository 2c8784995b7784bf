"""rebudget on the vLLM file (issue 26): a passing ttft.p95 keeps its slice, the e2e gap
says it is decode's long answers, and the tpot.p99 breach gets the audit's own fix with
the audit's figures."""

from __future__ import annotations

import pytest

import tailbudget
from tailbudget.budget.load import parse_budget
from tailbudget.budgeting.allocate import allocate
from tests.conftest import SHARED_DATA

VLLM = SHARED_DATA / "vllm_llama33-70b_tp8_sharegpt_qps_inf.json"

TWO = "slo: {p99: %s}\npipeline:\n  - stage: a\n    budget: {p99: 100}\n  - stage: b\n    budget: {p99: 100}\n"


def _alloc(slo: int, keep: frozenset[str]) -> dict[str, float]:
    budget = parse_budget(TWO % slo, source="t")
    old = {"a": {"p99": 100.0}, "b": {"p99": 100.0}}
    return allocate(budget, "p99", float(slo), old, {"a": 100.0, "b": 100.0}, keep).slices


def test_a_kept_stage_keeps_what_it_measures_while_the_others_can_take_the_cut():
    assert _alloc(150, frozenset()) == pytest.approx({"a": 75.0, "b": 75.0})
    assert _alloc(150, frozenset({"a"})) == pytest.approx({"a": 100.0, "b": 50.0})
    # The others cannot take it all: everyone is cut in proportion again.
    assert _alloc(80, frozenset({"a"})) == pytest.approx({"a": 40.0, "b": 40.0})


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    if not VLLM.is_file():
        pytest.skip(f"real data file not found: {VLLM}")
    path = tmp_path_factory.mktemp("vllm") / "b.yaml"
    tailbudget.measure_budget(VLLM, "ttft.p95=500,tpot.p99=60,e2e.p99=20000").save(path)
    return path


def test_the_passing_ttft_stage_is_not_cut_and_the_gap_is_decode(vllm):
    out = tailbudget.rebudget(vllm, VLLM)
    assert [c.stage for c in out.changes] == ["decode"]
    assert "ttft (ttft.p95 passes) keeps what it measures" in out.changes[0].reason
    (gap,) = out.gaps
    assert gap.objective == "e2e.p99" and gap.stage == "decode" and gap.share > 0.95
    assert "long answers, not slow tokens" in gap.says
    assert not any(o.fix == "speed_up_stage" and o.stages == ("ttft",) for o in out.options)


def test_a_cut_passing_stage_says_so(vllm, tmp_path):
    tight = tmp_path / "tight.yaml"
    tight.write_text(vllm.read_text().replace("e2e: {p99: 20000}", "e2e: {p99: 300}"))
    out = tailbudget.rebudget(tight, VLLM)
    ttft = next(c for c in out.changes if c.stage == "ttft")
    assert "although ttft.p95 passes: the other stages cannot absorb the cut" in ttft.reason


def test_the_tpot_breach_gets_the_audits_fix_and_figures(vllm):
    out = tailbudget.rebudget(vllm, VLLM)
    audit = tailbudget.audit(VLLM, budget=vllm)
    ranked = [f for f in audit.ranking if f.objective == "tpot.p99"]
    assert ranked and list(out.objective_options) == ranked
    fix = out.objective_options[0]
    assert fix.fix == "limit_decode_batch"
    assert round(fix.objective_before_ms) == 76 and round(fix.objective_after_ms) == 39
    assert "limit_decode_batch on decode: tpot.p99 76 -> 39 ms" in out.to_text()
    assert out.json_data()["objective_options"][0]["objective_after_ms"] == pytest.approx(
        fix.objective_after_ms
    )
