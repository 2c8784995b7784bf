"""The policy as Prometheus alerts (`--to prometheus-rules`, group `<service>-policy`).

One alert per policy rule: `for:` is the rule's `for` (Prometheus' pending state has the
same meaning), the trigger stays firing while the metric is above the clear threshold
(hysteresis through the ALERTS series) and `keep_firing_for` is the clear stabilization.
Too few samples yields no series, so no alert: unknown never fires. Plus per-stage info
alerts: a stage over its slice at a gated percentile, sustained.
"""

from __future__ import annotations

from tailbudget._json import JsonDict
from tailbudget.budget.model import Budget
from tailbudget.budget.policy import Policy, Rule
from tailbudget.export.common import (
    camel,
    error_lower_rule,
    error_ratio_rule,
    exported_kind,
    label_value,
    num,
    promql_duration,
    request_count_rule,
    request_quantile_rule,
    rule_words,
    seconds,
    service_selector,
    stage_quantile_rule,
    template_text,
)
from tailbudget.export.prometheus_records import requests_increase_rule

VALUE = '{{ $value | printf "%.4g" }}'
"""The alert's value in annotations (4 significant digits)."""
SEVERITY = {"scale_up": "info", "trim_logging": "warning", "shed_load": "critical"}
"""Alert severity by action; rollback is critical too."""


def _rule_series(
    budget: Budget, policy: Policy, rule: Rule, notes: list[str]
) -> tuple[str, str, str, str, str] | None:
    """(trigger series, keep series, threshold, clear threshold, guard) or None when inactive."""
    sel = service_selector(budget)
    w_s = policy.window_s
    guard = f"{request_count_rule(w_s)}{{{sel}}} >= {policy.min_samples}"
    kind = exported_kind(rule, "prometheus-rules", notes)
    if kind is None:
        return None
    if kind == "percentile":
        series = f"{request_quantile_rule(rule.metric, w_s)}{{{sel}}}"
        return (
            series,
            series,
            num(seconds(rule.threshold)),
            num(seconds(rule.clear_threshold)),
            guard,
        )
    if rule.metric == "error_rate":
        # As the controller: low traffic must not fire on binomial noise, so the trigger
        # compares the Wilson lower bound; recovery compares the point ratio.
        guard = f"{requests_increase_rule(w_s)}{{{sel}}} >= {policy.min_samples}"
        return (
            f"{error_lower_rule(w_s)}{{{sel}}}",
            f"{error_ratio_rule(w_s)}{{{sel}}}",
            num(rule.threshold),
            num(rule.clear_threshold),
            guard,
        )
    # p99_vs_baseline
    if policy.baseline_p99_ms is None:
        notes.append(
            f"rule {rule.name!r} ({rule_words(rule)}) is inactive: the "
            "policy has no baseline_p99_ms, so no alert is generated for it."
        )
        return None
    series = f"{request_quantile_rule('p99', w_s)}{{{sel}}}"
    base_s = seconds(policy.baseline_p99_ms)
    return (
        series,
        series,
        num(rule.threshold * base_s),
        num(rule.clear_threshold * base_s),
        guard,
    )


def alert_name(rule: Rule) -> str:
    """The Prometheus alert name of a policy rule."""
    return f"Tailbudget{camel(rule.name)}"


def policy_alert(budget: Budget, policy: Policy, rule: Rule, notes: list[str]) -> JsonDict:
    """One policy rule as a Prometheus alert, or {} when the rule is inactive."""
    parts = _rule_series(budget, policy, rule, notes)
    if parts is None:
        return {}
    trigger, keep, thr, clear, guard = parts
    name = alert_name(rule)
    firing = (
        f'ALERTS{{alertname="{name}", alertstate="firing", '
        f'service="{label_value(budget.service)}"}}'
    )
    expr = (
        f"(\n  {trigger} {rule.op} {thr}\n  or\n  ({keep} > {clear} and on (service) {firing})\n)"
        f"\nand on (service) ({guard})"
    )
    unit = "s" if rule.metric != "error_rate" else ""
    alert: JsonDict = {"alert": name, "expr": expr}
    if rule.for_s > 0:
        alert["for"] = promql_duration(rule.for_s)
    if rule.clear_for_s > 0:
        alert["keep_firing_for"] = promql_duration(rule.clear_for_s)
    labels = {
        "severity": SEVERITY.get(rule.action, "critical"),
        "service": template_text(budget.service),
        "action": rule.action,
        "rule": template_text(rule.name),
        "metric": rule.metric,
    }
    if policy.dry_run:
        labels["dry_run"] = "true"
    alert["labels"] = labels
    what = rule.metric if rule.metric != "p99_vs_baseline" else "p99"
    hold = promql_duration(rule.clear_for_s) if rule.clear_for_s else "0s"
    cooldown = promql_duration(rule.cooldown_s) if rule.cooldown_s else "0s"
    alert["annotations"] = {
        "summary": f"{template_text(budget.service)}: {what} {rule.op} {thr}{unit} "
        f"({template_text(rule.expr or rule.metric)}) -> {rule.action}",
        "description": (
            f"{what} is {VALUE}{unit} (threshold {thr}{unit}, clears at or under "
            f"{clear}{unit} held for {hold}). Action: {rule.action}. "
            f"Cooldown between actions: {cooldown}."
        ),
        "action": rule.action,
        "rule": template_text(rule.name),
        "threshold": thr,
        "clear_threshold": clear,
    }
    return alert


def stage_alerts(budget: Budget, policy: Policy) -> list[JsonDict]:
    """Info alerts: a stage over its slice at a gated percentile, sustained."""
    sel = service_selector(budget)
    service = template_text(budget.service)
    out: list[JsonDict] = []
    callers = budget.callers()
    for _, stage in budget.stages():
        if stage.budget is None or stage.name in callers:
            continue  # a caller's slice is its own time; its histogram holds its calls too
        name = template_text(stage.name)
        stage_sel = f'{sel}, stage="{label_value(stage.name)}"'
        for p, ms in stage.budget.given().items():
            if p not in budget.gated:
                continue
            series = f"{stage_quantile_rule(p, policy.window_s)}{{{stage_sel}}}"
            out.append(
                {
                    "alert": f"TailbudgetStageOverBudget{camel(stage.name)}{p.upper()}",
                    "expr": f"{series} > {num(seconds(ms))}",
                    "for": promql_duration(policy.rollback_for_s or policy.window_s),
                    "labels": {
                        "severity": "info",
                        "service": service,
                        "stage": name,
                        "percentile": p,
                    },
                    "annotations": {
                        "summary": f"{service}: stage {name} {p} over its {num(ms)} ms slice",
                        "description": f"{name} {p} is {VALUE}s; its budget "
                        f"slice is {num(seconds(ms))}s.",
                    },
                }
            )
    return out


def policy_group(budget: Budget, policy: Policy, interval_s: float, notes: list[str]) -> JsonDict:
    """The policy's rules as alerts, plus per-stage budget alerts."""
    alerts = [a for r in policy.rules if (a := policy_alert(budget, policy, r, notes))]
    alerts.extend(stage_alerts(budget, policy))
    for caller, terms in budget.callers().items():
        inside = ", ".join(s for term in terms for s in term)
        notes.append(
            f"stage {caller!r} has no over-budget alert: its slice is its own time, while "
            f"its histogram holds the calls inside it ({inside}), each alerted on its own."
        )
    return {
        "name": f"tailbudget-{budget.service}-policy",
        "interval": promql_duration(interval_s),
        "rules": alerts,
    }
