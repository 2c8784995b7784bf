"""`--to argo-rollouts`: an AnalysisTemplate mirroring the policy's rollback rules.

Reference: https://argo-rollouts.readthedocs.io/en/stable/features/analysis/ and
https://argo-rollouts.readthedocs.io/en/stable/analysis/prometheus/ and
https://argo-rollouts.readthedocs.io/en/stable/analysis/web/.

The queries read the canary's own pods: Argo passes the canary's pod-template
hash (`valueFrom.podTemplateHashValue: Latest`) and the series are selected by
the `rollouts_pod_template_hash` label, which Prometheus has when the scrape
copies the pod label `rollouts-pod-template-hash` (a PodMonitor's
`podTargetLabels`). Recording rules aggregate over the whole service and would
mix stable and canary pods, so the rules' expressions are written out here.

Argo counts failed measurements in total, not in a row, so a rule's `for` is put
in the query instead: the minimum over a `for`-long subquery at the policy's
evaluation step exceeds the threshold only when the condition held at every
evaluation of the span, exactly the policy's meaning. One such failure rolls
back (`failureLimit: 0`). No data or too few samples returns an empty result,
which passes: unknown never triggers a rollback.
"""

from __future__ import annotations

import math

from tailbudget import _metric_names as names
from tailbudget._json import JsonDict
from tailbudget.budget.model import Budget
from tailbudget.budget.policy import Policy, Rule
from tailbudget.control.stats import z_of
from tailbudget.export import histograms
from tailbudget.export.classes import (
    ClassObjective,
    FleetClassCheck,
    class_objectives,
    fleet_class_checks,
    quantile_query,
)
from tailbudget.export.common import (
    ExportOptions,
    dump_yaml,
    exported_kind,
    header,
    k8s_metadata,
    k8s_name,
    num,
    policy_of,
    promql_duration,
    quantile,
    rule_words,
    seconds,
    service_selector,
    wilson_lower_expr,
)
from tailbudget.export.prometheus_records import error_ratio_expr

PROMETHEUS_ARG = "prometheus-address"
VERDICT_ARG = "verdict-url"
CANARY_HASH_ARG = "canary-hash"
HASH_LABEL = "rollouts_pod_template_hash"
"""The pod label `rollouts-pod-template-hash` as Prometheus names it once copied to series."""


def canary_selector(budget: Budget) -> str:
    """The service's series from the canary's pods only."""
    return f'{service_selector(budget)}, {HASH_LABEL}="{{{{args.{CANARY_HASH_ARG}}}}}"'


def held_for(series: str, rule: Rule, policy: Policy, on: str = "service") -> str:
    """PromQL that is `series` when it held over the rule's whole `for` span, else empty.

    The worst value over the span (its minimum for a rule that breaches upwards,
    its maximum for goodput) breaches only when every evaluation did.
    """
    if rule.for_s <= 0:
        return series
    span = promql_duration(rule.for_s)
    step = promql_duration(policy.evaluate_every_s)
    points = max(1, math.floor(rule.for_s / policy.evaluate_every_s))
    worst = "min_over_time" if rule.rising else "max_over_time"
    return (
        f"{worst}(({series})[{span}:{step}])\n"
        f"and on ({on})\ncount_over_time(({series})[{span}:{step}]) >= {points}"
    )


_KEEP = {">": "<=", ">=": "<", "<": ">=", "<=": ">"}
"""The comparison that does not trigger a rule, by the rule's op."""


def success_condition(rule: Rule, threshold: float | None = None) -> str:
    """Argo expression: passes on no data, NaN, or a value that does not trigger the rule."""
    limit = num(rule.threshold if threshold is None else threshold)
    return f"len(result) == 0 || isNaN(result[0]) || result[0] {_KEEP[rule.op]} {limit}"


