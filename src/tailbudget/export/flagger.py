"""`--to flagger`: MetricTemplates for the rollback rules and a Canary `analysis` snippet.

Reference: https://docs.flagger.app/usage/metrics (MetricTemplate, `{{ namespace }}`,
`{{ target }}`, `{{ interval }}` variables, thresholdRange) and
https://docs.flagger.app/usage/how-it-works#canary-analysis (interval, threshold,
maxWeight, stepWeight).

Flagger compares the canary with fixed ranges, so the queries select the
canary's pods (`<target>-<hash>-<hash>`) and the p99 rule compares the canary's
p99 with the primary's (`<target>-primary-...`): the primary is the baseline.

Unknown never acts. Flagger counts a query with no result as a failed check,
so each query answers 0 (which passes) while the interval holds fewer than the
policy's `min_samples` requests. Promotion still waits for evidence: a
confirm-promotion webhook on `tailbudget serve`'s verdict holds it until the
verdict is healthy, without counting failures; the rollout webhook fails only
on a rollback verdict.
"""

from __future__ import annotations

import math

import yaml

from tailbudget import _metric_names as names
from tailbudget._json import JsonDict
from tailbudget.budget.model import Budget
from tailbudget.budget.policy import Policy, Rule
from tailbudget.control.stats import z_of
from tailbudget.export import histograms
from tailbudget.export.classes import class_objectives, fleet_class_checks
from tailbudget.export.classes import quantile_query as class_quantile
from tailbudget.export.common import (
    ExportOptions,
    dump_yaml,
    exported_kind,
    header,
    k8s_metadata,
    k8s_name,
    label_value,
    num,
    policy_of,
    promql_duration,
    quantile,
    seconds,
    wilson_lower_expr,
)

CANARY_PODS = 'pod=~"{{ target }}-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)"'
PRIMARY_PODS = 'pod=~"{{ target }}-primary-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)"'
DEFAULT_STEP_WEIGHT = 10
DEFAULT_MAX_WEIGHT = 50


def _sel(budget: Budget, pods: str) -> str:
    return f'namespace="{{{{ namespace }}}}", {pods}, service="{label_value(budget.service)}"'


def enough(count_metric: str, budget: Budget, pods: str, min_samples: int) -> str:
    """PromQL that is non-empty when the pods served `min_samples` requests in the interval."""
    sel = _sel(budget, pods)
    return f"sum(increase({count_metric}{{{sel}}}[{{{{ interval }}}}])) >= {min_samples}"


def unknown_passes(query: str, guards: list[str], passing: str = "0") -> str:
    """`query` where every guard holds, else `passing`: a pass, not Flagger's failed check."""
    held = "".join(f"\nand on ()\n{g}" for g in guards)
    return f"(\n{query}{held}\n)\nor on () vector({passing})"


def error_rate_query(budget: Budget, policy: Policy) -> str:
    """The Wilson lower bound of the canary's error ratio over the analysis interval, as
    the policy's error-rate rule reads it (0 below `min_samples` requests)."""
    sel = _sel(budget, CANARY_PODS)
    total = f"sum(rate({names.REQUESTS_TOTAL}{{{sel}}}[{{{{ interval }}}}]))"
    errors = f'sum(rate({names.REQUESTS_TOTAL}{{{sel}, outcome="error"}}[{{{{ interval }}}}]))'
    requests = f"sum(increase({names.REQUESTS_TOTAL}{{{sel}}}[{{{{ interval }}}}]))"
    ratio = f"(({errors} or vector(0))\n/\n{total})"
    lower = wilson_lower_expr(ratio, f"({requests})", z_of(policy.confidence))
    return unknown_passes(lower, [f"{requests} >= {policy.min_samples}"])


def quantile_query(budget: Budget, p: str, pods: str) -> str:
    """A percentile (s) of the pods' end-to-end latency over the analysis interval."""
    sel = _sel(budget, pods)
    return (
        f"histogram_quantile({num(quantile(p))}, sum by (le) "
        f"(rate({names.REQUEST_DURATION}_bucket{{{sel}}}[{{{{ interval }}}}])))"
    )


def _latency_guard(budget: Budget, pods: str, min_samples: int) -> str:
    return enough(f"{names.REQUEST_DURATION}_count", budget, pods, min_samples)


def template_name(budget: Budget, suffix: str) -> str:
    """The name of the MetricTemplate `template(budget, options, suffix, ...)` writes."""
    return k8s_name(budget.service, suffix)


def template(budget: Budget, options: ExportOptions, suffix: str, query: str) -> JsonDict:
    """One MetricTemplate (named `template_name(budget, suffix)`)."""
    metadata = k8s_metadata(budget, options, suffix)
    return {
        "apiVersion": "flagger.app/v1beta1",
        "kind": "MetricTemplate",
        "metadata": metadata,
        "spec": {
            "provider": {"type": "prometheus", "address": options.prometheus_url},
            "query": query,
        },
    }


