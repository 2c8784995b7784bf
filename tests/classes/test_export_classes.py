"""Exports per class: the class label on rules and burn-rate alerts (promtool accepts them
and fires the class's alert from raw histogram series), and the gated class objectives in
KEDA, Argo Rollouts and Flagger."""

from __future__ import annotations

from pathlib import Path

import yaml

from tailbudget.budget import parse_budget
from tailbudget.demo.tiers import BUDGET
from tailbudget.export import export, prometheus_rules
from tests.classes.export_fixtures import checked_rules, firing, promtool_fires, rule_group
from tests.export.export_helpers import needs_promtool

BUDGET_OBJ = parse_budget(BUDGET)


def test_rules_carry_the_class_label() -> None:
    group = rule_group(BUDGET_OBJ)
    alerts = [r for r in group["rules"] if "alert" in r]
    objective = [a for a in alerts if a["alert"].startswith("TailbudgetClassObjective")]
    assert {(a["labels"]["class"], a["labels"]["percentile"]) for a in objective} == {
        ("premium", "p95"),
        ("standard", "p99"),
        ("batch", "p99"),
    }
    burns = [a for a in alerts if a["alert"].startswith("TailbudgetClassLatencyBurn")]
    assert burns and all('class="' in a["expr"] and a["labels"]["class"] for a in burns)
    premium = next(a for a in objective if a["labels"]["class"] == "premium")
    assert 'class="premium"' in premium["expr"] and "> 0.8" in premium["expr"]


def test_no_class_group_without_classes() -> None:
    plain = parse_budget(BUDGET.split("classes:")[0])
    doc = yaml.safe_load(prometheus_rules.render(plain))
    assert not any(g["name"].endswith("-classes") for g in doc["groups"])


@needs_promtool
def test_promtool_checks_and_fires_the_premium_alert(tmp_path: Path) -> None:
    rules = checked_rules(prometheus_rules.render(BUDGET_OBJ), tmp_path)
    # Premium: 10 requests/s, every one between 0.8 s and 1 s (over its 800 ms p95);
    # standard: 10/s all under 0.5 s. Only premium's objective alert fires.
    h = "tailbudget_request_duration_seconds"
    series = []
    for cls, under in (("premium", {"0.5": 0, "0.8": 0, "1": 1}), ("standard", {"0.5": 1})):
        for le in ("0.5", "0.8", "1", "+Inf"):
            share = under.get(le, 1)
            labels = f'service="tiered-rag", class="{cls}", le="{le}"'
            series.append({"series": f"{h}_bucket{{{labels}}}", "values": f"0+{10 * share}x300"})
        series.append(
            {"series": f'{h}_count{{service="tiered-rag", class="{cls}"}}', "values": "0+10x300"}
        )
    alert = "TailbudgetClassObjectiveP95"
    rule = next(
        r
        for r in rule_group(BUDGET_OBJ)["rules"]
        if r.get("alert") == alert and r["labels"]["class"] == "premium"
    )
    # Nothing before its first windows, then firing for premium alone (standard is fast).
    expected = [{"eval_time": "30s", "alerts": []}, {"eval_time": "4m", "alerts": [firing(rule)]}]
    promtool_fires(rules, series, alert, expected)


def test_keda_argo_and_flagger_use_the_class_objectives() -> None:
    keda = yaml.safe_load(export(BUDGET_OBJ, "keda"))
    names = [t["name"] for t in keda["spec"]["triggers"]]
    assert "tailbudget-class-premium-p95" in names
    argo = yaml.safe_load(export(BUDGET_OBJ, "argo-rollouts"))
    metrics = {m["name"]: m for m in argo["spec"]["metrics"]}
    assert "result[0] <= 0.8" in metrics["class-premium-p95"]["successCondition"]
    assert 'class="premium"' in metrics["class-premium-p95"]["provider"]["prometheus"]["query"]
    flagger = export(BUDGET_OBJ, "flagger")
    assert 'class="premium"' in flagger and "class-premium-p95" in flagger
