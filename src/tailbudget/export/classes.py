"""Objectives per class in every export: the `class` label on tailbudget's series.

`tailbudget serve` labels its request histogram with each observation's class (bounded
by the budget's class list; anything else is `other`). Every target reads each listed
class's gated end-to-end objectives from those series:

- prometheus-rules: per-class percentile and count recording rules (`by (service,
  class)`), an alert per gated class objective, and multi-window burn-rate alerts on
  each class's latency SLI, all carrying the `class` label;
- keda: one more trigger per class, on its percentile at its own scale-up threshold
  (KEDA scales on the largest of its triggers);
- argo-rollouts and flagger: a canary check per gated class objective.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tailbudget import _metric_names as names
from tailbudget.budget.model import Budget
from tailbudget.budget.objectives import Objective
from tailbudget.export.common import (
    ExportOptions,
    bucket_at_or_below,
    camel,
    label_value,
    latency_buckets,
    le_label,
    num,
    promql_duration,
    quantile,
    seconds,
    service_selector,
    template_text,
    window_tag,
)

__all__ = [
    "ClassObjective",
    "class_objectives",
    "class_quantile_rule",
    "class_selector",
    "classes_group",
    "quantile_query",
]

CLASS_LABEL = "class"


@dataclass(frozen=True)
class ClassObjective:
    """A listed class's gated end-to-end objective."""

    name: str
    objective: Objective


def class_objectives(budget: Budget) -> list[ClassObjective]:
    """Every gated e2e objective of every class that states its own objectives."""
    cs = budget.class_set
    if cs is None:
        return []
    return [
        ClassObjective(c.name, o)
        for c in cs.classes
        if c.objectives is not None
        for o in c.objectives.of("e2e")
        if o.gated and o.output_tokens is None
    ]


def class_selector(budget: Budget, name: str) -> str:
    """`service="<name>", class="<class>"`."""
    return f'{service_selector(budget)}, {CLASS_LABEL}="{label_value(name)}"'


def class_quantile_rule(p: str, window_s: float) -> str:
    """A class's end-to-end percentile: labels service and class."""
    return f"service_class:{names.REQUEST_DURATION}:{p}_rate{window_tag(window_s)}"


def class_count_rule(window_s: float) -> str:
    """A class's requests over the window (the min_samples guard)."""
    return f"service_class:{names.REQUEST_DURATION}:count_increase{window_tag(window_s)}"


def class_slow_rule(p: str, window_s: float) -> str:
    """A class's share of requests slower than its target at p (its latency SLI's bad share)."""
    return f"service_class:{names.REQUEST_DURATION}:slow_ratio_{p}_rate{window_tag(window_s)}"


def quantile_query(budget: Budget, name: str, p: str, window: str, extra: str = "") -> str:
    """The class's percentile (s) over `window`, straight from the histogram."""
    sel = class_selector(budget, name) + (f", {extra}" if extra else "")
    return (
        f"histogram_quantile({num(quantile(p))}, sum by (le) "
        f"(rate({names.REQUEST_DURATION}_bucket{{{sel}}}[{window}])))"
    )


def _records(budget: Budget, window_s: float, percentiles: list[str]) -> Iterator[dict[str, Any]]:
    sel = f'{service_selector(budget)}, {CLASS_LABEL}!=""'
    w = promql_duration(window_s)
    by = f"sum by (service, {CLASS_LABEL}, le)"
    for p in percentiles:
        yield {
            "record": class_quantile_rule(p, window_s),
            "expr": f"histogram_quantile({num(quantile(p))}, {by} "
            f"(rate({names.REQUEST_DURATION}_bucket{{{sel}}}[{w}])))",
        }
    yield {
        "record": class_count_rule(window_s),
        "expr": f"sum by (service, {CLASS_LABEL}) "
        f"(increase({names.REQUEST_DURATION}_count{{{sel}}}[{w}]))",
    }


