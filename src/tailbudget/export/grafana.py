"""`--to grafana`: a dashboard JSON model with percentile panels, budget lines and actions.

Reference: https://grafana.com/docs/grafana/latest/dashboards/build-dashboards/view-dashboard-json-model/
(dashboard, panels, gridPos, templating, annotations) and
https://grafana.com/docs/grafana/latest/panels-visualizations/configure-thresholds/
(thresholds drawn as lines with `custom.thresholdsStyle`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tailbudget import _metric_names as names
from tailbudget._fleet import FleetPreset, FleetSeries
from tailbudget._json import JsonDict, dumps
from tailbudget._names import grafana_text
from tailbudget._units import PERCENTILES, percentile_name
from tailbudget.budget.model import Budget
from tailbudget.budget.objectives import Objective
from tailbudget.budget.policy import Policy, Rule
from tailbudget.export import histograms
from tailbudget.export.classes import ClassObjective, class_objectives, class_quantile_rule
from tailbudget.export.common import (
    ExportOptions,
    error_ratio_rule,
    k8s_name,
    label_value,
    num,
    policy_of,
    promql_duration,
    quantile,
    request_quantile_rule,
    seconds,
    service_selector,
    slow_ratio_rule,
    stage_quantile_rule,
)

SCHEMA_VERSION = 39
"""Dashboard schema of Grafana 11."""
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
_COLORS = {"p50": "green", "p95": "orange", "p99": "red"}
_LINE_COLORS = ("yellow", "orange", "red", "purple")


def _thresholds(lines: list[float]) -> JsonDict:
    steps: list[JsonDict] = [{"color": "transparent", "value": None}]
    for i, value in enumerate(sorted(set(lines))):
        steps.append({"color": _LINE_COLORS[min(i, len(_LINE_COLORS) - 1)], "value": value})
    return {"mode": "absolute", "steps": steps}


def timeseries(
    panel_id: int,
    title: str,
    targets: list[tuple[str, str]],
    lines: list[float],
    unit: str,
    y: int,
    description: str,
    width: int = 12,
    x: int = 0,
) -> JsonDict:
    """One timeseries panel: (expr, legend) targets, `lines` drawn dashed as thresholds."""
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": grafana_text(title),
        "description": grafana_text(description),
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": width, "x": x, "y": y},
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "min": 0,
                "custom": {
                    "drawStyle": "line",
                    "lineWidth": 1,
                    "fillOpacity": 0,
                    "spanNulls": False,
                    "thresholdsStyle": {"mode": "dashed" if lines else "off"},
                },
                "thresholds": _thresholds(lines),
            },
            "overrides": [],
        },
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": DATASOURCE,
                "expr": expr,
                "legendFormat": legend,
                "range": True,
            }
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def _burn_panels(budget: Budget, options: ExportOptions, y: int, first_id: int) -> list[JsonDict]:
    """Error-budget and latency-SLI burn rates over the fastest alert pair's long window.

    Burn rate = bad share / allowed share; the lines are the alert factors.
    """
    if not options.burn_windows:
        return []
    sel = service_selector(budget)
    long_s = min(b.long_s for b in options.burn_windows)
    factors = sorted({b.factor for b in options.burn_windows})
    window = promql_duration(long_s)
    panels: list[JsonDict] = []
    rate = budget.objectives.error_rate
    if rate:
        panels.append(
            timeseries(
                first_id,
                f"error budget burn rate ({window})",
                [(f"{error_ratio_rule(long_s)}{{{sel}}} / {num(rate)}", "burn")],
                factors,
                "short",
                y,
                "Error ratio over slo.error_rate; lines: the burn-rate alert factors.",
            )
        )
    targets = [
        (f"{slow_ratio_rule(p, long_s)}{{{sel}}} / {num(round(1 - quantile(p), 9))}", p)
        for p in budget.gated
    ]
    panels.append(
        timeseries(
            first_id + len(panels),
            f"latency SLI burn rate ({window})",
            targets,
            factors,
            "short",
            y,
            "Share of requests over the gated SLO percentile, over the share it allows "
            "(1 - q); lines: the burn-rate alert factors.",
            x=12 if panels else 0,
        )
    )
    return panels


def build(budget: Budget, options: ExportOptions | None = None) -> JsonDict:
    """The dashboard model (a dict ready for json.dumps)."""
    policy = policy_of(budget)
    sel = service_selector(budget)
    w = policy.window_s
    panels: list[JsonDict] = []
    slo_lines = [seconds(v) for v in budget.objectives.e2e().values()]
    policy_lines = [seconds(r.threshold) for r in policy.rules if r.metric in PERCENTILES]
    panels.append(
        timeseries(
            1,
            f"{budget.service}: end-to-end latency",
            [(f"{request_quantile_rule(p, w)}{{{sel}}}", p) for p in PERCENTILES],
            slo_lines + policy_lines,
            "s",
            0,
            "Rolling "
            + promql_duration(w)
            + " percentiles. Lines: the SLO ("
            + ", ".join(f"{p} {num(v)} ms" for p, v in budget.objectives.e2e().items())
            + ") and the policy's latency thresholds.",
            width=24,
        )
    )
    stages = [stage for _, stage in budget.stages()]
    for i, stage in enumerate(stages):
        given = stage.budget.given() if stage.budget is not None else {}
        stage_sel = f'{sel}, stage="{label_value(stage.name)}"'
        panels.append(
            timeseries(
                len(panels) + 1,
                f"stage {stage.name}",
                [(f"{stage_quantile_rule(p, w)}{{{stage_sel}}}", p) for p in PERCENTILES],
                [seconds(v) for v in given.values()],
                "s",
                8 + (i // 2) * 8,
                "Budget slice: "
                + (", ".join(f"{p} {num(v)} ms" for p, v in given.items()) or "none (llm block)"),
                x=(i % 2) * 12,
            )
        )
    y = 8 + math.ceil(len(stages) / 2) * 8
    err_lines = [budget.objectives.error_rate] if budget.objectives.error_rate else []
    err_lines += [r.threshold for r in policy.rules if r.metric == "error_rate"]
    panels.append(
        timeseries(
            len(panels) + 1,
            "error ratio",
            [(f"{error_ratio_rule(w)}{{{sel}}}", "error ratio")],
            err_lines,
            "percentunit",
            y,
            "Share of requests with outcome=error; lines: slo.error_rate and the rollback rule.",
        )
    )
    panels.append(actions_panel(policy, len(panels) + 1, y))
    panels.extend(_burn_panels(budget, options or ExportOptions(), y + 8, len(panels) + 1))
    panels.extend(class_panels(budget, policy, y + 16, len(panels) + 1))
    return dashboard(budget, policy, panels)


def class_panels(budget: Budget, policy: Policy, y: int, first_id: int) -> list[JsonDict]:
    """A panel per class with gated objectives: each objective's percentile of the class's
    series (the prometheus-rules target's class records), its targets drawn as lines."""
    by_class: dict[str, list[ClassObjective]] = {}
    for c in class_objectives(budget):
        by_class.setdefault(c.name, []).append(c)
    panels = []
    for i, (name, found) in enumerate(by_class.items()):
        targets = [
            (
                f"{class_quantile_rule(c.objective.percentile, policy.window_s, c.histogram)}"
                f"{{{c.selector(budget)}}}",
                f"{c.objective.metric} {c.objective.percentile}",
            )
            for c in found
        ]
        panels.append(
            timeseries(
                first_id + i,
                f"class {name}",
                targets,
                [seconds(c.objective.target_ms) for c in found],
                "s",
                y + (i // 2) * 8,
                f"Class {name}'s gated objectives ("
                + ", ".join(f"{c.objective.key} {num(c.objective.target_ms)} ms" for c in found)
                + ") over the rolling "
                + promql_duration(policy.window_s)
                + "; lines: the targets.",
                x=(i % 2) * 12,
            )
        )
    return panels


def actions_panel(policy: Policy, panel_id: int, y: int, x: int = 12) -> JsonDict:
    """`tailbudget serve`'s decisions by action and its desired replicas."""
    w = promql_duration(policy.window_s)
    return timeseries(
        panel_id,
        "controller actions and desired replicas",
        [
            (f"sum by (action) (increase({names.DECISIONS_TOTAL}[{w}]))", "{{action}}"),
            (f"max({names.DESIRED_REPLICAS})", "desired replicas"),
        ],
        [],
        "short",
        y,
        "Decisions of `tailbudget serve` (also shown as annotations) and its replica request.",
        x=x,
    )


def dashboard(
    budget: Budget,
    policy: Policy,
    panels: list[JsonDict],
    preset: FleetPreset | None = None,
    notes: Sequence[str] = (),
) -> JsonDict:
    """The dashboard model around `panels`: datasource variable, decision annotations;
    on a serving stack's `preset`, its uid, tag and notes (`preset.notes` then `notes`)."""
    tail = ""
    if preset is not None:
        tail = f" Series of the {preset.name} preset. " + " ".join(
            f"NOTE: {n}." for n in [*preset.notes, *notes]
        )
    return {
        "uid": k8s_name(budget.service, "tb" if preset is None else f"tb-{preset.name}")[:40],
        "title": grafana_text(f"tailbudget: {budget.service}"),
        "description": f"Latency budget of {grafana_text(budget.service)} "
        f"({budget.environment or 'no environment'}, gates "
        f"{', '.join(budget.gated)}), generated by tailbudget export." + tail,
        "tags": ["tailbudget", grafana_text(budget.service)]
        + ([] if preset is None else [preset.name]),
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "timezone": "browser",
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                    "refresh": 1,
                }
            ]
        },
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                },
                {
                    "name": "tailbudget actions",
                    "datasource": DATASOURCE,
                    "enable": True,
                    "iconColor": "orange",
                    "expr": f"sum by (action, rule) (increase({names.DECISIONS_TOTAL}"
                    f"[{promql_duration(policy.evaluate_every_s * 6)}])) > 0",
                    "step": promql_duration(policy.evaluate_every_s),
                    "titleFormat": "{{action}}",
                    "textFormat": "rule {{rule}}",
                    "tagKeys": "action,rule",
                    "useValueForTime": False,
                },
            ]
        },
        "panels": panels,
    }


