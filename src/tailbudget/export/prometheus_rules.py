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

from tailbudget import _metric_names as names
from tailbudget._json import JsonDict
from tailbudget.budget.model import Budget
from tailbudget.export import histograms
from tailbudget.export.classes import classes_group
from tailbudget.export.common import (
    ExportOptions,
    dump_yaml,
    header,
    latency_buckets,
    le_label,
    policy_of,
)
from tailbudget.export.prometheus_alerts import VALUE, policy_group
from tailbudget.export.prometheus_burn import slo_group
from tailbudget.export.prometheus_fleet import build_fleet
from tailbudget.export.prometheus_records import error_ratio_expr, latency_group

__all__ = ["VALUE", "build", "build_fleet", "error_ratio_expr", "render"]


def build(budget: Budget, options: ExportOptions | None = None) -> tuple[JsonDict, list[str]]:
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
