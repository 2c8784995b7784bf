"""Objectives per class in every export: the `class` label on tailbudget's series.

tailbudget's `PrometheusSink` labels its request and stage histograms with each
request's class (bounded by the budget's class list; anything else is `other`). Every
target reads each listed class's gated objectives from those series: end to end from the
request histogram, TTFT (the stage `ttft`) and stage objectives from the stage
histogram (`stage="..."`); TPOT, ITL and goodput have no class series and are named in
the notes:

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

from tailbudget import _metric_names as names
from tailbudget._fleet import FleetPreset
from tailbudget._json import JsonDict
from tailbudget.budget.model import Budget
from tailbudget.budget.objectives import Objective
from tailbudget.export import histograms
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
    sli_name,
    template_text,
    window_tag,
)

__all__ = [
    "ClassObjective",
    "class_objectives",
    "class_quantile_rule",
    "class_selector",
    "classes_group",
    "fleet_class_checks",
    "fleet_classes_group",
    "quantile_query",
]

CLASS_LABEL = "class"


def objective_slug(o: Objective) -> str:
    """A class objective's part of check and trigger names: `p95` end to end, `ttft-p95`
    otherwise (one spelling for tailbudget's series and a serving stack's)."""
    return o.percentile if o.metric == "e2e" else f"{o.metric}-{o.percentile}"


@dataclass(frozen=True)
class ClassObjective:
    """A listed class's gated objective: end to end, TTFT or a stage's."""

    name: str
    objective: Objective

    @property
    def e2e(self) -> bool:
        """End to end (the request histogram), else a stage series (the stage histogram)."""
        return self.objective.metric == "e2e"

    @property
    def histogram(self) -> str:
        """The histogram the objective is read from."""
        return names.REQUEST_DURATION if self.e2e else names.STAGE_DURATION

    @property
    def slug(self) -> str:
        """`p95` end to end, `ttft-p95` otherwise (names of checks and triggers)."""
        return objective_slug(self.objective)

    def selector(self, budget: Budget) -> str:
        """The class's series of this objective: `service=.., class=..[, stage=..]`."""
        sel = class_selector(budget, self.name)
        return sel if self.e2e else f'{sel}, stage="{label_value(self.objective.metric)}"'


def _exported(o: Objective, stages: set[str]) -> bool:
    """A class objective with a class series: e2e, ttft or a stage of the pipeline."""
    if not o.gated:
        return False
    if o.metric == "e2e":
        return o.output_tokens is None
    return o.metric == "ttft" or o.metric in stages


def class_objectives(budget: Budget) -> list[ClassObjective]:
    """Every gated objective with a class series (e2e, ttft, a stage's) of every class
    that states its own objectives; per class, end to end first."""
    cs = budget.class_set
    if cs is None:
        return []
    stages = {s.name for _, s in budget.stages()}
    out = []
    for c in cs.classes:
        if c.objectives is None:
            continue
        found = [o for o in c.objectives if _exported(o, stages)]
        found.sort(key=lambda o: o.metric != "e2e")
        out += [ClassObjective(c.name, o) for o in found]
    return out


def unexported(budget: Budget) -> list[str]:
    """`class premium tpot.p99`: gated class objectives no class series carries."""
    cs = budget.class_set
    stages = {s.name for _, s in budget.stages()}
    return [
        f"class {c.name} {o.key}"
        for c in (cs.classes if cs is not None else ())
        if c.objectives is not None
        for o in c.objectives
        if o.gated and not _exported(o, stages)
    ]


def class_selector(budget: Budget, name: str) -> str:
    """`service="<name>", class="<class>"`."""
    return f'{service_selector(budget)}, {CLASS_LABEL}="{label_value(name)}"'


def _prefix(histogram: str) -> str:
    """Record names' level: `service_class` (e2e) or `service_class_stage` (by stage)."""
    return "service_class" if histogram == names.REQUEST_DURATION else "service_class_stage"


def class_quantile_rule(p: str, window_s: float, histogram: str = names.REQUEST_DURATION) -> str:
    """A class's percentile: labels service and class (and stage, on the stage histogram)."""
    return f"{_prefix(histogram)}:{histogram}:{p}_rate{window_tag(window_s)}"


