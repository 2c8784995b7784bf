"""`--to prometheus-rules`: recording rules, the policy as alerts, and SLO burn-rate alerts.

Three rule groups:

- `<service>-latency` (evaluated every `evaluate_every`): per-stage and end-to-end
  p50/p95/p99 over the policy window (histogram_quantile over the bucket rates),
  request counts, the error ratio and its Wilson lower bound (at the policy's
  confidence), which the rollback rule compares, as the controller does;
- `<service>-policy`: one alert per policy rule. `for:` is the rule's `for`
  (Prometheus' pending state has the same meaning: true at every evaluation over
  the span), the trigger stays firing while the metric is above the clear
  threshold (hysteresis through the ALERTS series) and `keep_firing_for` is the
  clear stabilization. Too few samples yields no series, so no alert: unknown
  never fires;
- `<service>-slo`: multi-window multi-burn-rate alerts on the error budget and on
  the latency SLI (share of requests slower than the SLO, counted from the `le`
  bucket at the SLO threshold).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from tailbudget import _metric_names as names
from tailbudget._fleet import FleetPreset, check_target
from tailbudget._units import PERCENTILES
from tailbudget.budget.model import Budget
from tailbudget.budget.policy import Policy, Rule
from tailbudget.control.stats import z_of
from tailbudget.export import histograms
from tailbudget.export.classes import classes_group, fleet_classes_group
from tailbudget.export.common import (
    BurnWindow,
    ExportOptions,
    bucket_at_or_below,
    camel,
    dump_yaml,
    error_lower_rule,
    error_ratio_rule,
    header,
    k8s_name,
    label_value,
    latency_buckets,
    le_label,
    native_rule,
    not_exported,
    num,
    policy_of,
    promql_duration,
    quantile,
    request_count_rule,
    request_quantile_rule,
    rule_words,
    seconds,
    service_selector,
    sli_name,
    slow_ratio_rule,
    stage_quantile_rule,
    template_text,
    wilson_lower_expr,
)

VALUE = '{{ $value | printf "%.4g" }}'
"""The alert's value in annotations (4 significant digits)."""
SEVERITY = {"scale_up": "info", "trim_logging": "warning", "shed_load": "critical"}
"""Alert severity by action; rollback is critical too."""


def requests_increase_rule(window_s: float) -> str:
    """Requests counted by tailbudget_requests_total over the window."""
    return f"service:tailbudget_requests:increase{promql_duration(window_s)}"


def error_ratio_expr(sel: str, window: str) -> str:
    """Share of requests with outcome=error over `window`, by service (0 with no error)."""
    total = f"sum by (service) (rate({names.REQUESTS_TOTAL}{{{sel}}}[{window}]))"
    errors = f'sum by (service) (rate({names.REQUESTS_TOTAL}{{{sel}, outcome="error"}}[{window}]))'
    # Without any error yet the error series does not exist; `or ... * 0` makes the ratio 0.
    return f"({errors} or {total} * 0) / {total}"


def latency_group(budget: Budget, policy: Policy, interval_s: float) -> dict[str, Any]:
    """Recording rules over the policy window (the inputs of the policy alerts)."""
    sel = service_selector(budget)
    w_s = policy.window_s
    w = promql_duration(w_s)
    rules: list[dict[str, Any]] = []
    for p in PERCENTILES:
        rules.append(
            {
                "record": stage_quantile_rule(p, w_s),
                "expr": f"histogram_quantile({num(quantile(p))}, sum by (service, stage, le) "
                f"(rate({names.STAGE_DURATION}_bucket{{{sel}}}[{w}])))",
            }
        )
    for p in PERCENTILES:
        rules.append(
            {
                "record": request_quantile_rule(p, w_s),
                "expr": f"histogram_quantile({num(quantile(p))}, sum by (service, le) "
                f"(rate({names.REQUEST_DURATION}_bucket{{{sel}}}[{w}])))",
            }
        )
    rules.append(
        {
            "record": request_count_rule(w_s),
            "expr": f"sum by (service) (increase({names.REQUEST_DURATION}_count{{{sel}}}[{w}]))",
        }
    )
    rules.append(
        {
            "record": requests_increase_rule(w_s),
            "expr": f"sum by (service) (increase({names.REQUESTS_TOTAL}{{{sel}}}[{w}]))",
        }
    )
    rules.append({"record": error_ratio_rule(w_s), "expr": error_ratio_expr(sel, w)})
    z = z_of(policy.confidence)
    p_ = f"{error_ratio_rule(w_s)}{{{sel}}}"
    n_ = f"{requests_increase_rule(w_s)}{{{sel}}}"
    rules.append({"record": error_lower_rule(w_s), "expr": wilson_lower_expr(p_, n_, z)})
    return {
        "name": f"tailbudget-{budget.service}-latency",
        "interval": promql_duration(interval_s),
        "rules": rules,
    }


