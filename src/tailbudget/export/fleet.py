"""Prometheus rules and a KEDA trigger on a serving stack's own histograms (`--metrics vllm`).

For `--metrics vllm|sglang|tgi` the rules read the server's histograms directly
(no recording rules of tailbudget's own metrics are needed):

- one alert per policy rule on a percentile the preset maps (`ttft.p95` ->
  `histogram_quantile(0.95, ... vllm:time_to_first_token_seconds_bucket ...)`),
  guarded by the request count so too few samples stay silent (unknown), with
  the rule's `for`;
- the KEDA trigger on the scale_up rule runs the very expression the alert
  compares, so the alert and the autoscaler fire on the same series;
- a latency SLI per objective counting requests under the `le` bound nearest the
  target, with multi-window multi-burn-rate alerts; when no bound equals the
  target the rule and the header say which bound stands in.
"""

from __future__ import annotations

import re
from typing import Any

from tailbudget._fleet import FleetPreset, FleetSeries, check_target, preset
from tailbudget.budget.model import Budget
from tailbudget.budget.objectives import Objective
from tailbudget.budget.policy import Policy, Rule
from tailbudget.control.stats import z_of
from tailbudget.errors import PolicyError
from tailbudget.export import fleet_common as fc
from tailbudget.export.common import (
    LABEL_PREFIX,
    ExportOptions,
    dump_yaml,
    header,
    k8s_name,
    le_label,
    num,
    policy_of,
    promql_duration,
    seconds,
    template_text,
)
from tailbudget.export.keda import scaled_object, scaling_notes

__all__ = ["quantile_expr", "render_keda", "render_rules"]


def _series_of(fleet: FleetPreset, rule: Rule) -> FleetSeries | None:
    return fleet.of(rule.ref.series) if rule.ref.kind == "quantile" else None


def quantile_expr(
    fleet: FleetPreset, budget: Budget, policy: Policy, rule: Rule
) -> tuple[str, str]:
    """The rule's percentile (seconds) over the policy window, and the min-samples guard."""
    series = _series_of(fleet, rule)
    if series is None:
        raise PolicyError(f"rule {rule.name}: {fleet.name} exports no series for {rule.metric}")
    sel, rng = fc.selector(fleet, budget), promql_duration(policy.window_s)
    q = rule.ref.q
    assert q is not None
    guard = f"{fc.count_expr(series, sel, rng)} >= {policy.min_samples}"
    return fc.quantile_expr(series, q, sel, rng), guard


def _alert(fleet: FleetPreset, budget: Budget, policy: Policy, rule: Rule) -> dict[str, Any]:
    series = _series_of(fleet, rule)
    assert series is not None
    where = fc.resolve(series, rule.threshold, rule.metric)
    value, guard = quantile_expr(fleet, budget, policy, rule)
    annotations = {
        "summary": f"{template_text(budget.service)}: {rule.metric} above "
        f"{rule.threshold:g} ms -> {rule.action} (rule {template_text(rule.name)}, "
        f"{series.histogram})",
        "buckets": f"{where.around} around the threshold",
    }
    if where.check.warning:
        annotations["warning"] = where.check.warning
    expr = f"({value}) > {num(seconds(rule.threshold))} and on () ({guard})"
    return _alert_record(budget, rule, expr, annotations)