def class_count_rule(window_s: float, histogram: str = names.REQUEST_DURATION) -> str:
    """A class's requests (or stage times) over the window (the min_samples guard)."""
    return f"{_prefix(histogram)}:{histogram}:count_increase{window_tag(window_s)}"


def class_slow_rule(c: ClassObjective, window_s: float) -> str:
    """A class's share of requests slower than its target at p (its latency SLI's bad
    share): `slow_ratio_p95` end to end, `slow_ratio_ttft_p95` on a stage series."""
    sli = sli_name(c.objective)
    return f"{_prefix(c.histogram)}:{c.histogram}:slow_ratio_{sli}_rate{window_tag(window_s)}"


def quantile_query(
    budget: Budget,
    name: str,
    p: str,
    window: str,
    extra: str = "",
    c: ClassObjective | None = None,
) -> str:
    """The class's percentile (s) over `window`, straight from the histogram (the request
    histogram, or `c`'s series when given)."""
    base = class_selector(budget, name) if c is None else c.selector(budget)
    sel = base + (f", {extra}" if extra else "")
    histogram = names.REQUEST_DURATION if c is None else c.histogram
    return (
        f"histogram_quantile({num(quantile(p))}, sum by (le) "
        f"(rate({histogram}_bucket{{{sel}}}[{window}])))"
    )


def _records(budget: Budget, window_s: float, found: list[ClassObjective]) -> Iterator[JsonDict]:
    sel = f'{service_selector(budget)}, {CLASS_LABEL}!=""'
    w = promql_duration(window_s)
    for histogram, by_stage in ((names.REQUEST_DURATION, ""), (names.STAGE_DURATION, "stage, ")):
        mine = [c for c in found if c.histogram == histogram]
        if not mine:
            continue
        by = f"sum by (service, {CLASS_LABEL}, {by_stage}le)"
        for p in sorted({c.objective.percentile for c in mine}, key=quantile):
            yield {
                "record": class_quantile_rule(p, window_s, histogram),
                "expr": f"histogram_quantile({num(quantile(p))}, {by} "
                f"(rate({histogram}_bucket{{{sel}}}[{w}])))",
            }
        yield {
            "record": class_count_rule(window_s, histogram),
            "expr": f"sum by (service, {CLASS_LABEL}{', stage' if by_stage else ''}) "
            f"(increase({histogram}_count{{{sel}}}[{w}]))",
        }


def _objective_alert(
    budget: Budget, c: ClassObjective, window_s: float, min_samples: int
) -> JsonDict:
    o = c.objective
    sel = c.selector(budget)
    on = f"on (service, {CLASS_LABEL})" if c.e2e else f"on (service, {CLASS_LABEL}, stage)"
    series = class_quantile_rule(o.percentile, window_s, c.histogram)
    expr = (
        f"{series}{{{sel}}} > {num(seconds(o.target_ms))}\n"
        f"and {on}\n{class_count_rule(window_s, c.histogram)}{{{sel}}} >= {min_samples}"
    )
    kind = "" if c.e2e else camel(o.metric)
    labels = {
        "severity": "critical",
        "service": template_text(budget.service),
        CLASS_LABEL: template_text(c.name),
        **({} if c.e2e else {"metric": template_text(o.metric)}),
        "percentile": o.percentile,
        "slo_seconds": num(seconds(o.target_ms)),
    }
    return {
        "alert": f"TailbudgetClassObjective{kind}{o.percentile.upper().replace('.', '_')}",
        "expr": expr,
        "for": promql_duration(window_s),
        "labels": labels,
        "annotations": {
            "summary": f"{template_text(budget.service)}: class {template_text(c.name)} "
            f"{template_text(o.metric)} {o.percentile} over its {num(o.target_ms)} ms objective",
        },
    }


