"""OpenSLO export and `tailbudget import openslo`: the round trip keeps the SLO."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tailbudget.budget import Budget, parse_budget
from tailbudget.errors import BudgetError
from tailbudget.export import openslo


def _round_trip(budget: Budget) -> Budget:
    return parse_budget(openslo.import_openslo(openslo.render(budget)))


def test_round_trip_of_every_template(template_budget: Budget) -> None:
    back = _round_trip(template_budget)
    assert back.slo == template_budget.slo
    assert back.service == template_budget.service
    assert back.environment == template_budget.environment
    assert back.gated == template_budget.gated


def test_one_document_per_percentile_and_one_for_errors(rag: Budget) -> None:
    docs = openslo.build(rag)
    assert [d["metadata"]["annotations"]["tailbudget.dev/objective"] for d in docs] == [
        "p50",
        "p95",
        "p99",
        "error_rate",
    ]
    p99 = docs[2]
    assert p99["apiVersion"] == "openslo/v1" and p99["kind"] == "SLO"
    assert p99["metadata"]["labels"] == {"gated": "true"}  # prd gates p99
    assert docs[0]["metadata"]["labels"] == {"gated": "false"}
    assert p99["spec"]["objectives"] == [{"displayName": "p99 <= 5200 ms", "target": 0.99}]
    ratio = p99["spec"]["indicator"]["spec"]["ratioMetric"]
    assert 'le="5.2"' in ratio["good"]["metricSource"]["spec"]["query"]
    assert "_count" in ratio["total"]["metricSource"]["spec"]["query"]
    assert docs[3]["spec"]["objectives"][0]["target"] == 0.99  # 1 - 1% errors


SLOS = (
    st.lists(st.integers(1, 600_000), min_size=3, max_size=3)
    .map(sorted)
    .flatmap(
        lambda ms: st.fixed_dictionaries(
            {
                "p50": st.just(ms[0] / 10),
                "p95": st.just(ms[1] / 10),
                "p99": st.just(ms[2] / 10),
                "error_rate": st.none() | st.integers(1, 9999).map(lambda x: x / 10_000),
            }
        )
    )
)


@settings(max_examples=40, deadline=None)
@given(
    slo=SLOS,
    keep=st.sets(st.sampled_from(["p50", "p95", "p99"]), min_size=1),
    environment=st.sampled_from(["dev", "qa", "uat", "prd"]),
    service=st.from_regex(r"[A-Za-z][A-Za-z0-9_.-]{0,30}", fullmatch=True)
    | st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=20),
)
def test_round_trip_keeps_any_slo(
    slo: dict[str, Any], keep: set[str], environment: str, service: str
) -> None:
    gates = {"dev": {"p50"}, "qa": {"p95"}, "uat": {"p95", "p99"}, "prd": {"p99"}}
    chosen = {k: v for k, v in slo.items() if k in keep | gates[environment] or k == "error_rate"}
    if chosen["error_rate"] is None:
        del chosen["error_rate"]
    budget = parse_budget(
        {
            "service": service,
            "environment": environment,
            "slo": chosen,
            "pipeline": [{"stage": "a", "budget": {"p99": 1.0}}],
        }
    )
    back = _round_trip(budget)
    assert back.slo == budget.slo
    assert (back.service, back.environment) == (budget.service, budget.environment)


FOREIGN = """
apiVersion: openslo/v1
kind: SLO
metadata:
  name: search-latency
spec:
  service: web-shop
  indicator:
    metadata: {name: search-latency}
    spec:
      ratioMetric:
        counter: true
        good:
          metricSource:
            type: Prometheus
            spec: {query: 'sum(rate(http_seconds_bucket{le="0.5"}[5m]))'}
        total:
          metricSource:
            type: Prometheus
            spec: {query: 'sum(rate(http_seconds_count[5m]))'}
  timeWindow: [{duration: 2w, isRolling: true}]
  budgetingMethod: Occurrences
  objectives: [{displayName: fast searches, target: 0.95}]
"""


def test_import_reads_a_foreign_document_from_its_target_and_bucket() -> None:
    budget = parse_budget(openslo.import_openslo(FOREIGN))
    assert budget.service == "web-shop"
    assert budget.slo.p95 == 500.0 and budget.slo.p99 is None
    assert budget.environment == "qa"  # p95 alone gates in qa


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: Service\napiVersion: openslo/v1\n", "no OpenSLO document of kind SLO"),
        ("a: [1,\n", "not valid YAML"),
        (FOREIGN.replace("target: 0.95", "target: 0.9"), "not p50, p95 or p99"),
        (FOREIGN.replace("le=", "quantile="), "no latency SLO found"),
        (FOREIGN.replace("target: 0.95", "target: high"), "target must be a number"),
        (FOREIGN.replace('le="0.5"', 'le="fast"'), "le bound must be a number"),
        (FOREIGN.replace("openslo/v1", "openslo/v1alpha"), "apiVersion must be openslo/v1"),
        (FOREIGN + "---\n" + FOREIGN.replace("web-shop", "other"), "import one service"),
    ],
)
def test_import_errors_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(BudgetError, match=message):
        openslo.import_openslo(text, source="slo.yaml")


def test_the_starter_budget_is_commented_yaml_that_plans(rag: Budget) -> None:
    from tailbudget.budget import make_plan

    text = openslo.import_openslo(openslo.render(rag))
    assert text.startswith("# tailbudget budget file")
    budget = parse_budget(text)
    assert [s.name for _, s in budget.stages()] == ["app"]
    assert make_plan(budget, samples=2000).fits
    assert yaml.safe_load(text)["policy"] == "default"


JSON = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    spec=st.dictionaries(
        st.sampled_from(["service", "objectives", "indicator", "description"]), JSON, max_size=4
    ),
    metadata=JSON | st.dictionaries(st.sampled_from(["annotations", "labels", "name"]), JSON),
)
def test_import_never_fails_with_anything_but_a_budget_error(spec: Any, metadata: Any) -> None:
    doc = {"apiVersion": "openslo/v1", "kind": "SLO", "metadata": metadata, "spec": spec}
    try:
        text = openslo.import_openslo(yaml.safe_dump(doc))
    except BudgetError as exc:
        assert "\n" not in str(exc)
    else:
        parse_budget(text)


def test_objectives_tailbudgets_metrics_cannot_carry_are_named_not_dropped() -> None:
    # A budget with ttft, tpot and goodput objectives exported one e2e SLO and said
    # nothing of the rest (prometheus-rules names each rule it leaves out).
    budget = parse_budget(
        "service: chat\nslo:\n  e2e: {p99: 20000}\n  ttft: {p95: 500}\n  tpot: {p99: 60}\n"
        "  goodput: {min: 0.9}\npipeline:\n  - stage: llm\n    budget: {p99: 20000}\n"
    )
    text = openslo.render(budget)
    assert len(openslo.build(budget)) == 1
    (note,) = [line for line in text.splitlines() if "not exported" in line]
    assert "ttft.p95, tpot.p99, goodput: not exported" in note
    assert "vllm and sglang carry ttft, tpot and itl" in note
    # The round trip still reads the exported SLO back.
    assert _round_trip(budget).objectives.e2e() == {"p99": 20000.0}