def render(budget: Budget, options: ExportOptions | None = None) -> str:
    """The dashboard as JSON text (import it in Grafana or provision it).

    With `options.metrics` naming a serving stack, the panels read its own histograms.
    """
    if histograms.server_preset(options) is not None:
        return dumps(build_fleet(budget, options)[0])
    return dumps(build(budget, options))


# ---- on a serving stack's own histograms (`--metrics vllm|sglang|tgi`) ----------------
# `--to grafana --metrics vllm|sglang|tgi`: a dashboard on the server's own histograms.
#
# One panel per objective metric the preset maps (e2e, ttft, tpot, itl, the
# `queue` stage) with its percentiles in seconds over the policy window and
# dashed lines at the objective targets and the policy thresholds, the bounds
# around each target (and a warning where a target cannot be measured) in the
# panel description; the request (and, where counted, error) rate; the latency
# SLI burn rate per objective from the `le` bound nearest its target; and
# `tailbudget serve`'s decisions. The queries read the raw histograms, so the
# dashboard needs no recording rules.


def _metric_panel(
    budget: Budget,
    fleet: FleetPreset,
    policy: Policy,
    metric: tuple[str, FleetSeries, list[Objective]],
    place: tuple[int, int, int],
) -> JsonDict:
    (name, series, objectives), (panel_id, x, y) = metric, place
    rules = [r for r in policy.rules if r.ref.kind == "quantile" and r.ref.series == name]
    qs = sorted(
        {o.q for o in objectives} | {r.ref.q for r in rules if r.ref.q} or {0.5, 0.95, 0.99}
    )
    sel, rng = histograms.selector(fleet, budget), promql_duration(policy.window_s)
    targets = [(histograms.quantile_expr(series, q, sel, rng), percentile_name(q)) for q in qs]
    lines = [seconds(o.target_ms) for o in objectives] + [seconds(r.threshold) for r in rules]
    said = [f"{o.key} {num(o.target_ms)} ms" for o in objectives]
    said += [f"rule {r.name} {num(r.threshold)} ms" for r in rules]
    where = [histograms.resolve(series, ms, what) for what, ms in _targets(objectives, rules)]
    text = (
        f"{series.histogram}, rolling {rng}. Lines: "
        + (", ".join(said) or "none")
        + ". Buckets: "
        + "; ".join(f"{w.around} around {num(w.check.target_s * 1000)} ms" for w in where)
        + "".join(f" WARNING: {w.check.warning}." for w in where if w.check.warning)
    )
    title = f"{budget.service}: {name}" if name == "e2e" else name
    return timeseries(panel_id, title, targets, lines, "s", y, text, x=x)