def _rule_series(
    budget: Budget, policy: Policy, rule: Rule, notes: list[str]
) -> tuple[str, str, str, str, str] | None:
    """(trigger series, keep series, threshold, clear threshold, guard) or None when inactive."""
    sel = service_selector(budget)
    w_s = policy.window_s
    guard = f"{request_count_rule(w_s)}{{{sel}}} >= {policy.min_samples}"
    kind = native_rule(rule)
    if kind is None:
        notes.append(not_exported(rule, "prometheus-rules"))
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


def policy_alert(budget: Budget, policy: Policy, rule: Rule, notes: list[str]) -> dict[str, Any]:
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
    alert: dict[str, Any] = {"alert": name, "expr": expr}
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


def stage_alerts(budget: Budget, policy: Policy) -> list[dict[str, Any]]:
    """Info alerts: a stage over its slice at a gated percentile, sustained."""
    sel = service_selector(budget)
    service = template_text(budget.service)
    out: list[dict[str, Any]] = []
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


def policy_group(
    budget: Budget, policy: Policy, interval_s: float, notes: list[str]
) -> dict[str, Any]:
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


def slo_group(
    budget: Budget, options: ExportOptions, interval_s: float, notes: list[str]
) -> dict[str, Any] | None:
    """Multi-window multi-burn-rate alerts on the error budget and the latency SLI."""
    sel = service_selector(budget)
    windows = sorted({w for b in options.burn_windows for w in (b.long_s, b.short_s)})
    records: list[dict[str, Any]] = []
    alerts: list[dict[str, Any]] = []
    err = budget.objectives.error_rate
    if err is None or err <= 0:
        notes.append("slo.error_rate is not set: no error-budget burn-rate alerts.")
    else:
        for w_s in windows:
            records.append(
                {
                    "record": error_ratio_rule(w_s),
                    "expr": error_ratio_expr(sel, promql_duration(w_s)),
                }
            )
        for b in options.burn_windows:
            limit = b.factor * err
            if limit >= 1.0:
                notes.append(
                    f"error budget burn {num(b.factor)}x over "
                    f"{promql_duration(b.long_s)}/{promql_duration(b.short_s)} would need an "
                    f"error ratio of {num(limit)} (>= 1): skipped."
                )
                continue
            alerts.append(_burn_alert(budget, "ErrorBudgetBurn", error_ratio_rule, b, limit, {}))
    buckets = options.buckets_s or latency_buckets(budget)
    for p in budget.gated:
        target_ms = budget.objectives.e2e().get(p)
        if target_ms is None:  # pragma: no cover - the budget model requires gated SLOs
            continue
        bound = bucket_at_or_below(seconds(target_ms), buckets)
        if bound is None:
            notes.append(
                f"slo.{p} = {num(target_ms)} ms is below every histogram bucket: "
                f"no latency burn-rate alert for {p}."
            )
            continue
        if abs(bound - seconds(target_ms)) > 1e-12:
            notes.append(
                f"slo.{p} = {num(target_ms)} ms is not a bucket bound; the latency SLI counts "
                f"requests over le={le_label(bound)} s as slow (stricter). Add "
                f"{num(seconds(target_ms))} to the histogram buckets for an exact SLI."
            )
        allowed = round(1.0 - quantile(p), 9)
        for w_s in windows:
            w = promql_duration(w_s)
            good = (
                f"sum by (service) (rate({names.REQUEST_DURATION}_bucket"
                f'{{{sel}, le="{le_label(bound)}"}}[{w}]))'
            )
            total = f"sum by (service) (rate({names.REQUEST_DURATION}_count{{{sel}}}[{w}]))"
            records.append({"record": slow_ratio_rule(p, w_s), "expr": f"1 - {good} / {total}"})
        for b in options.burn_windows:
            limit = b.factor * allowed
            if limit >= 1.0:
                notes.append(
                    f"latency burn {num(b.factor)}x for {p} needs a slow share of "
                    f"{num(limit)} (>= 1): skipped."
                )
                continue
            alerts.append(
                _burn_alert(
                    budget,
                    f"LatencyBudgetBurn{p.upper()}",
                    partial(slow_ratio_rule, p),
                    b,
                    limit,
                    {"percentile": p, "slo_seconds": num(seconds(target_ms))},
                )
            )
    if not records:
        return None
    return {
        "name": f"tailbudget-{budget.service}-slo",
        "interval": promql_duration(interval_s),
        "rules": records + alerts,
    }


