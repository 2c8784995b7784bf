"""Every class objective kind with a class series in the exports: a class's TTFT (the stage
`ttft`) and stage objectives read the stage histogram, which the PrometheusSink labels
with the class; promtool accepts the rules and fires premium's TTFT alert alone; KEDA,
Argo Rollouts and Flagger check them; TPOT (no class series) is named, not exported."""

from __future__ import annotations

from pathlib import Path

import yaml

from tailbudget.budget import parse_budget
from tailbudget.demo.tiers import BUDGET as TIERS
from tailbudget.export import export, prometheus_rules
from tests.classes.export_fixtures import (
    CLASS_GROUP,
    checked_rules,
    firing,
    promtool_fires,
    rule_group,
)
from tests.export.export_helpers import needs_promtool

BUDGET = TIERS.replace(
    "premium:  {slo: {p95: 800}, priority: 0}",
    "premium:  {slo: {p95: 800, tpot: {p99: 50}, stages: {rerank: {p95: 250}}}, "
    "ttft: {p95: 300}, priority: 0}",
)
OBJ = parse_budget(BUDGET)


def _rules() -> list[dict]:
    return rule_group(OBJ)["rules"]


def test_ttft_and_stage_class_objectives_are_alerted_on_the_stage_histogram() -> None:
    assert "premium:" in BUDGET and "ttft: {p95: 300}" in BUDGET
    alerts = {r["alert"]: r for r in _rules() if "alert" in r and r["labels"]["class"] == "premium"}
    ttft = alerts["TailbudgetClassObjectiveTtftP95"]
    assert ttft["labels"]["metric"] == "ttft" and ttft["labels"]["slo_seconds"] == "0.3"
    assert 'class="premium", stage="ttft"' in ttft["expr"] and "> 0.3" in ttft["expr"]
    assert "service_class_stage:tailbudget_stage_duration_seconds:p95_rate" in ttft["expr"]
    assert 'stage="rerank"' in alerts["TailbudgetClassObjectiveRerankP95"]["expr"]
    assert any(a.startswith("TailbudgetClassLatencyBurnTtftP95") for a in alerts)
    assert "TailbudgetClassObjectiveP95" in alerts  # the e2e objective as before
    text = prometheus_rules.render(OBJ)
    assert "no class series for class premium tpot.p99: not exported." in text


def test_the_sink_labels_stage_times_with_the_class() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from tailbudget.measure import PrometheusSink, Recorder

    registry = CollectorRegistry()
    rec = Recorder(sink=PrometheusSink(registry), budget=OBJ, registry=registry)
    for tier in ("premium", "gold"):
        with rec.request(tier=tier) as r, r.stage("rerank"):
            pass
    rec.close()
    text = generate_latest(registry).decode()
    count = "tailbudget_stage_duration_seconds_count"
    assert f'{count}{{class="premium",service="tiered-rag",stage="rerank"}} 1.0' in text
    assert f'{count}{{class="other",service="tiered-rag",stage="rerank"}} 1.0' in text
    total = 'tailbudget_requests_total{class="premium",outcome="ok",route="",service="tiered-rag"}'
    assert f"{total} 1.0" in text  # the counter a class's error rate reads


def _series(h: str, cls: str, under: dict[str, float], extra: str) -> list[dict]:
    out = []
    for le in ("0.1", "0.3", "0.5", "+Inf"):
        labels = f'service="tiered-rag", class="{cls}", {extra}le="{le}"'
        out.append(
            {"series": f"{h}_bucket{{{labels}}}", "values": f"0+{10 * under.get(le, 1)}x300"}
        )
    labels = f'service="tiered-rag", class="{cls}"' + (f", {extra[:-2]}" if extra else "")
    out.append({"series": f"{h}_count{{{labels}}}", "values": "0+10x300"})
    return out


@needs_promtool
def test_promtool_checks_and_fires_premiums_ttft_alert(tmp_path: Path) -> None:
    rules = checked_rules(prometheus_rules.render(OBJ), tmp_path)
    # Premium's TTFT: every first token between 0.3 s and 0.5 s (over its 300 ms p95);
    # standard's all under 0.1 s. Only premium's TTFT objective alert fires.
    stage = "tailbudget_stage_duration_seconds"
    series = _series(stage, "premium", {"0.1": 0, "0.3": 0}, 'stage="ttft", ')
    series += _series(stage, "standard", {}, 'stage="ttft", ')
    alert = "TailbudgetClassObjectiveTtftP95"
    rule = next(r for r in _rules() if r.get("alert") == alert)
    fires = firing(rule, stage="ttft")  # the series' own stage label
    expected = [{"eval_time": "30s", "alerts": []}, {"eval_time": "4m", "alerts": [fires]}]
    promtool_fires(rules, series, alert, expected)


def test_keda_argo_and_flagger_check_the_class_ttft() -> None:
    keda = yaml.safe_load(export(OBJ, "keda"))
    assert "tailbudget-class-premium-p95" in [t["name"] for t in keda["spec"]["triggers"]]
    argo = yaml.safe_load(export(OBJ, "argo-rollouts"))
    metrics = {m["name"]: m for m in argo["spec"]["metrics"]}
    ttft = metrics["class-premium-ttft-p95"]
    assert "result[0] <= 0.3" in ttft["successCondition"]
    assert 'class="premium", stage="ttft"' in ttft["provider"]["prometheus"]["query"]
    assert "tailbudget_stage_duration_seconds_bucket" in ttft["provider"]["prometheus"]["query"]
    flagger = export(OBJ, "flagger")
    assert "class-premium-ttft-p95" in flagger and 'stage="ttft"' in flagger