def _alert_record(
    budget: Budget, rule: Rule, expr: str, annotations: dict[str, str]
) -> dict[str, Any]:
    """A Prometheus alerting rule for a policy rule: its name, labels and `for`."""
    out: dict[str, Any] = {
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


def _share_alert(
    fleet: FleetPreset, budget: Budget, policy: Policy, rule: Rule
) -> dict[str, Any] | str:
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
    sel = fc.selector(fleet, budget)
    rng, z = promql_duration(policy.window_s), z_of(policy.confidence)
    check = fc.canary_check(fleet, budget, rule, (sel, sel), rng, policy.min_samples, z)
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
    return _alert_record(budget, rule, expr, annotations)


def sli_name(o: Objective) -> str:
    """The SLI's name in rule names: `p95` end to end, `ttft_p95`, `queue_p99_9`."""
    base = o.percentile if o.metric == "e2e" else f"{o.metric}_{o.percentile}"
    return re.sub(r"[^A-Za-z0-9_]", "_", base)


def _sli_rules(
    budget: Budget, fleet: FleetPreset, options: ExportOptions, notes: list[str]
) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    sel = fc.selector(fleet, budget)
    windows = sorted({w for b in options.burn_windows for w in (b.long_s, b.short_s)})
    mapped, _ = fc.objectives_of(budget, fleet)
    for o, series in mapped:
        name = sli_name(o)
        where = fc.resolve(series, o.target_ms, f"{o.key} SLI")
        notes.extend(where.notes)
        le = where.le
        if le is None:  # pragma: no cover - every preset's histograms have bounds
            continue
        for w in windows:
            rng = promql_duration(w)
            share = fc.share_expr(series, le, sel, rng).replace("\n", " ")
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


def build_rules(
    budget: Budget, options: ExportOptions | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The rule file (policy alerts on the server's own series, SLI burn alerts) and notes."""
    options = options or ExportOptions()
    fleet = preset(options.metrics)
    policy = policy_of(budget)
    notes = [f"series of the {fleet.name} preset; {n}" for n in fleet.notes]
    alerts = []
    for rule in policy.rules:
        series = _series_of(fleet, rule)
        if series is None:
            found = _share_alert(fleet, budget, policy, rule)
            if isinstance(found, str):
                notes.append(found)
            else:
                alerts.append(found)
            continue
        alerts.append(_alert(fleet, budget, policy, rule))
        warning = check_target(series, rule.threshold, rule.metric).warning
        if warning:
            notes.append(warning)
    notes.extend(fc.objectives_of(budget, fleet)[1])
    groups = [{"name": f"{budget.service}-policy-{fleet.name}", "rules": alerts}]
    sli = _sli_rules(budget, fleet, options, notes)
    if sli:
        groups.append({"name": f"{budget.service}-slo-{fleet.name}", "rules": sli})
    for g in groups:
        g["interval"] = promql_duration(options.rule_interval_s or policy.evaluate_every_s)
    return {"groups": groups}, notes


def render_rules(budget: Budget, options: ExportOptions | None = None) -> str:
    """The Prometheus rule file for a fleet preset (YAML)."""
    doc, notes = build_rules(budget, options)
    return dump_yaml([doc], header(budget, "prometheus-rules", notes))


def build_keda(
    budget: Budget, options: ExportOptions | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The ScaledObject whose trigger is the scale_up rule's alert expression."""
    options = options or ExportOptions()
    fleet = preset(options.metrics)
    policy = policy_of(budget)
    rule = next(
        (r for r in policy.rules if r.action == "scale_up" and _series_of(fleet, r) is not None),
        None,
    )
    series = None if rule is None else _series_of(fleet, rule)
    if rule is None or series is None:
        raise PolicyError(
            f"the policy has no scale_up rule on a percentile {fleet.name} exports; KEDA needs "
            "one (e.g. {metric: ttft.p95, threshold: 90% of ttft.p95, action: scale_up})"
        )
    query = "max(({}) and on () ({}))".format(*quantile_expr(fleet, budget, policy, rule))
    doc = scaled_object(
        budget, options, rule, query, annotations={f"{LABEL_PREFIX}/metrics": fleet.name}
    )
    where = fc.resolve(series, rule.threshold, rule.metric)
    notes = [
        f"scales on {rule.metric} > {num(seconds(rule.threshold))} s from "
        f"{series.histogram} (rule {rule.name!r}; {where.around} around it); the alert of "
        f"the prometheus-rules target on the {fleet.name} preset compares the same expression.",
        *([where.check.warning] if where.check.warning else []),
        *scaling_notes(policy),
    ]
    return doc, notes


def render_keda(budget: Budget, options: ExportOptions | None = None) -> str:
    """The KEDA ScaledObject for a fleet preset (YAML)."""
    doc, notes = build_keda(budget, options)
    return dump_yaml([doc], header(budget, "keda", notes))
