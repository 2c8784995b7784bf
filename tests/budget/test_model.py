from __future__ import annotations

import pytest

from tailbudget import BudgetError, parse_budget
from tailbudget.budget import load_budget

BASE = """
service: s
slo: {p99: 1000}
pipeline:
  - stage: a
    budget: {p50: 10, p95: 20, p99: 40}
  - parallel:
      - stage: b
        budget: {p99: 100}
      - sequence:
          - stage: c
            budget: {p99: 30}
          - stage: d
            budget: {p99: 30}
  - stage: e
    budget: {p95: x}
"""


def test_error_names_the_field_path_and_the_fix():
    with pytest.raises(BudgetError) as exc:
        parse_budget(BASE, source="b.yaml")
    assert str(exc.value) == (
        "b.yaml: pipeline[2].budget.p95: must be a positive number of milliseconds, got 'x'"
    )


def test_nested_groups_and_paths():
    b = parse_budget(BASE.replace("{p95: x}", "{p95: 5}"))
    paths = {s.name: p for p, s in b.stages()}
    assert paths == {
        "a": "pipeline[0]",
        "b": "pipeline[1].parallel[0]",
        "c": "pipeline[1].parallel[1].sequence[0]",
        "d": "pipeline[1].parallel[1].sequence[1]",
        "e": "pipeline[2]",
    }


def test_bare_list_inside_parallel_is_a_sequence():
    b = parse_budget(
        "slo: {p99: 100}\npipeline:\n  - parallel:\n      - [{stage: x, budget: {p99: 5}},"
        " {stage: y, budget: {p99: 5}}]\n      - {stage: z, budget: {p99: 5}}\n"
    )
    assert [s.name for _, s in b.stages()] == ["x", "y", "z"]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("slo: {p99: 100}\npipeline: []", "pipeline: List should have at least 1 item"),
        ("pipeline: [{stage: a, budget: {p99: 1}}]", "slo: is required"),
        ("slo: {p99: -5}\npipeline: [{stage: a, budget: {p99: 1}}]", "slo.p99: must be a positive"),
        ("slo: {p99: 100}\npipeline: [{stage: a}]", "needs a budget"),
        ("slo: {p99: 100}\npipeline: [{stag: a}]", "pipeline[0]: each entry needs a `stage:`"),
        (
            "slo: {p99: 100}\npipeline: [{stage: a, budget: {p99: 1}, bugdet: 1}]",
            "pipeline[0].bugdet: unknown key",
        ),
        (
            "environment: prd\nslo: {p95: 100}\npipeline: [{stage: a, budget: {p99: 1}}]",
            "add slo.p99",
        ),
        (
            "slo: {p99: 100}\npipeline: [{stage: a, budget: {p50: 9, p99: 3}}]",
            "p99 (3 ms) is below p50",
        ),
        ("slo: {p99: 100}\nheadroom: 1.5\npipeline: [{stage: a, budget: {p99: 1}}]", "headroom"),
        (
            "slo: {p99: 100}\nenvironment: prod\npipeline: [{stage: a, budget: {p99: 1}}]",
            "environment",
        ),
        (
            "slo: {p99: 100}\npipeline: [{stage: a, budget: {p99: 1}}, {stage: a, budget: {p99: 1}}]",
            "appears twice",
        ),
        ("slo: [1, 2", "not valid YAML at line"),
        ("- just a list", "must be a mapping"),
        ("", "got empty"),
        (
            "slo: {p99: 100}\npipeline: [{stage: l, llm: {ttft_ms: 1, tokens_per_s: 0, output_tokens: 3}}]",
            "pipeline[0].llm.tokens_per_s",
        ),
    ],
)
def test_bad_budgets_give_one_line_errors(text, fragment):
    with pytest.raises(BudgetError) as exc:
        parse_budget(text, source="f.yaml")
    msg = str(exc.value)
    assert "\n" not in msg
    assert fragment in msg


def test_missing_file(tmp_path):
    with pytest.raises(BudgetError, match="budget file not found"):
        load_budget(tmp_path / "nope.yaml")


def test_llm_spec_figures():
    b = parse_budget(
        "slo: {p99: 6000}\npipeline:\n  - stage: llm\n"
        "    llm: {ttft_ms: 850, tokens_per_s: 22, output_tokens: 1200, tail_ms: 300}\n"
    )
    spec = b.stage("llm").llm
    assert spec.decode_ms == pytest.approx(1200 / 22 * 1000)
    assert round(spec.total_ms) == 55_695
    assert spec.dominant == "decode"


def test_gates_per_environment():
    text = "environment: {env}\nslo: {{p50: 1, p95: 2, p99: 3}}\npipeline: [{{stage: a, budget: {{p99: 1}}}}]"
    gated = {env: parse_budget(text.format(env=env)).gated for env in ("dev", "qa", "uat", "prd")}
    assert gated == {"dev": ("p50",), "qa": ("p95",), "uat": ("p95", "p99"), "prd": ("p99",)}