def rollback_metric(
    budget: Budget, policy: Policy, rule: Rule, notes: list[str]
) -> JsonDict | None:
    """One rollback rule as a Prometheus-provider metric (None when it cannot apply)."""
    sel = canary_selector(budget)
    w = promql_duration(policy.window_s)
    requests = f"sum by (service) (increase({names.REQUESTS_TOTAL}{{{sel}}}[{w}]))"
    latencies = f"sum by (service) (increase({names.REQUEST_DURATION}_count{{{sel}}}[{w}]))"

    def p_of(p: str) -> str:
        return (
            f"histogram_quantile({num(quantile(p))}, sum by (service, le) "
            f"(rate({names.REQUEST_DURATION}_bucket{{{sel}}}[{w}])))"
        )

    kind = exported_kind(rule, "argo-rollouts", notes)
    if kind is None:
        return None
    if kind == "error_rate":
        guard = f"{requests} >= {policy.min_samples}"
        z = z_of(policy.confidence)
        lower = wilson_lower_expr(f"({error_ratio_expr(sel, w)})", f"({requests})", z)
        series = f"({lower})\nand on (service) {guard}"
    elif kind == "p99_vs_baseline":
        if policy.baseline_p99_ms is None:
            notes.append(
                f"rule {rule.name!r} ({rule_words(rule)}) is inactive: no "
                "baseline_p99_ms in the policy; the verdict metric still covers it when "
                "`tailbudget serve` has a baseline."
            )
            return None
        guard = f"{latencies} >= {policy.min_samples}"
        base = num(seconds(policy.baseline_p99_ms))
        series = f"{p_of('p99')} / {base}\nand on (service) {guard}"
    else:
        guard = f"{latencies} >= {policy.min_samples}"
        series = f"{p_of(rule.metric)}\nand on (service) {guard}"
        rule = rule.model_copy(update={"threshold": seconds(rule.threshold)})
    return prometheus_metric(rule.name, rule, policy, held_for(series, rule, policy))


def verdict_metric(policy: Policy) -> JsonDict:
    """The web metric reading `tailbudget serve`'s verdict (the in-process controller)."""
    return {
        "name": "tailbudget-verdict",
        "interval": promql_duration(policy.evaluate_every_s),
        "failureLimit": 0,
        "successCondition": 'result != "rollback"',
        "provider": {
            "web": {
                "url": f"{{{{args.{VERDICT_ARG}}}}}",
                "jsonPath": "{$.verdict}",
                "timeoutSeconds": 5,
            }
        },
    }


def prometheus_metric(
    name: str, rule: Rule, policy: Policy, query: str, threshold: float | None = None
) -> JsonDict:
    """An Argo metric failing the analysis at the first measurement that triggers `rule`."""
    return {
        "name": k8s_name(name),
        "interval": promql_duration(policy.evaluate_every_s),
        "failureLimit": 0,
        "successCondition": success_condition(rule, threshold),
        "provider": {"prometheus": {"address": f"{{{{args.{PROMETHEUS_ARG}}}}}", "query": query}},
    }


def template(
    budget: Budget,
    options: ExportOptions,
    metrics: list[JsonDict],
    notes: list[str],
    args: tuple[JsonDict, ...] = (),
) -> JsonDict:
    """The AnalysisTemplate around `metrics` (the verdict metric appended); adds the notes."""
    policy = policy_of(budget)
    if not any(r.action == "rollback" for r in policy.rules):
        notes.append("the policy has no rollback rule: only the verdict metric is generated.")
    doc: JsonDict = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "AnalysisTemplate",
        "metadata": k8s_metadata(budget, options, "tailbudget"),
        "spec": {
            "args": [
                {"name": PROMETHEUS_ARG, "value": options.prometheus_url},
                {"name": VERDICT_ARG, "value": options.verdict_url},
                {"name": CANARY_HASH_ARG, "valueFrom": {"podTemplateHashValue": "Latest"}},
                *args,
            ],
            "metrics": [*metrics, verdict_metric(policy)],
        },
    }
    notes.append(
        "run it as background analysis (strategy.canary.analysis.templates): the metrics "
        "have no count and measure until the rollout completes. The conditions use isNaN, "
        "which older Argo Rollouts releases lack."
    )
    notes.append(
        f"queries read the canary's pods only, by the {HASH_LABEL} label: have Prometheus copy "
        "the pod label rollouts-pod-template-hash to the series (PodMonitor podTargetLabels, "
        "or a relabel of __meta_kubernetes_pod_label_rollouts_pod_template_hash); without it "
        "they find no data, which passes. The verdict metric is the view of whatever posts "
        "to `tailbudget serve`."
    )
    return doc


