"""KEDA, Argo Rollouts and Flagger outputs, field by field, against the policy they mirror.

Documentation the fields come from:
- KEDA ScaledObject: https://keda.sh/docs/latest/reference/scaledobject-spec/
- KEDA Prometheus scaler: https://keda.sh/docs/latest/scalers/prometheus/
- HPA behavior: https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/#configurable-scaling-behavior
- Argo Rollouts analysis: https://argo-rollouts.readthedocs.io/en/stable/features/analysis/
- Argo web metric: https://argo-rollouts.readthedocs.io/en/stable/analysis/web/
- Argo condition functions (len, isNaN): argoproj/argo-rollouts utils/evaluate/evaluate.go
- Flagger metrics: https://docs.flagger.app/usage/metrics
"""

from __future__ import annotations

import pytest
import yaml
from export_helpers import budget_with_policy

from tailbudget.budget import Budget
from tailbudget.errors import PolicyError
from tailbudget.export import ExportOptions, argo, flagger, keda

CUSTOM = {
    "window": "30s",
    "evaluate_every": "15s",
    "min_samples": 40,
    "replicas": {"min": 3, "max": 30, "step": 2},
    "rules": [
        {
            "name": "scale",
            "metric": "p95",
            "threshold": "90% of p95",
            "for": "30s",
            "action": "scale_up",
            "cooldown": "45s",
            "clear": {"threshold": "70% of p95", "for": "5m"},
        },
        {
            "name": "errors",
            "metric": "error_rate",
            "threshold": "2%",
            "for": "3m",
            "action": "rollback",
        },
    ],
}