def _with_query(url: str, query: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{query}"


def check(
    name: str, template_name: str, limit: float, policy: Policy, bound: str = "max"
) -> JsonDict:
    """A Canary metric check: the template's value must stay within `bound` (max, min)."""
    return {
        "name": name,
        "templateRef": {"name": template_name},
        "thresholdRange": {bound: limit},
        "interval": promql_duration(policy.window_s),
    }


def analysis_block(
    policy: Policy, options: ExportOptions, checks: list[JsonDict], notes: list[str]
) -> JsonDict:
    """The Canary `analysis` block around `checks`, with the verdict webhooks; adds notes."""
    rollback: list[Rule] = [r for r in policy.rules if r.action == "rollback"]
    if not rollback:
        notes.append("the policy has no rollback rule: the analysis has no metric checks.")
    every = policy.evaluate_every_s
    for_s = max((r.for_s for r in rollback), default=policy.rollback_for_s)
    analysis: JsonDict = {
        "interval": promql_duration(every),
        # Flagger rolls back after `threshold` failed checks: one per evaluation over `for`.
        "threshold": max(1, math.ceil(for_s / every)),
        "maxWeight": DEFAULT_MAX_WEIGHT,
        "stepWeight": DEFAULT_STEP_WEIGHT,
        "metrics": checks,
        "webhooks": [
            # A rollback verdict of `tailbudget serve`'s controller is a failed check,
            # counted like the metric checks; healthy and unknown answer 200.
            {
                "name": "tailbudget-verdict",
                "type": "rollout",
                "url": _with_query(options.verdict_url, "mode=flagger"),
                "timeout": "5s",
            },
            # Promotion waits (no failure counted) until the verdict is healthy: no data
            # from a canary is no reason to promote it.
            {
                "name": "tailbudget-healthy",
                "type": "confirm-promotion",
                "url": _with_query(options.verdict_url, "mode=flagger-promotion"),
                "timeout": "5s",
            },
        ],
    }
    notes.append(
        f"maxWeight {DEFAULT_MAX_WEIGHT} and stepWeight {DEFAULT_STEP_WEIGHT} are rollout "
        "choices the budget does not hold: adjust them."
    )
    notes.append(
        "unknown never acts: below min_samples requests in the interval each query answers "
        "a passing value (0 under a max, 1 over a goodput min), and the rollout webhook "
        "(mode=flagger) answers 503 only on a rollback verdict; the confirm-promotion "
        "webhook (mode=flagger-promotion) holds promotion, "
        "without counting failures, until `tailbudget serve`'s verdict is healthy."
    )
    notes.append(
        "Flagger counts failed checks in total, not in a row; the error-rate query is the "
        "Wilson lower bound of the canary's ratio over the interval, as the policy reads it."
    )
    return analysis


def build(
    budget: Budget, options: ExportOptions | None = None
) -> tuple[list[JsonDict], JsonDict, list[str]]:
    """(MetricTemplates, the Canary `analysis` block, notes)."""
    options = options or ExportOptions()
    policy = policy_of(budget)
    notes: list[str] = []
    templates: list[JsonDict] = []
    checks: list[JsonDict] = []
    rollback: list[Rule] = [r for r in policy.rules if r.action == "rollback"]
    named: set[str] = set()  # one template per name, however many rules read it
    n = policy.min_samples
    canary_guard = _latency_guard(budget, CANARY_PODS, n)
    for rule in rollback:
        kind = exported_kind(rule, "flagger", notes)
        if kind is None:
            continue
        if kind == "error_rate":
            suffix, query, limit = "error-rate", error_rate_query(budget, policy), rule.threshold
        elif kind == "p99_vs_baseline":
            query = (
                f"{quantile_query(budget, 'p99', CANARY_PODS)}\n/\n"
                f"{quantile_query(budget, 'p99', PRIMARY_PODS)}"
            )
            guards = [canary_guard, _latency_guard(budget, PRIMARY_PODS, n)]
            suffix, query, limit = "p99-vs-primary", unknown_passes(query, guards), rule.threshold
        else:
            query = quantile_query(budget, rule.metric, CANARY_PODS)
            suffix, query = f"{rule.metric}-latency", unknown_passes(query, [canary_guard])
            limit = seconds(rule.threshold)
        name = template_name(budget, suffix)
        if name not in named:
            named.add(name)
            templates.append(template(budget, options, suffix, query))
        checks.append(check(k8s_name(rule.name), name, limit, policy))
    class_templates, class_checks = class_parts(budget, options, policy)
    analysis = analysis_block(policy, options, checks + class_checks, notes)
    return templates + class_templates, analysis, notes


def class_parts(
    budget: Budget, options: ExportOptions, policy: Policy
) -> tuple[list[JsonDict], list[JsonDict]]:
    """A template and a check per gated class objective: the canary's class percentile
    (unknown below min_samples passes) within its target."""
    templates, checks = [], []
    for c in class_objectives(budget):
        p = c.objective.percentile
        query = class_quantile(budget, c.name, p, "{{ interval }}", CANARY_PODS, c)
        count = f"{c.histogram}_count"
        sel = f'namespace="{{{{ namespace }}}}", {CANARY_PODS}, {c.selector(budget)}'
        guard = f"sum(increase({count}{{{sel}}}[{{{{ interval }}}}])) >= {policy.min_samples}"
        suffix = f"class-{c.name}-{c.slug}"
        templates.append(template(budget, options, suffix, unknown_passes(query, [guard])))
        checks.append(
            check(
                k8s_name(suffix),
                template_name(budget, suffix),
                seconds(c.objective.target_ms),
                policy,
            )
        )
    return templates, checks


def render(budget: Budget, options: ExportOptions | None = None) -> str:
    """MetricTemplates (YAML documents) followed by the analysis snippet as a comment.

    With `options.metrics` naming a serving stack, the templates read its own histograms.
    """
    if histograms.server_preset(options) is not None:
        return text_of(budget, *build_fleet(budget, options))
    return text_of(budget, *build(budget, options))


def text_of(budget: Budget, templates: list[JsonDict], analysis: JsonDict, notes: list[str]) -> str:
    """The MetricTemplates as YAML, then the analysis snippet as a comment to paste."""
    text = dump_yaml(templates, header(budget, "flagger", notes))
    snippet = yaml.safe_dump({"analysis": analysis}, sort_keys=False, width=100)
    text += "#\n# Canary analysis: paste under your Canary's spec:\n"
    text += "".join(f"#   {line}\n" for line in snippet.splitlines())
    return text


def snippet_from(text: str) -> JsonDict:
    """Read back the commented analysis snippet of `render`'s output (for tests and tools)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# Canary analysis"))
    body = "\n".join(line[4:] for line in lines[start + 1 :] if line.startswith("#   "))
    loaded = yaml.safe_load(body)
    assert isinstance(loaded, dict)
    return loaded


# ---- on a serving stack's own histograms (`--metrics vllm|sglang|tgi`) ----------------
# `--to flagger --metrics vllm|sglang|tgi`: MetricTemplates on the server's own series.
#
# The same layout as for tailbudget's own series (see `flagger`): one
# MetricTemplate per rollback rule on the canary's pods over `{{ interval }}`,
# `_vs_baseline` rules comparing the canary with the primary, and the Canary
# `analysis` block with the verdict webhooks. Goodput rules breach when they
# fall, so their check is a `thresholdRange.min`, and below `min_samples` their
# query answers 1 rather than 0: unknown passes either way.


NAMESPACE = 'namespace="{{ namespace }}"'


def build_fleet(
    budget: Budget, options: ExportOptions | None = None
) -> tuple[list[JsonDict], JsonDict, list[str]]:
    """(MetricTemplates, the Canary `analysis` block, notes) on the preset's series."""
    options, fleet, policy = histograms.fleet_parts(budget, options)
    pods = (
        histograms.selector(fleet, budget, NAMESPACE, CANARY_PODS),
        histograms.selector(fleet, budget, NAMESPACE, PRIMARY_PODS),
    )
    z = z_of(policy.confidence)
    notes = [f"series of the {fleet.name} preset; {n}" for n in fleet.notes]
    templates: list[JsonDict] = []
    checks: list[JsonDict] = []
    named: set[str] = set()  # one template per name, however many rules read it
    for rule in (r for r in policy.rules if r.action == "rollback"):
        found = histograms.canary_check(
            fleet, budget, rule, pods, "{{ interval }}", policy.min_samples, z
        )
        if isinstance(found, str):
            notes.append(f"{found}; the verdict webhook covers it")
            continue
        notes.extend(found.notes)
        passing = "0" if rule.rising else num(max(1.0, found.threshold))
        query = unknown_passes(found.value, list(found.guards), passing)
        suffix = rule.metric.replace(".", "-").replace("_", "-")
        name = template_name(budget, suffix)
        if name not in named:
            named.add(name)
            templates.append(template(budget, options, suffix, query))
        bound = "max" if rule.rising else "min"
        checks.append(check(k8s_name(rule.name), name, found.threshold, policy, bound))
    canary = pods[0]
    for c in fleet_class_checks(budget, fleet, canary, "{{ interval }}", policy.min_samples, notes):
        suffix = f"class-{c.name}-{c.slug}"
        templates.append(template(budget, options, suffix, unknown_passes(c.value, [c.guard])))
        target = seconds(c.objective.target_ms)
        checks.append(check(k8s_name(suffix), template_name(budget, suffix), target, policy))
    return templates, analysis_block(policy, options, checks, notes), notes
