"""`--to flagger --metrics vllm|sglang|tgi`: MetricTemplates on the server's own series.

The same layout as for tailbudget's own series (see `flagger`): one
MetricTemplate per rollback rule on the canary's pods over `{{ interval }}`,
`_vs_baseline` rules comparing the canary with the primary, and the Canary
`analysis` block with the verdict webhooks. Goodput rules breach when they
fall, so their check is a `thresholdRange.min`, and below `min_samples` their
query answers 1 rather than 0: unknown passes either way.
"""

from __future__ import annotations

from typing import Any

from tailbudget._fleet import preset
from tailbudget.budget.model import Budget
from tailbudget.control.stats import z_of
from tailbudget.export import fleet_common as fc
from tailbudget.export.common import ExportOptions, k8s_name, num, policy_of
from tailbudget.export.flagger import (
    CANARY_PODS,
    PRIMARY_PODS,
    analysis_block,
    check,
    template,
    text_of,
    unknown_passes,
)

__all__ = ["build", "render"]

NAMESPACE = 'namespace="{{ namespace }}"'


def build(
    budget: Budget, options: ExportOptions | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any], list[str]]:
    """(MetricTemplates, the Canary `analysis` block, notes) on the preset's series."""
    options = options or ExportOptions()
    fleet = preset(options.metrics)
    policy = policy_of(budget)
    pods = (
        fc.selector(fleet, budget, NAMESPACE, CANARY_PODS),
        fc.selector(fleet, budget, NAMESPACE, PRIMARY_PODS),
    )
    z = z_of(policy.confidence)
    notes = [f"series of the {fleet.name} preset; {n}" for n in fleet.notes]
    templates: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    for rule in (r for r in policy.rules if r.action == "rollback"):
        found = fc.canary_check(fleet, budget, rule, pods, "{{ interval }}", policy.min_samples, z)
        if isinstance(found, str):
            notes.append(f"{found}; the verdict webhook covers it")
            continue
        notes.extend(found.notes)
        passing = "0" if rule.rising else num(max(1.0, found.threshold))
        query = unknown_passes(found.value, list(found.guards), passing)
        t = template(budget, options, rule.metric.replace(".", "-").replace("_", "-"), query)
        if all(x["metadata"]["name"] != t["metadata"]["name"] for x in templates):
            templates.append(t)
        bound = "max" if rule.rising else "min"
        name = t["metadata"]["name"]
        checks.append(check(k8s_name(rule.name), name, found.threshold, policy, bound))
    return templates, analysis_block(policy, options, checks, notes), notes


def render(budget: Budget, options: ExportOptions | None = None) -> str:
    """MetricTemplates for a fleet preset, then the analysis snippet as a comment."""
    return text_of(budget, *build(budget, options))
