"""Plan checks: headroom, gates, LLM slices, problems a person can act on."""

from __future__ import annotations

import pytest

from tailbudget.budget import load_budget, make_plan, parse_budget
from tests.conftest import EXAMPLES


def _split(headroom: float) -> str:
    return (
        (EXAMPLES / "seed-sla-split.yaml")
        .read_text()
        .replace("headroom: 0.0", f"headroom: {headroom}")
    )


def test_sla_split_fits_without_headroom():
    plan = make_plan(parse_budget(_split(0.0)), samples=20_000)
    assert plan.fits
    (check,) = plan.gates.checks
    assert check.additive_ms == pytest.approx(100)
    assert check.free_share == pytest.approx(0.0)


def test_sla_split_does_not_fit_with_ten_percent_headroom():
    plan = make_plan(parse_budget(_split(0.1)), samples=20_000)
    assert not plan.fits
    (problem,) = [p for p in plan.problems if p.severity == "error"]
    assert problem.percentile == "p99"
    assert problem.stage == "model"
    assert "10 ms over the 90 ms limit" in problem.message
    assert "largest slice is model at 40 ms" in problem.message


def test_llm_decode_trap_does_not_fit_six_seconds():
    plan = make_plan(load_budget(EXAMPLES / "seed-llm-decode.yaml"), samples=20_000)
    assert not plan.fits
    (row,) = plan.llm
    assert round(row.total_ms) == 55_695
    assert row.dominant == "decode"
    assert plan.additive["p99"] == pytest.approx(55_695.45, abs=0.01)


def test_llm_over_its_slice_names_the_fix():
    b = parse_budget(
        "slo: {p99: 100000}\npipeline:\n  - stage: llm\n"
        "    llm: {ttft_ms: 850, tokens_per_s: 22, output_tokens: 1200, tail_ms: 300}\n"
        "    budget: {p99: 4000}\n"
    )
    plan = make_plan(b, samples=5_000)
    (problem,) = plan.problems
    assert problem.stage == "llm" and "decode dominates" in problem.message
    assert "51,695 ms" in problem.message


def test_uat_gates_p95_and_p99():
    plan = make_plan(load_budget(EXAMPLES / "seed-rag.yaml"), samples=20_000)
    assert plan.gates.gated == ["p95", "p99"]
    assert [c.percentile for c in plan.gates.checks] == ["p95", "p99"]
    assert plan.fits


def test_composed_parallel_over_slo_is_a_warning_not_a_failure():
    b = parse_budget(
        "slo: {p99: 300}\npipeline:\n  - parallel:\n"
        + "".join(
            f"      - stage: s{i}\n        budget: {{p50: 100, p95: 200, p99: 300}}\n"
            for i in range(8)
        )
    )
    plan = make_plan(b, samples=50_000)
    assert plan.fits
    assert [p.severity for p in plan.problems] == ["warning"]


def test_json_contract_keys():
    plan = make_plan(load_budget(EXAMPLES / "seed-rag.yaml"), samples=10_000)
    data = plan.model_dump(mode="json")
    for key in ("fits", "slo", "stages", "additive", "composed", "llm", "gates", "problems"):
        assert key in data
    assert set(data["composed"]) >= {"p50", "p95", "p99", "method", "samples"}
    assert data["composed"]["samples"] == 10_000
