"""The budget file's `classes:` block, `--slo CLASS:OBJECTIVE` and `class_by`: shapes,
gating and one-line errors."""

from __future__ import annotations

import pytest

import tailbudget as tb
from tailbudget.budget import parse_budget
from tailbudget.budget.classes import split_class_slo
from tailbudget.demo.tiers import BUDGET
from tailbudget.errors import BudgetError, TailbudgetError

HEAD = BUDGET.split("classes:")[0]


def test_design_shape_reads_with_objectives_beside_slo() -> None:
    text = HEAD + (
        "classes:\n  by: tier\n"
        "  premium:  {slo: {p95: 800}, ttft: {p95: 300}, priority: 0}\n"
        "  standard: {slo: {p99: 1500}, priority: 1}\n"
        "  batch:    {priority: 2, skip: [rerank]}\n"
    )
    cs = parse_budget(text).class_set
    assert cs is not None and cs.by == "tier"
    premium = cs.get("premium")
    assert premium is not None and premium.objectives is not None
    assert [o.key for o in premium.objectives] == ["e2e.p95", "ttft.p95"]
    batch = cs.get("batch")
    assert batch is not None and batch.objectives is None and batch.skip == ("rerank",)
    assert cs.shed_order() == ("batch", "standard", "premium")
    service = parse_budget(text).objectives
    assert cs.objectives_of("batch", service) is service  # no objectives: the service's
    assert cs.objectives_of("unlisted", service) is service


def test_environment_gates_class_objectives() -> None:
    text = HEAD.replace("service:", "environment: prd\nservice:") + (
        "classes: {by: tier, premium: {slo: {p95: 800, p99: 1200}}}\n"
    )
    premium = parse_budget(text).class_set.get("premium")  # type: ignore[union-attr]
    assert {o.percentile: o.gated for o in premium.objectives} == {"p95": False, "p99": True}


@pytest.mark.parametrize(
    ("block", "says"),
    [
        ("classes: {by: tier}", "lists no class"),
        ("classes: {tier: {priority: 1}}", "classes.by: is required"),
        ("classes: {by: tier, other: {priority: 1}}", "'other' is reserved"),
        ("classes: {by: tier, 'a b': {priority: 1}}", "class name 'a b'"),
        ("classes: {by: tier, p: {slo: {p95: 800}, p95: 700}}", "given both"),
        ("classes: {by: tier, p: {prio: 1}}", "classes.p.prio: unknown key"),
        ("classes: {by: tier, p: {priority: -1}}", "classes.p.priority"),
        ("classes: {by: tier, p: {skip: [nope]}}", "'nope' is not a stage"),
        ("classes: {by: tier, p: {slo: {p95: -3}}}", "classes.p.slo.p95"),
    ],
)
def test_bad_classes_are_one_line_errors(block: str, says: str) -> None:
    with pytest.raises(BudgetError) as exc:
        parse_budget(HEAD + block + "\n")
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_split_class_slo() -> None:
    service, per = split_class_slo("p99=1500,premium:p95=800,premium:ttft.p95=300,batch:p99=6000")
    assert service == "p99=1500"
    assert [o.key for o in per["premium"]] == ["e2e.p95", "ttft.p95"]
    assert [o.key for o in per["batch"]] == ["e2e.p99"]
    for bad, says in (("x y:p95=1", "not a class name"), ("other:p95=1", "reserved")):
        with pytest.raises(TailbudgetError, match=says):
            split_class_slo(bad)
    with pytest.raises(TailbudgetError, match="class premium"):
        split_class_slo("p99=1,premium:p95=abc")


def test_class_slo_needs_a_column_and_a_service_objective() -> None:
    import pandas as pd

    df = pd.DataFrame({"total_ms": [1.0, 2.0], "tier": ["a", "b"]})
    with pytest.raises(TailbudgetError) as exc:
        tb.audit(df, "p99=10,premium:p95=5")
    assert exc.value.param == "class_by"
    with pytest.raises(TailbudgetError) as exc:
        tb.audit(df, "premium:p95=5", class_by="tier")
    assert exc.value.param == "slo" and "service-wide" in str(exc.value)
    with pytest.raises(TailbudgetError) as exc:
        tb.audit(df, "p99=10", class_by="nope")
    assert exc.value.param == "class_by" and "'nope'" in str(exc.value)


def test_split_class_slo_reads_a_mapping_as_its_string() -> None:
    text = "p99=1500,premium:p95=800,premium:ttft.p95=300,batch:p99=6000"
    service, per = split_class_slo(
        {"p99": 1500, "premium:p95": 800, "premium:ttft.p95": "300", "batch:p99": 6000}
    )
    assert service == {"p99": 1500}
    assert per == split_class_slo(text)[1]
    with pytest.raises(TailbudgetError, match="class premium"):
        split_class_slo({"p99": 1, "premium:p95": "abc"})