def build(budget: Budget, options: ExportOptions | None = None) -> tuple[JsonDict, list[str]]:
    """The AnalysisTemplate as a mapping, and notes."""
    options = options or ExportOptions()
    policy = policy_of(budget)
    notes: list[str] = []
    metrics = [
        m
        for r in policy.rules
        if r.action == "rollback" and (m := rollback_metric(budget, policy, r, notes))
    ]
    return template(budget, options, metrics + class_metrics(budget, policy), notes), notes


def class_metrics(budget: Budget, policy: Policy) -> list[JsonDict]:
    """One metric per gated class objective: the canary's class percentile within target."""
    hash_sel = f'{HASH_LABEL}="{{{{args.{CANARY_HASH_ARG}}}}}"'
    w = promql_duration(policy.window_s)
    return [
        _class_metric(
            c, policy, quantile_query(budget, c.name, c.objective.percentile, w, hash_sel, c)
        )
        for c in class_objectives(budget)
    ]


def _class_metric(c: ClassObjective | FleetClassCheck, policy: Policy, query: str) -> JsonDict:
    """A class objective's metric: its percentile (the query, in seconds) within target;
    no data passes. One shape for tailbudget's series and a serving stack's."""
    return {
        "name": k8s_name(f"class-{c.name}-{c.slug}"),
        "interval": promql_duration(policy.evaluate_every_s),
        "failureLimit": 0,
        "successCondition": "len(result) == 0 || isNaN(result[0]) || result[0] <= "
        f"{num(seconds(c.objective.target_ms))}",
        "provider": {"prometheus": {"address": f"{{{{args.{PROMETHEUS_ARG}}}}}", "query": query}},
    }


def render(budget: Budget, options: ExportOptions | None = None) -> str:
    """The AnalysisTemplate (YAML); on a serving stack's histograms with `options.metrics`."""
    on_server = histograms.server_preset(options) is not None
    doc, notes = build_fleet(budget, options) if on_server else build(budget, options)
    return dump_yaml([doc], header(budget, "argo-rollouts", notes))


# ---- on a serving stack's own histograms (`--metrics vllm|sglang|tgi`) ----------------
# `--to argo-rollouts --metrics vllm|sglang|tgi`: the rollback rules on the server's series.
#
# The same AnalysisTemplate as for tailbudget's own series (see `argo`): one
# Prometheus metric per rollback rule on the canary's pods, its `for` in the
# query, one failure rolls back, no data passes, plus the verdict web metric.
# The queries read the preset's histograms scoped by its model label, and a
# `_vs_baseline` rule compares the canary with the stable ReplicaSet's pods
# (the `stable-hash` arg, `podTemplateHashValue: Stable`): the running version
# is the baseline. A rule the preset cannot express is left out with a note.


STABLE_HASH_ARG = "stable-hash"


def build_fleet(budget: Budget, options: ExportOptions | None = None) -> tuple[JsonDict, list[str]]:
    """The AnalysisTemplate on the preset's series, and notes."""
    options, fleet, policy = histograms.fleet_parts(budget, options)
    pods = (
        histograms.selector(fleet, budget, f'{HASH_LABEL}="{{{{args.{CANARY_HASH_ARG}}}}}"'),
        histograms.selector(fleet, budget, f'{HASH_LABEL}="{{{{args.{STABLE_HASH_ARG}}}}}"'),
    )
    rng, z = promql_duration(policy.window_s), z_of(policy.confidence)
    notes = [f"series of the {fleet.name} preset; {n}" for n in fleet.notes]
    metrics: list[JsonDict] = []
    for rule in (r for r in policy.rules if r.action == "rollback"):
        check = histograms.canary_check(fleet, budget, rule, pods, rng, policy.min_samples, z)
        if isinstance(check, str):
            notes.append(f"{check}; the verdict metric covers it")
            continue
        notes.extend(check.notes)
        guarded = f"({check.value})" + "".join(f"\nand on ()\n{g}" for g in check.guards)
        query = held_for(guarded, rule, policy, on="")
        metrics.append(prometheus_metric(rule.name, rule, policy, query, check.threshold))
    for c in fleet_class_checks(budget, fleet, pods[0], rng, policy.min_samples, notes):
        metrics.append(_class_metric(c, policy, f"({c.value})\nand on ()\n{c.guard}"))
    stable: JsonDict = {"name": STABLE_HASH_ARG, "valueFrom": {"podTemplateHashValue": "Stable"}}
    doc = template(budget, options, metrics, notes, (stable,))
    return doc, notes
