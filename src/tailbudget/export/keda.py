"""`--to keda`: a ScaledObject scaling on the p95 recording rule before the SLO breaks.

Reference: https://keda.sh/docs/latest/reference/scaledobject-spec/ and
https://keda.sh/docs/latest/scalers/prometheus/. The trigger uses
`metricType: Value`: with the default AverageValue the HPA would divide the
latency by the replica count, which has no meaning for a percentile.
"""

from __future__ import annotations

from collections.abc import Sequence

from tailbudget import _metric_names as names
from tailbudget._json import JsonDict
from tailbudget._units import PERCENTILES
from tailbudget.budget.model import Budget
from tailbudget.budget.plan_classes import class_budget
from tailbudget.budget.policy import Policy, Rule, resolve_policy
from tailbudget.errors import PolicyError
from tailbudget.export import histograms
from tailbudget.export.classes import (
    class_count_rule,
    class_objectives,
    class_quantile_rule,
    class_selector,
)
from tailbudget.export.common import (
    LABEL_PREFIX,
    ExportOptions,
    dump_yaml,
    header,
    k8s_metadata,
    k8s_name,
    label_value,
    num,
    policy_of,
    request_count_rule,
    request_quantile_rule,
    seconds,
    service_selector,
)

HPA_MAX_PERIOD_S = 1800
"""HPAScalingPolicy.periodSeconds must be in (0, 1800]."""
HPA_MAX_STABILIZATION_S = 3600
"""stabilizationWindowSeconds must be in [0, 3600]."""


def scale_rule(policy: Policy) -> Rule:
    """The policy's scale-up rule on a latency percentile (the scale-before-breach point)."""
    for rule in policy.rules:
        if rule.action == "scale_up" and rule.metric in PERCENTILES:
            return rule
    llm = next((r for r in policy.rules if r.action == "scale_up"), None)
    hint = (
        f"; it scales up on {llm.metric}, which the engine's own histograms carry: export "
        "with metrics vllm, sglang or tgi"
        if llm is not None
        else ""
    )
    raise PolicyError(
        "the policy has no scale_up rule on p50/p95/p99; KEDA needs one "
        "(e.g. {metric: p95, threshold: 90% of p95, action: scale_up})" + hint,
        param="metrics" if llm is not None else None,
    )


def _clamp(value: float, low: int, high: int) -> int:
    return max(low, min(high, round(value)))


def behavior(policy: Policy, rule: Rule) -> JsonDict:
    """HPA behavior: scale-up after the rule's `for`, scale-down after its clear stabilization."""
    step = policy.replicas.step
    period = _clamp(rule.cooldown_s or policy.evaluate_every_s, 1, HPA_MAX_PERIOD_S)
    return {
        "scaleUp": {
            "stabilizationWindowSeconds": _clamp(rule.for_s, 0, HPA_MAX_STABILIZATION_S),
            "selectPolicy": "Max",
            "policies": [{"type": "Pods", "value": step, "periodSeconds": period}],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": _clamp(rule.clear_for_s, 0, HPA_MAX_STABILIZATION_S),
            "selectPolicy": "Max",
            "policies": [{"type": "Pods", "value": step, "periodSeconds": period}],
        },
    }


def query(budget: Budget, policy: Policy, rule: Rule) -> str:
    """A single-value PromQL query; empty (an error for KEDA) when samples are too few."""
    sel = service_selector(budget)
    series = f"{request_quantile_rule(rule.metric, policy.window_s)}{{{sel}}}"
    guard = f"{request_count_rule(policy.window_s)}{{{sel}}} >= {policy.min_samples}"
    return f"max({series} and on (service) ({guard}))"


def scaled_object(
    budget: Budget,
    options: ExportOptions,
    rule: Rule,
    query_text: str,
    annotations: dict[str, str] | None = None,
    more_triggers: Sequence[JsonDict] = (),
) -> JsonDict:
    """The ScaledObject scaling on `query_text` (seconds) above the rule's threshold, then
    `more_triggers` (the class triggers).

    The one shell every `--metrics` preset shares: replicas, polling and HPA behavior
    from the policy, one Prometheus trigger with `metricType: Value`.
    """
    policy = policy_of(budget)
    target = options.target_name or k8s_name(budget.service)
    metadata = k8s_metadata(
        budget,
        options,
        "latency",
        annotations={
            f"{LABEL_PREFIX}/rule": rule.name,
            f"{LABEL_PREFIX}/threshold-ms": num(rule.threshold),
            **(annotations or {}),
        },
    )
    spec: JsonDict = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": options.target_kind, "name": target},
        "pollingInterval": _clamp(policy.evaluate_every_s, 1, 3600),
        "cooldownPeriod": _clamp(rule.clear_for_s or 300, 1, 86400),
        "minReplicaCount": policy.replicas.min,
        "maxReplicaCount": policy.replicas.max,
        "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior(policy, rule)}},
        "triggers": [
            {
                "type": "prometheus",
                "name": f"tailbudget-{rule.metric.replace('.', '-')}",
                "metricType": "Value",
                "metadata": {
                    "serverAddress": options.prometheus_url,
                    "query": query_text,
                    "threshold": num(seconds(rule.threshold)),
                    # No data (or too few samples) is unknown: an error keeps the current
                    # replicas instead of reading as 0 and scaling down.
                    "ignoreNullValues": "false",
                },
            },
            *more_triggers,
        ],
    }
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": metadata,
        "spec": spec,
    }