def _objective_alert(
    budget: Budget, c: ClassObjective, window_s: float, min_samples: int
) -> dict[str, Any]:
    o = c.objective
    sel = class_selector(budget, c.name)
    on = f"on (service, {CLASS_LABEL})"
    expr = (
        f"{class_quantile_rule(o.percentile, window_s)}{{{sel}}} > {num(seconds(o.target_ms))}\n"
        f"and {on}\n{class_count_rule(window_s)}{{{sel}}} >= {min_samples}"
    )
    return {
        "alert": f"TailbudgetClassObjective{o.percentile.upper().replace('.', '_')}",
        "expr": expr,
        "for": promql_duration(window_s),
        "labels": {
            "severity": "critical",
            "service": template_text(budget.service),
            CLASS_LABEL: template_text(c.name),
            "percentile": o.percentile,
            "slo_seconds": num(seconds(o.target_ms)),
        },
        "annotations": {
            "summary": f"{template_text(budget.service)}: class {template_text(c.name)} "
            f"e2e {o.percentile} over its {num(o.target_ms)} ms objective",
        },
    }


def _burn(
    budget: Budget, c: ClassObjective, options: ExportOptions, notes: list[str]
) -> list[dict[str, Any]]:
    """The class's latency SLI per window and its multi-window burn-rate alerts."""
    o = c.objective
    bound = bucket_at_or_below(seconds(o.target_ms), options.buckets_s or latency_buckets(budget))
    if bound is None:
        notes.append(
            f"class {c.name} {o.percentile} = {num(o.target_ms)} ms is below every histogram "
            "bucket: no burn-rate alert for it."
        )
        return []
    sel = class_selector(budget, c.name)
    allowed = round(1.0 - o.q, 9)
    rules: list[dict[str, Any]] = []
    windows = sorted({w for b in options.burn_windows for w in (b.long_s, b.short_s)})
    by = f"sum by (service, {CLASS_LABEL})"
    for w_s in windows:
        w = promql_duration(w_s)
        le = f'le="{le_label(bound)}"'
        good = f"{by} (rate({names.REQUEST_DURATION}_bucket{{{sel}, {le}}}[{w}]))"
        total = f"{by} (rate({names.REQUEST_DURATION}_count{{{sel}}}[{w}]))"
        # One record name for every class at this percentile: the class label (the
        # series' own) tells them apart, also to promtool's duplicate check.
        rules.append(
            {
                "record": class_slow_rule(o.percentile, w_s),
                "expr": f"1 - {good} / {total}",
                "labels": {CLASS_LABEL: c.name},
            }
        )
    for b in options.burn_windows:
        limit = b.factor * allowed
        if limit >= 1.0:
            continue
        long_w, short_w = promql_duration(b.long_s), promql_duration(b.short_s)
        rules.append(
            {
                "alert": f"TailbudgetClassLatencyBurn{o.percentile.upper().replace('.', '_')}"
                f"{camel(long_w)}",
                "expr": f"{class_slow_rule(o.percentile, b.long_s)}{{{sel}}} > {num(limit)}\n"
                f"and on (service, {CLASS_LABEL})\n"
                f"{class_slow_rule(o.percentile, b.short_s)}{{{sel}}} > {num(limit)}",
                "labels": {
                    "severity": b.severity,
                    "service": template_text(budget.service),
                    CLASS_LABEL: template_text(c.name),
                    "percentile": o.percentile,
                    "long_window": long_w,
                    "short_window": short_w,
                    "burn_rate": num(b.factor),
                },
                "annotations": {
                    "summary": f"{template_text(budget.service)}: class "
                    f"{template_text(c.name)} burns its {o.percentile} latency budget at "
                    f"{num(b.factor)}x over {long_w} and {short_w}",
                },
            }
        )
    return rules


def classes_group(
    budget: Budget, options: ExportOptions, window_s: float, min_samples: int, notes: list[str]
) -> dict[str, Any] | None:
    """The `<service>-classes` rule group, or None for a budget without class objectives."""
    found = class_objectives(budget)
    if not found:
        return None
    percentiles = sorted({c.objective.percentile for c in found}, key=quantile)
    rules = list(_records(budget, window_s, percentiles))
    rules += [_objective_alert(budget, c, window_s, min_samples) for c in found]
    for c in found:
        rules += _burn(budget, c, options, notes)
    notes.append(
        "classes: the class rules read the request histogram's `class` label, which "
        "`tailbudget serve` sets from each observation's class (others fold into `other`)."
    )
    return {
        "name": f"tailbudget-{budget.service}-classes",
        "interval": promql_duration(options.rule_interval_s or 60.0),
        "rules": rules,
    }
