"""`--to openslo --metrics vllm|sglang|tgi`: OpenSLO documents on the server's series.

One ratio SLO per percentile objective the preset maps (requests under the
`le` bound nearest the target over all requests, target = the percentile),
one for the error rate when the server counts failures, and one for goodput
when it is one histogram's share. A bound standing in for the target is named
in the description, the annotations (`le-used`) and the header. An objective
the preset cannot express is named in the header; with none left the export
is refused.
"""

from __future__ import annotations

from typing import Any

from tailbudget._fleet import FleetPreset, FleetSeries, preset
from tailbudget.budget.model import Budget
from tailbudget.budget.objectives import Objective
from tailbudget.errors import BudgetError
from tailbudget.export import fleet_common as fc
from tailbudget.export.common import (
    LABEL_PREFIX,
    ExportOptions,
    dump_yaml,
    header,
    k8s_name,
    le_label,
    num,
)
from tailbudget.export.openslo import (
    A_ERROR_RATE,
    A_KIND,
    A_THRESHOLD_MS,
    L_GATED,
    metadata,
    ratio_slo,
)

__all__ = ["A_LE_USED", "A_METRICS", "build", "render"]

A_LE_USED = f"{LABEL_PREFIX}/le-used"
A_METRICS = f"{LABEL_PREFIX}/metrics"
RANGE = "5m"


def _share_slo(
    budget: Budget,
    fleet: FleetPreset,
    found: tuple[str, FleetSeries, float],
    goal: tuple[str, float, bool],
    notes: list[str],
) -> dict[str, Any]:
    """Requests under the nearest bound to `ms` over all, for objective `key` at `target`."""
    (metric, series, ms), (key, target, gated) = found, goal
    where = fc.resolve(series, ms, key)
    notes.extend(where.notes)
    assert where.le is not None
    bound, sel = le_label(where.le), fc.selector(fleet, budget)
    under = fc.selector(fleet, budget, f'le="{bound}"')
    good = f"sum(rate({series.histogram}_bucket{{{under}}}[{RANGE}]))"
    total = fc.count_expr(series, sel, RANGE, "rate")
    extra = {A_KIND: key, A_THRESHOLD_MS: num(ms), A_LE_USED: bound, A_METRICS: fleet.name}
    meta = metadata(budget, k8s_name(key), f"{budget.service} {key} <= {num(ms)} ms", extra)
    meta["labels"] = {L_GATED: "true" if gated else "false"}
    stand_in = "" if where.check.exact else f"; the nearest bound to {num(ms)} ms"
    text = {
        "description": f"{target * 100:g}% of requests with {metric} within {num(ms)} ms "
        f"({series.histogram} bucket le={bound}{stand_in}).",
        "displayName": f"{key} <= {num(ms)} ms",
        "target": round(target, 12),
    }
    indicator = k8s_name(budget.service, f"{metric}-le-{bound}")
    return ratio_slo(meta, budget.service, indicator, (good, total), text)


def _key(o: Objective) -> str:
    return o.percentile if o.metric == "e2e" else o.key


def _error_slo(budget: Budget, fleet: FleetPreset, rate: float) -> dict[str, Any] | str:
    if fleet.errors is None:
        return f"objective error_rate: {fleet.name} counts no failed requests"
    sel = fc.selector(fleet, budget)
    total = fc.requests_expr(fleet, sel, RANGE)
    good = f"{total}\n-\n({fc.counter_expr(fleet.errors, sel, RANGE)} or vector(0))"
    extra = {A_KIND: "error_rate", A_ERROR_RATE: num(rate), A_METRICS: fleet.name}
    meta = metadata(budget, "availability", f"{budget.service} error rate <= {num(rate)}", extra)
    goal = {
        "description": f"At most {num(rate * 100)}% of requests fail ({fleet.errors}).",
        "displayName": "ok requests",
        "target": round(1.0 - rate, 12),
    }
    indicator = k8s_name(budget.service, "ok-requests")
    return ratio_slo(meta, budget.service, indicator, (good, total), goal)


def build(
    budget: Budget, options: ExportOptions | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """The SLO documents on the preset's series, and notes; BudgetError when none maps."""
    fleet = preset((options or ExportOptions()).metrics)
    mapped, notes = fc.objectives_of(budget, fleet)
    docs = [
        # End-to-end objectives keep the flat name (`p95`), so `import openslo` reads them.
        _share_slo(budget, fleet, (o.metric, s, o.target_ms), (_key(o), o.q, o.gated), notes)
        for o, s in mapped
    ]
    rate = budget.objectives.error_rate
    if rate:
        doc = _error_slo(budget, fleet, rate)
        if isinstance(doc, str):
            notes.append(doc)
        else:
            docs.append(doc)
    goodput = budget.objectives.goodput
    if goodput is not None:
        found, why = fc.goodput_series(budget, fleet)
        if found is None or goodput.min is None:
            notes.append(why or "goodput has no min share: nothing to hold it to")
        else:
            docs.append(_share_slo(budget, fleet, found, ("goodput", goodput.min, True), notes))
    if not docs:
        raise BudgetError(
            f"metrics {fleet.name}: no objective of the budget maps to a {fleet.name} "
            f"series ({'; '.join(notes)}); use another metrics preset or the default",
            param="metrics",
        )
    return docs, notes


def render(budget: Budget, options: ExportOptions | None = None) -> str:
    """The OpenSLO documents for a fleet preset (multi-document YAML)."""
    docs, notes = build(budget, options)
    fleet = preset((options or ExportOptions()).metrics)
    head = [f"series of the {fleet.name} preset; {n}" for n in fleet.notes] + notes
    return dump_yaml(docs, header(budget, "openslo", head))
