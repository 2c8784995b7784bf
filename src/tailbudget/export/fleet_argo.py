"""`--to argo-rollouts --metrics vllm|sglang|tgi`: the rollback rules on the server's series.

The same AnalysisTemplate as for tailbudget's own series (see `argo`): one
Prometheus metric per rollback rule on the canary's pods, its `for` in the
query, one failure rolls back, no data passes, plus the verdict web metric.
The queries read the preset's histograms scoped by its model label, and a
`_vs_baseline` rule compares the canary with the stable ReplicaSet's pods
(the `stable-hash` arg, `podTemplateHashValue: Stable`): the running version
is the baseline. A rule the preset cannot express is left out with a note.
"""

from __future__ import annotations

from typing import Any

from tailbudget._fleet import preset
from tailbudget.budget.model import Budget
from tailbudget.control.stats import z_of
from tailbudget.export import fleet_common as fc
from tailbudget.export.argo import (
    CANARY_HASH_ARG,
    HASH_LABEL,
    held_for,
    prometheus_metric,
    template,
)
from tailbudget.export.common import ExportOptions, dump_yaml, header, policy_of, promql_duration

__all__ = ["STABLE_HASH_ARG", "build", "render"]

STABLE_HASH_ARG = "stable-hash"


def build(budget: Budget, options: ExportOptions | None = None) -> tuple[dict[str, Any], list[str]]:
    """The AnalysisTemplate on the preset's series, and notes."""
    options = options or ExportOptions()
    fleet = preset(options.metrics)
    policy = policy_of(budget)
    pods = (
        fc.selector(fleet, budget, f'{HASH_LABEL}="{{{{args.{CANARY_HASH_ARG}}}}}"'),
        fc.selector(fleet, budget, f'{HASH_LABEL}="{{{{args.{STABLE_HASH_ARG}}}}}"'),
    )
    rng, z = promql_duration(policy.window_s), z_of(policy.confidence)
    notes = [f"series of the {fleet.name} preset; {n}" for n in fleet.notes]
    metrics: list[dict[str, Any]] = []
    for rule in (r for r in policy.rules if r.action == "rollback"):
        check = fc.canary_check(fleet, budget, rule, pods, rng, policy.min_samples, z)
        if isinstance(check, str):
            notes.append(f"{check}; the verdict metric covers it")
            continue
        notes.extend(check.notes)
        guarded = f"({check.value})" + "".join(f"\nand on ()\n{g}" for g in check.guards)
        query = held_for(guarded, rule, policy, on="")
        metrics.append(prometheus_metric(rule.name, rule, policy, query, check.threshold))
    stable = {"name": STABLE_HASH_ARG, "valueFrom": {"podTemplateHashValue": "Stable"}}
    doc = template(budget, options, metrics, notes, (stable,))
    return doc, notes


def render(budget: Budget, options: ExportOptions | None = None) -> str:
    """The AnalysisTemplate for a fleet preset (YAML)."""
    doc, notes = build(budget, options)
    return dump_yaml([doc], header(budget, "argo-rollouts", notes))