def _targets(objectives: list[Objective], rules: list[Rule]) -> list[tuple[str, float]]:
    out = [(o.key, o.target_ms) for o in objectives]
    return out + [(f"rule {r.name}", float(r.threshold)) for r in rules]


def _traffic_panel(
    budget: Budget, fleet: FleetPreset, policy: Policy, place: tuple[int, int]
) -> JsonDict:
    sel, rng = histograms.selector(fleet, budget), promql_duration(policy.window_s)
    targets = [(histograms.requests_expr(fleet, sel, rng), "requests/s")]
    if fleet.errors is not None:
        targets.append(
            (f"{histograms.counter_expr(fleet.errors, sel, rng)} or vector(0)", "errors/s")
        )
    text = "Requests per second" + (
        f" and failed ones ({fleet.errors})."
        if fleet.errors
        else f"; {fleet.name} counts no failed requests."
    )
    panel_id, y = place
    return timeseries(panel_id, "requests", targets, [], "reqps", y, text)


def _burn_panel(
    budget: Budget,
    fleet: FleetPreset,
    options: ExportOptions,
    mapped: list[tuple[Objective, FleetSeries]],
    place: tuple[int, int],
) -> tuple[JsonDict | None, list[str]]:
    if not options.burn_windows or not mapped:
        return None, []
    long_s = min(b.long_s for b in options.burn_windows)
    rng, sel = promql_duration(long_s), histograms.selector(fleet, budget)
    targets: list[tuple[str, str]] = []
    notes: list[str] = []
    for o, series in mapped:
        where = histograms.resolve(series, o.target_ms, f"{o.key} SLI")
        notes.extend(where.notes)
        assert where.le is not None
        slow = f"(1 - ({histograms.share_expr(series, where.le, sel, rng)}))"
        targets.append((f"{slow} / {num(round(1 - o.q, 9))}", o.key))
    factors = sorted({b.factor for b in options.burn_windows})
    text = (
        "Share of requests over each objective's target (counted under the nearest `le` "
        "bound), over the share it allows (1 - q); lines: the burn-rate alert factors. "
        + " ".join(notes)
    )
    panel_id, y = place
    return timeseries(
        panel_id, f"latency SLI burn rate ({rng})", targets, factors, "short", y, text, x=12
    ), notes