def test_openslo_carries_a_slo_per_gated_class_objective_and_imports_the_service() -> None:
    from tailbudget.export.openslo import read_slos

    text = export(OBJ, "openslo")
    docs = [d for d in yaml.safe_load_all(text) if d]
    by_name = {d["metadata"]["name"]: d for d in docs}
    ttft = by_name["tiered-rag-class-premium-latency-ttft-p95"]
    assert ttft["metadata"]["labels"] == {"gated": "true", "class": "premium"}
    assert ttft["spec"]["objectives"][0]["target"] == 0.95
    good = ttft["spec"]["indicator"]["spec"]["ratioMetric"]["good"]["metricSource"]["spec"]
    assert 'class="premium", stage="ttft", le="0.3"' in good["query"]
    assert "tiered-rag-class-batch-latency-p99" in by_name
    assert "no class series for class premium tpot.p99" in text
    # The import reads the service's own objectives; the class documents do not mix in.
    assert read_slos(text)["slo"] == {"p99": 1500.0}


def test_grafana_has_a_panel_per_class_on_the_grid() -> None:
    import json

    dash = json.loads(export(OBJ, "grafana"))
    panels = {p["title"]: p for p in dash["panels"]}
    premium = panels["class premium"]
    exprs = [t["expr"] for t in premium["targets"]]
    assert any('class="premium", stage="ttft"' in e for e in exprs)
    steps = premium["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert {s["value"] for s in steps} >= {0.3, 0.8, 0.25}
    assert {"class standard", "class batch"} <= set(panels)
    cells: set[tuple[int, int]] = set()
    for p in dash["panels"]:  # no two panels overlap
        g = p["gridPos"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + 8)}
        assert not mine & cells, p["title"]
        cells |= mine


@needs_promtool
def test_on_vllm_series_the_class_label_is_classes_by_and_promtool_fires_tpot(
    tmp_path: Path,
) -> None:
    from tailbudget.export import ExportOptions

    text = prometheus_rules.render(OBJ, ExportOptions(metrics="vllm"))
    assert "class premium rerank.p95: vllm exports no rerank histogram" in text
    rules = checked_rules(text, tmp_path)
    group = next(g for g in yaml.safe_load(text)["groups"] if g["name"].endswith("classes-vllm"))
    alert = "TailbudgetClassObjectiveTpotP99"
    rule = next(r for r in group["rules"] if r["alert"] == alert)
    assert 'tier="premium"' in rule["expr"]
    # Premium's decode steps at 0.06-0.075 s (over its 50 ms p99); batch's under 0.025 s.
    h = "vllm:request_time_per_output_token_seconds"
    series = []
    cumulative = {"premium": (0, 0, 1, 1), "batch": (1, 1, 1, 1)}  # share at or under le
    for tier, shares in cumulative.items():
        for le, share in zip(("0.025", "0.05", "0.075", "+Inf"), shares, strict=True):
            labels = f'model_name="tiered-rag", tier="{tier}", le="{le}"'
            series.append({"series": f"{h}_bucket{{{labels}}}", "values": f"0+{10 * share}x300"})
        count = f'{h}_count{{model_name="tiered-rag", tier="{tier}"}}'
        series.append({"series": count, "values": "0+10x300"})
    promtool_fires(rules, series, alert, [{"eval_time": "4m", "alerts": [firing(rule)]}])


@needs_promtool
def test_a_class_error_rate_is_alerted_and_promtool_fires_it_alone(tmp_path: Path) -> None:
    text = TIERS.replace(
        "premium:  {slo: {p95: 800}, priority: 0}",
        "premium:  {slo: {p95: 800, error_rate: 0.01}, priority: 0}",
    )
    rules = checked_rules(prometheus_rules.render(parse_budget(text)), tmp_path)
    group = next(g for g in yaml.safe_load(rules.read_text())["groups"] if g["name"] == CLASS_GROUP)
    rule = next(r for r in group["rules"] if r.get("alert") == "TailbudgetClassErrorRate")
    # Premium fails 1 request in 10 (over its 1%); standard never fails.
    c = "tailbudget_requests_total"
    series = [
        {
            "series": f'{c}{{service="tiered-rag", class="premium", outcome="ok"}}',
            "values": "0+9x300",
        },
        {
            "series": f'{c}{{service="tiered-rag", class="premium", outcome="error"}}',
            "values": "0+1x300",
        },
        {
            "series": f'{c}{{service="tiered-rag", class="standard", outcome="ok"}}',
            "values": "0+10x300",
        },
    ]
    expected = [{"eval_time": "4m", "alerts": [firing(rule)]}]
    promtool_fires(rules, series, "TailbudgetClassErrorRate", expected)


def test_argo_and_flagger_on_a_serving_stack_check_each_class_by_classes_by() -> None:
    from tailbudget.export import ExportOptions

    argo = yaml.safe_load(export(OBJ, "argo-rollouts", ExportOptions(metrics="vllm")))
    metrics = {m["name"]: m for m in argo["spec"]["metrics"]}
    ttft = metrics["class-premium-ttft-p95"]
    query = ttft["provider"]["prometheus"]["query"]
    assert "vllm:time_to_first_token_seconds_bucket" in query and 'tier="premium"' in query
    assert "result[0] <= 0.3" in ttft["successCondition"]
    assert "class-batch-p99" in metrics
    flagger = export(OBJ, "flagger", ExportOptions(metrics="sglang"))
    assert "tiered-rag-class-premium-ttft-p95" in flagger and 'tier="premium"' in flagger
