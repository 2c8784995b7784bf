"""`--to flagger`: MetricTemplates for the rollback rules and a Canary `analysis` snippet.

Reference: https://docs.flagger.app/usage/metrics (MetricTemplate, `{{ namespace }}`,
`{{ target }}`, `{{ interval }}` variables, thresholdRange) and
https://docs.flagger.app/usage/how-it-works#canary-analysis (interval, threshold,
maxWeight, stepWeight).

Flagger compares the canary with fixed ranges, so the queries select the
canary's pods (`<target>-<hash>-<hash>`) and the p99 rule compares the canary's
p99 with the primary's (`<target>-primary-...`): the primary is the baseline.
"""

from __future__ import annotations

import math
from typing import Any

import yaml

from tailbudget import _metric_names as names
from tailbudget.budget.model import Budget
from tailbudget.budget.policy import Policy, Rule
from tailbudget.export.common import (
    ExportOptions,
    dump_yaml,
    header,
    k8s_metadata,
    k8s_name,
    label_value,
    num,
    policy_of,
    promql_duration,
    quantile,
    seconds,
)

CANARY_PODS = 'pod=~"{{ target }}-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)"'
PRIMARY_PODS = 'pod=~"{{ target }}-primary-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)"'
DEFAULT_STEP_WEIGHT = 10
DEFAULT_MAX_WEIGHT = 50


def _sel(budget: Budget, pods: str) -> str:
    return f'namespace="{{{{ namespace }}}}", {pods}, service="{label_value(budget.service)}"'


def error_rate_query(budget: Budget) -> str:
    """Canary error ratio over the analysis interval."""
    sel = _sel(budget, CANARY_PODS)
    total = f"sum(rate({names.REQUESTS_TOTAL}{{{sel}}}[{{{{ interval }}}}]))"
    errors = f'sum(rate({names.REQUESTS_TOTAL}{{{sel}, outcome="error"}}[{{{{ interval }}}}]))'
    return f"({errors} or vector(0))\n/\n{total}"


def quantile_query(budget: Budget, p: str, pods: str) -> str:
    """A percentile (s) of the pods' end-to-end latency over the analysis interval."""
    sel = _sel(budget, pods)
    return (
        f"histogram_quantile({num(quantile(p))}, sum by (le) "
        f"(rate({names.REQUEST_DURATION}_bucket{{{sel}}}[{{{{ interval }}}}])))"
    )


def template(budget: Budget, options: ExportOptions, suffix: str, query: str) -> dict[str, Any]:
    """One MetricTemplate."""
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


def _check(name: str, template_name: str, max_value: float, policy: Policy) -> dict[str, Any]:
    return {
        "name": name,
        "templateRef": {"name": template_name},
        "thresholdRange": {"max": max_value},
        "interval": promql_duration(policy.window_s),
    }


def build(
    budget: Budget, options: ExportOptions | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any], list[str]]:
    """(MetricTemplates, the Canary `analysis` block, notes)."""
    options = options or ExportOptions()
    policy = policy_of(budget)
    notes: list[str] = []
    templates: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    rollback: list[Rule] = [r for r in policy.rules if r.action == "rollback"]
    for rule in rollback:
        if rule.metric == "error_rate":
            t = template(budget, options, "error-rate", error_rate_query(budget))
            limit = rule.threshold
        elif rule.metric == "p99_vs_baseline":
            query = (
                f"{quantile_query(budget, 'p99', CANARY_PODS)}\n/\n"
                f"{quantile_query(budget, 'p99', PRIMARY_PODS)}"
            )
            t = template(budget, options, "p99-vs-primary", query)
            limit = rule.threshold
        else:
            query = quantile_query(budget, rule.metric, CANARY_PODS)
            t = template(budget, options, f"{rule.metric}-latency", query)
            limit = seconds(rule.threshold)
        if all(x["metadata"]["name"] != t["metadata"]["name"] for x in templates):
            templates.append(t)
        checks.append(_check(k8s_name(rule.name), t["metadata"]["name"], limit, policy))
    if not rollback:
        notes.append("the policy has no rollback rule: the analysis has no metric checks.")
    every = policy.evaluate_every_s
    for_s = max((r.for_s for r in rollback), default=policy.rollback_for_s)
    analysis = {
        "interval": promql_duration(every),
        # Flagger rolls back after `threshold` failed checks: one per evaluation over `for`.
        "threshold": max(1, math.ceil(for_s / every)),
        "maxWeight": DEFAULT_MAX_WEIGHT,
        "stepWeight": DEFAULT_STEP_WEIGHT,
        "metrics": checks,
        # `tailbudget serve` answers 503 unless healthy in mode=flagger: its controller's
        # verdict becomes a failed check, counted like the metric checks.
        "webhooks": [
            {
                "name": "tailbudget-verdict",
                "type": "rollout",
                "url": _with_query(options.verdict_url, "mode=flagger"),
                "timeout": "5s",
            }
        ],
    }
    notes.append(
        f"maxWeight {DEFAULT_MAX_WEIGHT} and stepWeight {DEFAULT_STEP_WEIGHT} are rollout "
        "choices the budget does not hold: adjust them."
    )
    notes.append(
        "the rollout webhook calls `tailbudget serve`'s verdict in mode=flagger, which answers "
        "503 unless healthy: an unknown verdict (too few samples) also fails that check."
    )
    notes.append(
        "Flagger counts failed checks in total, not in a row; the queries use the raw ratio "
        "over the interval (no minimum sample count)."
    )
    return templates, analysis, notes


def render(budget: Budget, options: ExportOptions | None = None) -> str:
    """MetricTemplates (YAML documents) followed by the analysis snippet as a comment."""
    templates, analysis, notes = build(budget, options)
    text = dump_yaml(templates, header(budget, "flagger", notes))
    snippet = yaml.safe_dump({"analysis": analysis}, sort_keys=False, width=100)
    text += "#\n# Canary analysis: paste under your Canary's spec:\n"
    text += "".join(f"#   {line}\n" for line in snippet.splitlines())
    return text


def snippet_from(text: str) -> dict[str, Any]:
    """Read back the commented analysis snippet of `render`'s output (for tests and tools)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# Canary analysis"))
    body = "\n".join(line[4:] for line in lines[start + 1 :] if line.startswith("#   "))
    loaded = yaml.safe_load(body)
    assert isinstance(loaded, dict)
    return loaded
