"""`--to grafana --metrics vllm|sglang|tgi`: a dashboard on the server's own histograms.

One panel per objective metric the preset maps (e2e, ttft, tpot, itl, the
`queue` stage) with its percentiles in seconds over the policy window and
dashed lines at the objective targets and the policy thresholds, the bounds
around each target (and a warning where a target cannot be measured) in the
panel description; the request (and, where counted, error) rate; the latency
SLI burn rate per objective from the `le` bound nearest its target; and
`tailbudget serve`'s decisions. The queries read the raw histograms, so the
dashboard needs no recording rules.
"""

from __future__ import annotations

import math
from typing import Any

from tailbudget._fleet import FleetPreset, FleetSeries, preset
from tailbudget._json import dumps
from tailbudget.budget.model import Budget
from tailbudget.budget.objectives import Objective
from tailbudget.budget.policy import Policy
from tailbudget.export import fleet_common as fc
from tailbudget.export.common import (
    ExportOptions,
    k8s_name,
    num,
    policy_of,
    promql_duration,
    seconds,
)
from tailbudget.export.grafana import actions_panel, dashboard, timeseries

__all__ = ["build", "render"]


def _metric_panel(
    budget: Budget,
    fleet: FleetPreset,
    policy: Policy,
    metric: tuple[str, FleetSeries, list[Objective]],
    place: tuple[int, int, int],
) -> dict[str, Any]:
    (name, series, objectives), (panel_id, x, y) = metric, place
    rules = [r for r in policy.rules if r.ref.kind == "quantile" and r.ref.series == name]
    qs = sorted(
        {o.q for o in objectives} | {r.ref.q for r in rules if r.ref.q} or {0.5, 0.95, 0.99}
    )
    sel, rng = fc.selector(fleet, budget), promql_duration(policy.window_s)
    targets = [(fc.quantile_expr(series, q, sel, rng), f"p{100 * q:g}") for q in qs]
    lines = [seconds(o.target_ms) for o in objectives] + [seconds(r.threshold) for r in rules]
    said = [f"{o.key} {num(o.target_ms)} ms" for o in objectives]
    said += [f"rule {r.name} {num(r.threshold)} ms" for r in rules]
    where = [fc.resolve(series, ms, what) for what, ms in _targets(objectives, rules)]
    text = (
        f"{series.histogram}, rolling {rng}. Lines: "
        + (", ".join(said) or "none")
        + ". Buckets: "
        + "; ".join(f"{w.around} around {num(w.check.target_s * 1000)} ms" for w in where)
        + "".join(f" WARNING: {w.check.warning}." for w in where if w.check.warning)
    )
    title = f"{budget.service}: {name}" if name == "e2e" else name
    return timeseries(panel_id, title, targets, lines, "s", y, text, x=x)


def _targets(objectives: list[Objective], rules: list[Any]) -> list[tuple[str, float]]:
    out = [(o.key, o.target_ms) for o in objectives]
    return out + [(f"rule {r.name}", float(r.threshold)) for r in rules]


def _traffic_panel(
    budget: Budget, fleet: FleetPreset, policy: Policy, place: tuple[int, int]
) -> dict[str, Any]:
    sel, rng = fc.selector(fleet, budget), promql_duration(policy.window_s)
    targets = [(fc.requests_expr(fleet, sel, rng), "requests/s")]
    if fleet.errors is not None:
        targets.append((f"{fc.counter_expr(fleet.errors, sel, rng)} or vector(0)", "errors/s"))
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
) -> tuple[dict[str, Any] | None, list[str]]:
    if not options.burn_windows or not mapped:
        return None, []
    long_s = min(b.long_s for b in options.burn_windows)
    rng, sel = promql_duration(long_s), fc.selector(fleet, budget)
    targets: list[tuple[str, str]] = []
    notes: list[str] = []
    for o, series in mapped:
        where = fc.resolve(series, o.target_ms, f"{o.key} SLI")
        notes.extend(where.notes)
        assert where.le is not None
        slow = f"(1 - ({fc.share_expr(series, where.le, sel, rng)}))"
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


def build(budget: Budget, options: ExportOptions | None = None) -> tuple[dict[str, Any], list[str]]:
    """The dashboard model on the preset's series, and notes about what it cannot show."""
    options = options or ExportOptions()
    fleet = preset(options.metrics)
    policy = policy_of(budget)
    mapped, notes = fc.objectives_of(budget, fleet)
    by_metric: dict[str, list[Objective]] = {}
    for o, _ in mapped:
        by_metric.setdefault(o.metric, []).append(o)
    for r in policy.rules:
        if r.ref.kind == "quantile" and fleet.of(r.ref.series) is not None:
            by_metric.setdefault(r.ref.series, [])
    panels: list[dict[str, Any]] = []
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
    doc = dashboard(budget, policy, panels)
    doc["description"] += f" Series of the {fleet.name} preset. " + " ".join(
        f"NOTE: {n}." for n in [*fleet.notes, *notes]
    )
    doc["tags"].append(fleet.name)
    doc["uid"] = k8s_name(budget.service, f"tb-{fleet.name}")[:40]
    return doc, notes


def render(budget: Budget, options: ExportOptions | None = None) -> str:
    """The dashboard for a fleet preset as JSON text."""
    return dumps(build(budget, options)[0])
