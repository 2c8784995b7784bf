"""`--to prometheus-rules --metrics vllm|sglang|tgi`: the policy's alerts and the SLI burn
alerts on a serving stack's own histograms."""

from __future__ import annotations

from tailbudget._fleet import FleetPreset, check_target
from tailbudget._json import JsonDict
from tailbudget.budget.model import Budget
from tailbudget.budget.policy import Policy, Rule
from tailbudget.control.stats import z_of
from tailbudget.export import histograms
from tailbudget.export.classes import fleet_classes_group
from tailbudget.export.common import (
    ExportOptions,
    k8s_name,
    le_label,
    num,
    promql_duration,
    seconds,
    sli_name,
    template_text,
)


def _fleet_alert(fleet: FleetPreset, budget: Budget, policy: Policy, rule: Rule) -> JsonDict:
    series = histograms.series_of(fleet, rule)
    assert series is not None
    where = histograms.resolve(series, rule.threshold, rule.metric)
    value, guard = histograms.rule_quantile(fleet, budget, policy, rule)
    annotations = {
        "summary": f"{template_text(budget.service)}: {rule.metric} above "
        f"{rule.threshold:g} ms -> {rule.action} (rule {template_text(rule.name)}, "
        f"{series.histogram})",
        "buckets": f"{where.around} around the threshold",
    }
    if where.check.warning:
        annotations["warning"] = where.check.warning
    expr = f"({value}) > {num(seconds(rule.threshold))} and on () ({guard})"
    return _fleet_alert_record(budget, rule, expr, annotations)


def _fleet_alert_record(
    budget: Budget, rule: Rule, expr: str, annotations: dict[str, str]
) -> JsonDict:
    """A Prometheus alerting rule for a policy rule: its name, labels and `for`."""
    out: JsonDict = {
        "alert": f"{k8s_name(budget.service).replace('-', '_')}_{rule.name}".replace(".", "_"),
        "expr": expr,
        "labels": {
            "severity": "page" if rule.action == "rollback" else "ticket",
            "action": rule.action,
            "tailbudget_rule": template_text(rule.name),
        },
        "annotations": annotations,
    }
    if rule.for_s > 0:
        out["for"] = promql_duration(rule.for_s)
    return out


def _fleet_share_alert(
    fleet: FleetPreset, budget: Budget, policy: Policy, rule: Rule
) -> JsonDict | str:
    """An error-rate or goodput rule on the model's whole fleet, or a note why not."""
    kind = rule.ref.kind
    if kind not in ("error_rate", "goodput"):
        if kind in ("vs_baseline", "goodput_vs_baseline"):
            return (
                f"rule {rule.name} ({rule.metric}): the rules have no baseline version to "
                "compare with; the argo-rollouts and flagger targets compare the canary with "
                "the stable pods"
            )
        return f"rule {rule.name} ({rule.metric}): {fleet.name} exports no such series"
    sel = histograms.selector(fleet, budget)
    rng, z = promql_duration(policy.window_s), z_of(policy.confidence)
    check = histograms.canary_check(fleet, budget, rule, (sel, sel), rng, policy.min_samples, z)
    if isinstance(check, str):
        return check
    guards = "".join(f" and on () ({g})" for g in check.guards)
    annotations = {
        "summary": f"{template_text(budget.service)}: {rule.metric} {rule.op} "
        f"{num(check.threshold)} -> {rule.action} (rule {template_text(rule.name)}, "
        + ("Wilson lower bound" if kind == "error_rate" else "Wilson upper bound")
        + f" at {policy.confidence:g})",
        **({"buckets": "; ".join(check.notes)} if check.notes else {}),
    }
    expr = f"({check.value}) {rule.op} {num(check.threshold)}{guards}"
    return _fleet_alert_record(budget, rule, expr, annotations)


def _fleet_sli_rules(
    budget: Budget, fleet: FleetPreset, options: ExportOptions, notes: list[str]
) -> list[JsonDict]:
    rules: list[JsonDict] = []
    sel = histograms.selector(fleet, budget)
    windows = sorted({w for b in options.burn_windows for w in (b.long_s, b.short_s)})
    mapped, _ = histograms.objectives_of(budget, fleet)
    for o, series in mapped:
        name = sli_name(o)
        where = histograms.resolve(series, o.target_ms, f"{o.key} SLI")
        notes.extend(where.notes)
        le = where.le
        if le is None:  # pragma: no cover - every preset's histograms have bounds
            continue
        for w in windows:
            rng = promql_duration(w)
            share = histograms.share_expr(series, le, sel, rng).replace("\n", " ")
            rules.append(
                {
                    "record": f"{fleet.name}:{name}_slow_ratio:rate{rng}",
                    "expr": f"1 - ({share})",
                    "labels": {"le_used": le_label(le), "target_ms": num(o.target_ms)},
                }
            )
        allowed = 1.0 - o.q
        for b in options.burn_windows:
            long_r = f"{fleet.name}:{name}_slow_ratio:rate{promql_duration(b.long_s)}"
            short_r = f"{fleet.name}:{name}_slow_ratio:rate{promql_duration(b.short_s)}"
            limit = num(b.factor * allowed)
            rules.append(
                {
                    "alert": f"{k8s_name(budget.service).replace('-', '_')}_{name}_burn_"
                    f"{promql_duration(b.long_s)}",
                    "expr": f"{long_r} > {limit} and {short_r} > {limit}",
                    "labels": {"severity": b.severity},
                    "annotations": {
                        "summary": f"{template_text(budget.service)}: "
                        f"{template_text(o.key)} error budget burning "
                        f"{b.factor:g}x (le={le:g} s stands for {o.target_ms:g} ms)"
                    },
                }
            )
    return rules


def build_fleet(budget: Budget, options: ExportOptions | None = None) -> tuple[JsonDict, list[str]]:
    """The rule file (policy alerts on the server's own series, SLI burn alerts) and notes."""
    options, fleet, policy = histograms.fleet_parts(budget, options)
    notes = [f"series of the {fleet.name} preset; {n}" for n in fleet.notes]
    alerts = []
    for rule in policy.rules:
        series = histograms.series_of(fleet, rule)
        if series is None:
            found = _fleet_share_alert(fleet, budget, policy, rule)
            if isinstance(found, str):
                notes.append(found)
            else:
                alerts.append(found)
            continue
        alerts.append(_fleet_alert(fleet, budget, policy, rule))
        warning = check_target(series, rule.threshold, rule.metric).warning
        if warning:
            notes.append(warning)
    notes.extend(histograms.objectives_of(budget, fleet)[1])
    groups: list[JsonDict] = [{"name": f"{budget.service}-policy-{fleet.name}", "rules": alerts}]
    sli = _fleet_sli_rules(budget, fleet, options, notes)
    if sli:
        groups.append({"name": f"{budget.service}-slo-{fleet.name}", "rules": sli})
    per_class = fleet_classes_group(budget, fleet, policy.window_s, policy.min_samples, notes)
    if per_class is not None:
        groups.append(per_class)
    for g in groups:
        g["interval"] = promql_duration(options.rule_interval_s or policy.evaluate_every_s)
    return {"groups": groups}, notes