def build_fleet(budget: Budget, options: ExportOptions | None = None) -> tuple[JsonDict, list[str]]:
    """The dashboard model on the preset's series, and notes about what it cannot show."""
    options, fleet, policy = histograms.fleet_parts(budget, options)
    mapped, notes = histograms.objectives_of(budget, fleet)
    by_metric: dict[str, list[Objective]] = {}
    for o, _ in mapped:
        by_metric.setdefault(o.metric, []).append(o)
    for r in policy.rules:
        if r.ref.kind == "quantile" and fleet.of(r.ref.series) is not None:
            by_metric.setdefault(r.ref.series, [])
    panels: list[JsonDict] = []
    for i, (name, objectives) in enumerate(by_metric.items()):
        series = fleet.of(name)
        assert series is not None
        place = (len(panels) + 1, (i % 2) * 12, (i // 2) * 8)
        panels.append(_metric_panel(budget, fleet, policy, (name, series, objectives), place))
    y = math.ceil(len(by_metric) / 2) * 8
    panels.append(_traffic_panel(budget, fleet, policy, (len(panels) + 1, y)))
    burn, burn_notes = _burn_panel(budget, fleet, options, mapped, (len(panels) + 1, y))
    notes.extend(burn_notes)
    if burn is not None:
        panels.append(burn)
    panels.append(actions_panel(policy, len(panels) + 1, y + 8, x=0))
    return dashboard(budget, policy, panels, fleet, notes), notes