def test_keda_trigger_reads_the_p95_rule_at_the_scale_before_breach_point(rag: Budget) -> None:
    doc, _ = keda.build(rag, ExportOptions(prometheus_url="http://prom:9090", namespace="ml"))
    assert doc["apiVersion"] == "keda.sh/v1alpha1" and doc["kind"] == "ScaledObject"
    assert doc["metadata"]["namespace"] == "ml"
    (trigger,) = doc["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    # Value, not AverageValue: a latency must not be divided by the replica count.
    assert trigger["metricType"] == "Value"
    meta = trigger["metadata"]
    assert meta["serverAddress"] == "http://prom:9090"
    assert "service:tailbudget_request_duration_seconds:p95_rate1m" in meta["query"]
    assert meta["threshold"] == "1.8"  # the default scale_up rule, 1800 ms, in seconds
    assert all(isinstance(v, str) for v in meta.values())  # KEDA metadata is a string map
    assert meta["ignoreNullValues"] == "false"  # no data keeps replicas (unknown)
    assert doc["spec"]["scaleTargetRef"]["name"] == "rag-chat"


def test_keda_follows_the_budget_policy_block() -> None:
    doc, _ = keda.build(budget_with_policy(CUSTOM), ExportOptions(target_name="rag-api"))
    spec = doc["spec"]
    assert spec["scaleTargetRef"]["name"] == "rag-api"
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (3, 30)
    assert spec["pollingInterval"] == 15
    assert spec["triggers"][0]["metadata"]["threshold"] == "2.52"  # 90% of 2800 ms
    assert "p95_rate30s" in spec["triggers"][0]["metadata"]["query"]
    assert ">= 40" in spec["triggers"][0]["metadata"]["query"]
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleUp"]["stabilizationWindowSeconds"] == 30  # the rule's `for`
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 300  # clear.for 5m
    for direction in ("scaleUp", "scaleDown"):
        (policy,) = behavior[direction]["policies"]
        assert policy == {"type": "Pods", "value": 2, "periodSeconds": 45}


def test_keda_without_a_scale_up_rule_is_a_clear_error() -> None:
    budget = budget_with_policy(
        {"rules": [{"metric": "error_rate", "threshold": 0.01, "action": "rollback"}]}
    )
    with pytest.raises(PolicyError, match="no scale_up rule"):
        keda.build(budget)


def test_argo_metrics_mirror_the_rollback_rules(rag: Budget) -> None:
    doc, notes = argo.build(rag, ExportOptions(verdict_url="http://tb:9464/v1/verdict"))
    assert doc["apiVersion"] == "argoproj.io/v1alpha1" and doc["kind"] == "AnalysisTemplate"
    args = {a["name"]: a.get("value", a.get("valueFrom")) for a in doc["spec"]["args"]}
    assert args["verdict-url"] == "http://tb:9464/v1/verdict"
    # The canary's own pods: Argo passes the latest pod-template hash.
    assert args["canary-hash"] == {"podTemplateHashValue": "Latest"}
    metrics = {m["name"]: m for m in doc["spec"]["metrics"]}
    err = metrics["rollback-error-rate"]
    assert err["interval"] == "10s"  # evaluate_every
    assert err["failureLimit"] == 0
    query = err["provider"]["prometheus"]["query"]
    # `for: 2m` at 10 s steps: held at every one of the 12 evaluations.
    assert "[2m:10s]" in query and ">= 12" in query
    assert "sqrt(" in query and ">= 20" in query  # the Wilson lower bound, not the raw ratio
    canary = 'rollouts_pod_template_hash="{{args.canary-hash}}"'
    assert query.count(canary) == query.count("tailbudget_requests_total{") > 0
    assert err["successCondition"].endswith("result[0] <= 0.01")
    assert err["provider"]["prometheus"]["address"] == "{{args.prometheus-address}}"
    # No baseline: the p99 rule is inactive and said so; the verdict metric remains.
    assert "rollback-p99-baseline" not in metrics
    assert any("inactive" in n for n in notes)
    web = metrics["tailbudget-verdict"]["provider"]["web"]
    assert web["url"] == "{{args.verdict-url}}"
    # `tailbudget serve` answers {"verdict": "healthy" | "rollback" | "unknown"}; unknown
    # never triggers an action, so only "rollback" fails.
    assert web["jsonPath"] == "{$.verdict}"
    assert metrics["tailbudget-verdict"]["successCondition"] == 'result != "rollback"'


def test_argo_p99_rule_with_a_baseline_and_custom_for() -> None:
    budget = budget_with_policy({"baseline_p99_ms": 2500, "rollback_for": "3m"})
    doc, _ = argo.build(budget)
    metrics = {m["name"]: m for m in doc["spec"]["metrics"]}
    p99 = metrics["rollback-p99-baseline"]
    query = p99["provider"]["prometheus"]["query"]
    assert "histogram_quantile(0.99" in query and "[1m]" in query and "/ 2.5" in query
    assert "[3m:10s]" in query and ">= 18" in query
    assert p99["successCondition"].endswith("result[0] <= 1.2")
    custom = argo.build(budget_with_policy(CUSTOM))[0]["spec"]["metrics"][0]
    assert custom["interval"] == "15s"
    assert "[3m:15s]" in custom["provider"]["prometheus"]["query"]
    assert custom["successCondition"].endswith("<= 0.02")


def test_flagger_templates_select_the_canary_and_compare_with_the_primary(rag: Budget) -> None:
    templates, analysis, _ = flagger.build(rag, ExportOptions(prometheus_url="http://p:9090"))
    by_name = {t["metadata"]["name"]: t for t in templates}
    err = by_name["rag-chat-error-rate"]["spec"]
    assert err["provider"] == {"type": "prometheus", "address": "http://p:9090"}
    assert "{{ interval }}" in err["query"] and "{{ namespace }}" in err["query"]
    assert "sqrt(" in err["query"]  # the Wilson lower bound, as the policy's rule reads it
    assert "{{ target }}-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)" in err["query"]
    ratio = by_name["rag-chat-p99-vs-primary"]["spec"]["query"]
    assert "{{ target }}-primary-" in ratio and "histogram_quantile(0.99" in ratio
    checks = {m["name"]: m for m in analysis["metrics"]}
    assert checks["rollback-error-rate"]["thresholdRange"] == {"max": 0.01}
    assert checks["rollback-p99-baseline"]["thresholdRange"] == {"max": 1.2}
    assert checks["rollback-p99-baseline"]["templateRef"] == {"name": "rag-chat-p99-vs-primary"}
    assert analysis["interval"] == "10s"
    assert analysis["threshold"] == 12  # 2m of failed 10 s checks
    # serve's verdict: a rollout hook failing on rollback only, and a confirm-promotion
    # hook holding promotion (without failures) until the verdict is healthy.
    rollout, promotion = analysis["webhooks"]
    assert rollout["type"] == "rollout"
    assert rollout["url"] == "http://tailbudget.monitoring.svc:9464/v1/verdict?mode=flagger"
    assert promotion["type"] == "confirm-promotion"
    assert promotion["url"].endswith("/v1/verdict?mode=flagger-promotion")
    # Unknown never acts: below min_samples (20 in rag) every query answers 0, a pass.
    for t in templates:
        query = t["spec"]["query"]
        assert query.rstrip().endswith("or on () vector(0)")
        assert "[{{ interval }}])) >= 20" in query


def test_flagger_render_is_applicable_yaml_with_the_snippet_as_comment(rag: Budget) -> None:
    text = flagger.render(rag)
    docs = [d for d in yaml.safe_load_all(text) if d]
    assert [d["kind"] for d in docs] == ["MetricTemplate", "MetricTemplate"]
    assert flagger.snippet_from(text) == {"analysis": flagger.build(rag)[1]}