def _burn(
    budget: Budget, c: ClassObjective, options: ExportOptions, notes: list[str]
) -> list[JsonDict]:
    """The class's latency SLI per window and its multi-window burn-rate alerts."""
    o = c.objective
    bound = bucket_at_or_below(seconds(o.target_ms), options.buckets_s or latency_buckets(budget))
    if bound is None:
        notes.append(
            f"class {c.name} {o.key} = {num(o.target_ms)} ms is below every histogram "
            "bucket: no burn-rate alert for it."
        )
        return []
    sel = c.selector(budget)
    allowed = round(1.0 - o.q, 9)
    rules: list[JsonDict] = []
    windows = sorted({w for b in options.burn_windows for w in (b.long_s, b.short_s)})
    by = f"sum by (service, {CLASS_LABEL})"
    for w_s in windows:
        w = promql_duration(w_s)
        le = f'le="{le_label(bound)}"'
        good = f"{by} (rate({c.histogram}_bucket{{{sel}, {le}}}[{w}]))"
        total = f"{by} (rate({c.histogram}_count{{{sel}}}[{w}]))"
        # One record name for every class at this percentile: the class label (the
        # series' own) tells them apart, also to promtool's duplicate check.
        rules.append(
            {
                "record": class_slow_rule(c, w_s),
                "expr": f"1 - {good} / {total}",
                "labels": {CLASS_LABEL: c.name},
            }
        )
    for b in options.burn_windows:
        limit = b.factor * allowed
        if limit >= 1.0:
            continue
        long_w, short_w = promql_duration(b.long_s), promql_duration(b.short_s)
        kind = "" if c.e2e else camel(o.metric)
        what = o.percentile if c.e2e else template_text(o.key)
        # The record keeps the class label only (`sum by (service, class)`).
        mine = class_selector(budget, c.name)
        rules.append(
            {
                "alert": f"TailbudgetClassLatencyBurn{kind}"
                f"{o.percentile.upper().replace('.', '_')}{camel(long_w)}",
                "expr": f"{class_slow_rule(c, b.long_s)}{{{mine}}} > {num(limit)}\n"
                f"and on (service, {CLASS_LABEL})\n"
                f"{class_slow_rule(c, b.short_s)}{{{mine}}} > {num(limit)}",
                "labels": {
                    "severity": b.severity,
                    "service": template_text(budget.service),
                    CLASS_LABEL: template_text(c.name),
                    **({} if c.e2e else {"metric": template_text(o.metric)}),
                    "percentile": o.percentile,
                    "long_window": long_w,
                    "short_window": short_w,
                    "burn_rate": num(b.factor),
                },
                "annotations": {
                    "summary": f"{template_text(budget.service)}: class "
                    f"{template_text(c.name)} burns its {what} latency budget at "
                    f"{num(b.factor)}x over {long_w} and {short_w}",
                },
            }
        )
    return rules


def _error_rates(budget: Budget) -> list[tuple[str, float]]:
    """(class, error_rate) of every class stating a positive error rate."""
    cs = budget.class_set
    return [
        (c.name, c.objectives.error_rate)
        for c in (cs.classes if cs is not None else ())
        if c.objectives is not None and c.objectives.error_rate
    ]


def _error_alerts(budget: Budget, window_s: float, min_samples: int) -> list[JsonDict]:
    """An alert per class error rate: the class's share of `outcome="error"` requests
    (tailbudget_requests_total, which PrometheusSink labels with the class) over it."""
    out: list[JsonDict] = []
    w = promql_duration(window_s)
    for name, rate in _error_rates(budget):
        sel = class_selector(budget, name)
        by = f"sum by (service, {CLASS_LABEL})"
        total = f"{by} (increase({names.REQUESTS_TOTAL}{{{sel}}}[{w}]))"
        errors = f'{by} (increase({names.REQUESTS_TOTAL}{{{sel}, outcome="error"}}[{w}]))'
        out.append(
            {
                "alert": "TailbudgetClassErrorRate",
                # Without any error yet the error series does not exist: `or total * 0`.
                "expr": f"({errors} or {total} * 0) / {total} > {num(rate)}\n"
                f"and on (service, {CLASS_LABEL})\n{total} >= {min_samples}",
                "for": w,
                "labels": {
                    "severity": "critical",
                    "service": template_text(budget.service),
                    CLASS_LABEL: template_text(name),
                    "error_rate": num(rate),
                },
                "annotations": {
                    "summary": f"{template_text(budget.service)}: class {template_text(name)} "
                    f"error rate over its {num(rate)} objective",
                },
            }
        )
    return out