def scaling_notes(policy: Policy) -> list[str]:
    """What the HPA does differently from the policy (every preset's KEDA header)."""
    notes = [
        "the HPA scales in proportion to value/threshold (10% tolerance); the rule's clear "
        "threshold has no HPA equivalent, scale-down waits for the stabilization window."
    ]
    if policy.replicas.min == 0:
        notes.append("replicas.min is 0: KEDA scales to zero when the query is under threshold.")
    return notes


def build(budget: Budget, options: ExportOptions | None = None) -> tuple[JsonDict, list[str]]:
    """The ScaledObject as a mapping, and notes."""
    options = options or ExportOptions()
    policy = policy_of(budget)
    rule = scale_rule(policy)
    doc = scaled_object(
        budget,
        options,
        rule,
        query(budget, policy, rule),
        more_triggers=class_triggers(budget, options, policy),
    )
    notes = [
        f"scales on {rule.metric} > {num(seconds(rule.threshold))} s (rule {rule.name!r}, "
        f"{rule.expr or 'threshold'}); needs the recording rules of the prometheus-rules target.",
        *scaling_notes(policy),
    ]
    return doc, notes


def class_triggers(budget: Budget, options: ExportOptions, policy: Policy) -> list[JsonDict]:
    """One trigger per class with its own objectives: its percentile at its own scale-up
    threshold (its objectives' default rules); KEDA scales on the largest trigger."""
    out: list[JsonDict] = []
    for name in dict.fromkeys(c.name for c in class_objectives(budget)):
        rule = scale_rule(resolve_policy(class_budget(budget, name)))
        metric, _, p = rule.metric.rpartition(".")
        sel, histogram, on = class_selector(budget, name), names.REQUEST_DURATION, ""
        if metric not in ("", "e2e"):  # a TTFT or stage rule: the class's stage series
            if metric != "ttft" and metric not in {s.name for _, s in budget.stages()}:
                continue  # no class series (tpot, itl)
            sel += f', stage="{label_value(metric)}"'
            histogram, on = names.STAGE_DURATION, ", stage"
        series = f"{class_quantile_rule(p, policy.window_s, histogram)}{{{sel}}}"
        count = class_count_rule(policy.window_s, histogram)
        guard = f"{count}{{{sel}}} >= {policy.min_samples}"
        out.append(
            {
                "type": "prometheus",
                "name": f"tailbudget-class-{k8s_name(name)}-{rule.metric.replace('.', '-')}",
                "metricType": "Value",
                "metadata": {
                    "serverAddress": options.prometheus_url,
                    "query": f"max({series} and on (service, class{on}) ({guard}))",
                    "threshold": num(seconds(rule.threshold)),
                    "ignoreNullValues": "false",
                },
            }
        )
    return out


def render(budget: Budget, options: ExportOptions | None = None) -> str:
    """The ScaledObject (YAML); on a serving stack's histograms with `options.metrics`."""
    on_server = histograms.server_preset(options) is not None
    doc, notes = build_fleet(budget, options) if on_server else build(budget, options)
    return dump_yaml([doc], header(budget, "keda", notes))


# ---- on a serving stack's own histograms (`--metrics vllm|sglang|tgi`) ----------------


def build_fleet(budget: Budget, options: ExportOptions | None = None) -> tuple[JsonDict, list[str]]:
    """The ScaledObject whose trigger is the scale_up rule's alert expression."""
    options, fleet, policy = histograms.fleet_parts(budget, options)
    rule = next(
        (
            r
            for r in policy.rules
            if r.action == "scale_up" and histograms.series_of(fleet, r) is not None
        ),
        None,
    )
    series = None if rule is None else histograms.series_of(fleet, rule)
    if rule is None or series is None:
        raise PolicyError(
            f"the policy has no scale_up rule on a percentile {fleet.name} exports; KEDA needs "
            "one (e.g. {metric: ttft.p95, threshold: 90% of ttft.p95, action: scale_up})"
        )
    query = "max(({}) and on () ({}))".format(
        *histograms.rule_quantile(fleet, budget, policy, rule)
    )
    doc = scaled_object(
        budget, options, rule, query, annotations={f"{LABEL_PREFIX}/metrics": fleet.name}
    )
    where = histograms.resolve(series, rule.threshold, rule.metric)
    notes = [
        f"scales on {rule.metric} > {num(seconds(rule.threshold))} s from "
        f"{series.histogram} (rule {rule.name!r}; {where.around} around it); the alert of "
        f"the prometheus-rules target on the {fleet.name} preset compares the same expression.",
        *([where.check.warning] if where.check.warning else []),
        *scaling_notes(policy),
    ]
    return doc, notes
