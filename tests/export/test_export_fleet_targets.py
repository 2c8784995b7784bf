"""`--metrics vllm|sglang|tgi` for Argo Rollouts, Flagger, OpenSLO and Grafana, field by field.

Series names, label matchers and `le` bounds are asserted as the servers write
them (vLLM's and SGLang's `model_name`, TGI without a label; bounds from
`tailbudget._fleet`, which copies each server's registered buckets).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tailbudget._fleet import PRESETS
from tailbudget.errors import BudgetError
from tailbudget.export import (
    ExportOptions,
    argo,
    export,
    flagger,
    grafana,
    keda,
    openslo,
)
from tests.fleet_exports import chat, ttft_only

VLLM = ExportOptions(metrics="vllm")


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def _argo_metrics(budget: Any, metrics: str) -> dict[str, dict[str, Any]]:
    doc, _ = argo.build_fleet(budget, ExportOptions(metrics=metrics))
    return {m["name"]: m for m in doc["spec"]["metrics"]}


def test_argo_compares_the_canary_ttft_p99_with_the_stable_pods_on_vllm_series() -> None:
    doc, notes = argo.build_fleet(chat(), VLLM)
    assert doc["kind"] == "AnalysisTemplate"
    args = {a["name"]: a for a in doc["spec"]["args"]}
    assert args["stable-hash"]["valueFrom"] == {"podTemplateHashValue": "Stable"}
    assert args["canary-hash"]["valueFrom"] == {"podTemplateHashValue": "Latest"}
    metrics = {m["name"]: m for m in doc["spec"]["metrics"]}
    assert set(metrics) == {"rollback-ttft-p99-baseline", "tailbudget-verdict"}
    m = metrics["rollback-ttft-p99-baseline"]
    query = m["provider"]["prometheus"]["query"]
    canary = 'model_name="Llama-3.3-70B", rollouts_pod_template_hash="{{args.canary-hash}}"'
    stable = 'model_name="Llama-3.3-70B", rollouts_pod_template_hash="{{args.stable-hash}}"'
    assert f"vllm:time_to_first_token_seconds_bucket{{{canary}}}[1m]" in query
    assert f"vllm:time_to_first_token_seconds_bucket{{{stable}}}[1m]" in query
    assert "histogram_quantile(0.99," in query and query.startswith("min_over_time(")
    assert "[2m:10s]" in query  # the rule's `for` at the evaluation step
    assert m["successCondition"].endswith("result[0] <= 1.2") and m["failureLimit"] == 0
    # vLLM counts no failures; goodput over four metrics is no single histogram's share
    assert any(
        "rollback_error_rate (error_rate): vllm counts no failed requests" in n for n in notes
    )
    assert any("rollback_goodput_baseline" in n and "count each metric alone" in n for n in notes)


def test_argo_goodput_is_the_share_under_its_le_read_at_the_wilson_upper_bound() -> None:
    metrics = _argo_metrics(ttft_only(), "sglang")
    good = metrics["rollback-goodput-baseline"]
    query = good["provider"]["prometheus"]["query"]
    assert 'sglang:time_to_first_token_seconds_bucket{model_name="chat", ' in query
    assert 'le="2.0"' in query  # 2500 ms has no SGLang bound: the nearest is 2 s
    assert "clamp_min(" in query and query.startswith("max_over_time(")  # falls to breach
    assert good["successCondition"].endswith("result[0] >= 1")
    errors = metrics["rollback-error-rate"]["provider"]["prometheus"]["query"]
    assert "sglang:num_aborted_requests_total{" in errors and "sglang:num_requests_total{" in errors


def test_tgi_has_no_ttft_so_argo_keeps_only_what_it_can_read() -> None:
    doc, notes = argo.build_fleet(ttft_only(), ExportOptions(metrics="tgi"))
    names = [m["name"] for m in doc["spec"]["metrics"]]
    assert names == ["rollback-error-rate", "tailbudget-verdict"]
    query = doc["spec"]["metrics"][0]["provider"]["prometheus"]["query"]
    assert 'tgi_request_failure{rollouts_pod_template_hash="{{args.canary-hash}}"}' in query
    assert any("ttft.p99_vs_baseline): tgi exports no ttft histogram" in n for n in notes)


@pytest.mark.parametrize("metrics", ["vllm", "sglang", "tgi"])
def test_flagger_templates_read_the_canary_and_primary_pods_of_the_preset(metrics: str) -> None:
    templates, analysis, _ = flagger.build_fleet(ttft_only(), ExportOptions(metrics=metrics))
    fleet = PRESETS[metrics]
    for t in templates:
        assert t["kind"] == "MetricTemplate" and t["apiVersion"] == "flagger.app/v1beta1"
        q = t["spec"]["query"]
        assert 'namespace="{{ namespace }}"' in q and "[{{ interval }}]" in q
        assert ('model_name="chat"' in q) == (fleet.label is not None)
        assert q.rstrip().endswith(("vector(0)", "vector(1)"))
    checks = {c["name"]: c for c in analysis["metrics"]}
    hooks = [h["type"] for h in analysis["webhooks"]]
    assert hooks == ["rollout", "confirm-promotion"]
    if metrics == "vllm":
        assert set(checks) == {"rollback-goodput-baseline", "rollback-ttft-p99-baseline"}
    if "rollback-goodput-baseline" in checks:  # goodput breaches when it falls
        assert checks["rollback-goodput-baseline"]["thresholdRange"] == {"min": 1.0}
        (t,) = [x for x in templates if x["metadata"]["name"] == "chat-goodput-vs-baseline"]
        assert 'pod=~"{{ target }}-primary-' in t["spec"]["query"]
        assert t["spec"]["query"].rstrip().endswith("vector(1)")  # unknown passes a min
    if "rollback-ttft-p99-baseline" in checks:
        assert checks["rollback-ttft-p99-baseline"]["thresholdRange"] == {"max": 1.2}


def test_openslo_one_slo_per_mapped_objective_under_the_nearest_vllm_bound() -> None:
    docs, notes = openslo.build_fleet(chat(), VLLM)
    by_kind = {d["metadata"]["annotations"][openslo.A_KIND]: d for d in docs}
    assert set(by_kind) == {
        "p95",
        "p99",
        "ttft.p95",
        "ttft.p99",
        "tpot.p99",
        "itl.p99",
        "queue.p99",
    }
    ttft = by_kind["ttft.p95"]
    ann = ttft["metadata"]["annotations"]
    assert ann[openslo.A_LE_USED] == "0.5" and ann[openslo.A_THRESHOLD_MS] == "400"
    ratio = ttft["spec"]["indicator"]["spec"]["ratioMetric"]
    good = ratio["good"]["metricSource"]["spec"]["query"]
    assert good == (
        'sum(rate(vllm:time_to_first_token_seconds_bucket{model_name="Llama-3.3-70B", '
        'le="0.5"}[5m]))'
    )
    assert ttft["spec"]["objectives"][0]["target"] == 0.95
    assert "nearest bound" in ttft["spec"]["description"]
    queue = by_kind["queue.p99"]["metadata"]["annotations"]
    assert queue[openslo.A_LE_USED] == "0.3"  # vLLM's queue histogram starts at 0.3 s
    assert any("queue.p99 target 200 ms is below the first bucket" in n for n in notes)
    assert any(n.startswith("objective error_rate: vllm counts no failed requests") for n in notes)


def test_openslo_error_rate_and_goodput_where_the_server_counts_them() -> None:
    docs, _ = openslo.build_fleet(ttft_only(), ExportOptions(metrics="sglang"))
    by_kind = {d["metadata"]["annotations"][openslo.A_KIND]: d for d in docs}
    assert set(by_kind) == {"ttft.p95", "ttft.p99", "error_rate", "goodput"}
    goodput = by_kind["goodput"]
    assert goodput["spec"]["objectives"][0]["target"] == 0.9
    assert goodput["metadata"]["annotations"][openslo.A_LE_USED] == "2.0"
    err = by_kind["error_rate"]["spec"]["indicator"]["spec"]["ratioMetric"]
    assert "sglang:num_aborted_requests_total" in err["good"]["metricSource"]["spec"]["query"]


def test_openslo_with_nothing_the_preset_maps_is_refused_in_one_line() -> None:
    budget = ttft_only(slo={"ttft": {"p95": 500}})
    with pytest.raises(BudgetError, match=r"^metrics tgi: no objective .* maps to a tgi series"):
        export(budget, "openslo", ExportOptions(metrics="tgi"))


def test_fleet_openslo_imports_back_its_end_to_end_slos_and_refuses_the_rest() -> None:
    e2e_only = chat(slo={"e2e": {"p95": 6000, "p99": 9000}, "error_rate": 0.01})
    found = openslo.read_slos(export(e2e_only, "openslo", ExportOptions(metrics="sglang")))
    assert found["slo"] == {"p95": 6000.0, "p99": 9000.0, "error_rate": 0.01}
    with pytest.raises(BudgetError, match=r"objective ttft\.p95 is not end to end"):
        openslo.read_slos(export(chat(), "openslo", VLLM))


def test_grafana_panels_per_objective_metric_with_bucket_notes() -> None:
    dash, _ = grafana.build_fleet(chat(), VLLM)
    json.dumps(dash)
    assert "vllm" in dash["tags"] and dash["uid"].endswith("vllm")
    panels = {p["title"]: p for p in dash["panels"]}
    assert {"ttft", "tpot", "itl", "queue", "requests"} <= set(panels)
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
    ttft = panels["ttft"]
    exprs = [t["expr"] for t in ttft["targets"]]
    assert exprs[0] == (
        "histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket"
        '{model_name="Llama-3.3-70B"}[1m])))'
    )
    steps = [s["value"] for s in ttft["fieldConfig"]["defaults"]["thresholds"]["steps"][1:]]
    # scale_up at 90% of each gated ttft objective (p95 and p99), then the two targets, in seconds
    assert steps == [0.36, 0.4, 1.8, 2.0]
    assert ttft["fieldConfig"]["defaults"]["unit"] == "s"
    assert "le 1 s .. 2.5 s around 2000 ms" in ttft["description"]
    assert "WARNING" in panels["queue"]["description"]
    burn = next(p for p in dash["panels"] if p["title"].startswith("latency SLI burn"))
    legends = [t["legendFormat"] for t in burn["targets"]]
    assert legends == [
        "e2e.p95",
        "e2e.p99",
        "ttft.p95",
        "ttft.p99",
        "tpot.p99",
        "itl.p99",
        "queue.p99",
    ]
    assert 'le="0.3"' in burn["targets"][-1]["expr"]


def test_tgi_dashboard_has_no_label_matcher_and_says_what_it_lacks() -> None:
    dash, notes = grafana.build_fleet(chat(), ExportOptions(metrics="tgi"))
    titles = [p["title"] for p in dash["panels"]]
    assert "ttft" not in titles and "tpot" in titles
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert any("tgi_request_duration_bucket{}" in e for e in exprs)
    assert any("tgi_request_failure{}" in e for e in exprs)
    assert "objective ttft.p95: tgi exports no ttft histogram" in notes
    assert "tgi exports no ttft histogram" in dash["description"]


def test_one_scaled_object_shell_for_every_preset() -> None:
    budget = ttft_only()
    plain, _ = keda.build(chat(slo={"p95": 6000, "p99": 9000}, policy="default"))
    fleet, _ = keda.build_fleet(budget, VLLM)
    assert plain["spec"].keys() == fleet["spec"].keys()
    assert plain["spec"]["triggers"][0].keys() == fleet["spec"]["triggers"][0].keys()
    assert fleet["metadata"]["annotations"]["tailbudget.dev/metrics"] == "vllm"
    assert fleet["spec"]["triggers"][0]["name"] == "tailbudget-ttft-p95"


def test_a_rollback_threshold_names_its_buckets_in_argo_and_flagger() -> None:
    policy = {
        "rules": [
            {"name": "slow_ttft", "metric": "ttft.p99", "threshold": 2000, "action": "rollback"}
        ]
    }
    budget = chat(policy=policy)
    doc, notes = argo.build_fleet(budget, VLLM)
    (m, _) = doc["spec"]["metrics"]
    assert m["successCondition"].endswith("result[0] <= 2")  # 2000 ms in seconds
    around = "rule slow_ttft: le 1 s .. 2.5 s of vllm:time_to_first_token_seconds around 2000 ms"
    assert around in notes
    assert any("falls between buckets le=1 s and le=2.5 s" in n for n in notes)
    _, analysis, flagger_notes = flagger.build_fleet(budget, VLLM)
    assert analysis["metrics"][0]["thresholdRange"] == {"max": 2.0}
    assert around in flagger_notes