def _burn_alert(
    budget: Budget,
    kind: str,
    series: Callable[[float], str],
    b: BurnWindow,
    limit: float,
    extra: dict[str, str],
) -> dict[str, Any]:
    sel = service_selector(budget)
    long_w, short_w = promql_duration(b.long_s), promql_duration(b.short_s)
    expr = (
        f"{series(b.long_s)}{{{sel}}} > {num(limit)}\n"
        f"and on (service)\n{series(b.short_s)}{{{sel}}} > {num(limit)}"
    )
    return {
        "alert": f"Tailbudget{kind}{camel(long_w)}",
        "expr": expr,
        "labels": {
            "severity": b.severity,
            "service": template_text(budget.service),
            "long_window": long_w,
            "short_window": short_w,
            "burn_rate": num(b.factor),
            **extra,
        },
        "annotations": {
            "summary": f"{template_text(budget.service)}: {kind} at {num(b.factor)}x over "
            f"{long_w} and {short_w}",
            "description": f"The bad share is above {num(limit)} ({num(b.factor)}x the budget) "
            f"over both {long_w} and {short_w}.",
        },
    }


def build(budget: Budget, options: ExportOptions | None = None) -> tuple[dict[str, Any], list[str]]:
    """The rules file as a mapping, and the notes about what could not be expressed."""
    options = options or ExportOptions()
    policy = policy_of(budget)
    interval = options.rule_interval_s or policy.evaluate_every_s
    notes: list[str] = []
    groups = [
        latency_group(budget, policy, interval),
        policy_group(budget, policy, interval, notes),
    ]
    slo = slo_group(budget, options, options.rule_interval_s or 60.0, notes)
    if slo is not None:
        groups.append(slo)
    per_class = classes_group(budget, options, policy.window_s, policy.min_samples, notes)
    if per_class is not None:
        groups.append(per_class)
    buckets = options.buckets_s or latency_buckets(budget)
    notes.append(
        "the latency SLI reads the `le` buckets of "
        f"{names.REQUEST_DURATION}; export with these bounds (s): "
        + ", ".join(le_label(b) for b in buckets)
    )
    return {"groups": groups}, notes


def render(budget: Budget, options: ExportOptions | None = None) -> str:
    """The Prometheus rules file (YAML) for `promtool check rules` and `rule_files`.

    With `options.metrics` naming a serving stack, the rules read its own histograms.
    """
    on_server = histograms.server_preset(options) is not None
    doc, notes = build_fleet(budget, options) if on_server else build(budget, options)
    return dump_yaml([doc], header(budget, "prometheus-rules", notes))


# ---- on a serving stack's own histograms (`--metrics vllm|sglang|tgi`) ----------------


def _fleet_alert(fleet: FleetPreset, budget: Budget, policy: Policy, rule: Rule) -> dict[str, Any]:
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


def _fleet_share_alert(
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
) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
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


def build_fleet(
    budget: Budget, options: ExportOptions | None = None
) -> tuple[dict[str, Any], list[str]]:
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
    groups = [{"name": f"{budget.service}-policy-{fleet.name}", "rules": alerts}]
    sli = _fleet_sli_rules(budget, fleet, options, notes)
    if sli:
        groups.append({"name": f"{budget.service}-slo-{fleet.name}", "rules": sli})
    per_class = fleet_classes_group(budget, fleet, policy.window_s, policy.min_samples, notes)
    if per_class is not None:
        groups.append(per_class)
    for g in groups:
        g["interval"] = promql_duration(options.rule_interval_s or policy.evaluate_every_s)
    return {"groups": groups}, notes