def classes_group(
    budget: Budget, options: ExportOptions, window_s: float, min_samples: int, notes: list[str]
) -> JsonDict | None:
    """The `<service>-classes` rule group, or None for a budget without class objectives."""
    found = class_objectives(budget)
    if not found and not _error_rates(budget):
        return None
    rules = list(_records(budget, window_s, found))
    rules += [_objective_alert(budget, c, window_s, min_samples) for c in found]
    rules += _error_alerts(budget, window_s, min_samples)
    for c in found:
        rules += _burn(budget, c, options, notes)
    notes.append(
        "classes: the class rules read the request and stage histograms' `class` label, "
        "which tailbudget's PrometheusSink sets from each request's class (others fold "
        "into `other`)."
    )
    missing = unexported(budget)
    if missing:
        notes.append(f"no class series for {', '.join(missing)}: not exported.")
    return {
        "name": f"tailbudget-{budget.service}-classes",
        "interval": promql_duration(options.rule_interval_s or 60.0),
        "rules": rules,
    }


def fleet_classes_group(
    budget: Budget, fleet: FleetPreset, window_s: float, min_samples: int, notes: list[str]
) -> JsonDict | None:
    """On a serving stack's histograms (`--metrics vllm|sglang|tgi`): an alert per gated
    class objective the preset has a histogram for, each class's series selected by the
    label named `classes.by` (which the scrape or relabel config gives the server's
    series, e.g. per deployment of a tier). None for a budget without class objectives."""
    cs = budget.class_set
    if cs is None:
        return None
    rules: list[JsonDict] = []
    w = promql_duration(window_s)
    for c in cs.classes:
        for o in c.objectives.gated() if c.objectives is not None else ():
            series = fleet.of(o.metric)
            if series is None or o.output_tokens is not None:
                notes.append(
                    f"class {c.name} {o.key}: {fleet.name} exports no {o.metric} histogram"
                )
                continue
            sel = histograms.selector(fleet, budget, f'{cs.by}="{label_value(c.name)}"')
            expr = (
                f"{histograms.quantile_expr(series, o.q, sel, w)} > {num(seconds(o.target_ms))}\n"
                f"and on ()\n{histograms.count_expr(series, sel, w)} >= {min_samples}"
            )
            kind = "" if o.metric == "e2e" else camel(o.metric)
            pct = o.percentile.upper().replace(".", "_")
            rules.append(
                {
                    "alert": f"TailbudgetClassObjective{kind}{pct}",
                    "expr": expr,
                    "for": w,
                    "labels": {
                        "severity": "critical",
                        "service": template_text(budget.service),
                        CLASS_LABEL: template_text(c.name),
                        "metric": o.metric,
                        "percentile": o.percentile,
                        "slo_seconds": num(seconds(o.target_ms)),
                    },
                    "annotations": {
                        "summary": f"{template_text(budget.service)}: class "
                        f"{template_text(c.name)} {o.metric} {o.percentile} over its "
                        f"{num(o.target_ms)} ms objective ({series.histogram})",
                    },
                }
            )
    if not rules:
        return None
    notes.append(
        f"classes: each class's series on {fleet.name}'s histograms are selected by the "
        f"label {cs.by} (classes.by), which the scrape or relabel config must give them."
    )
    return {"name": f"{budget.service}-classes-{fleet.name}", "rules": rules}


@dataclass(frozen=True)
class FleetClassCheck:
    """A gated class objective on a serving stack's histogram, for a canary check."""

    name: str
    objective: Objective
    value: str
    """The class's percentile (s) on the canary's pods."""
    guard: str
    """Its min-samples guard."""

    @property
    def slug(self) -> str:
        """`p95` end to end, `ttft-p95` otherwise."""
        return objective_slug(self.objective)


def fleet_class_checks(
    budget: Budget, fleet: FleetPreset, canary: str, rng: str, min_samples: int, notes: list[str]
) -> list[FleetClassCheck]:
    """Each gated class objective the preset has a histogram for, on the canary's pods
    (`canary`: their matchers) and the class's label `classes.by`."""
    cs = budget.class_set
    out: list[FleetClassCheck] = []
    for c in cs.classes if cs is not None else ():
        for o in c.objectives.gated() if c.objectives is not None else ():
            series = fleet.of(o.metric)
            if series is None or o.output_tokens is not None:
                notes.append(
                    f"class {c.name} {o.key}: {fleet.name} exports no {o.metric} histogram"
                )
                continue
            sel = f'{canary}, {cs.by}="{label_value(c.name)}"' if cs else canary
            value = histograms.quantile_expr(series, o.q, sel, rng)
            guard = f"{histograms.count_expr(series, sel, rng)} >= {min_samples}"
            out.append(FleetClassCheck(c.name, o, value, guard))
    return out
