"""Budget as code for the ecosystem: generate Prometheus rules, a KEDA ScaledObject,
an Argo Rollouts AnalysisTemplate, Flagger MetricTemplates, OpenSLO documents and a
Grafana dashboard from one budget file, so the budget stays the single source of truth.
"""

from __future__ import annotations

from collections.abc import Callable

from tailbudget._fleet import preset
from tailbudget.budget.model import Budget
from tailbudget.errors import BudgetError
from tailbudget.export import (
    argo,
    flagger,
    fleet,
    fleet_argo,
    fleet_flagger,
    fleet_grafana,
    fleet_openslo,
    grafana,
    keda,
    openslo,
    prometheus_rules,
)
from tailbudget.export.common import (
    DEFAULT_BURN_WINDOWS,
    BurnWindow,
    ExportOptions,
    latency_buckets,
    parse_burn_windows,
)

Renderer = Callable[[Budget, ExportOptions | None], str]

TARGETS: dict[str, Renderer] = {
    "prometheus-rules": prometheus_rules.render,
    "keda": keda.render,
    "argo-rollouts": argo.render,
    "flagger": flagger.render,
    "openslo": openslo.render,
    "grafana": grafana.render,
}
"""Export targets by name, as `tailbudget export --to` spells them."""

FLEET_TARGETS: dict[str, Renderer] = {
    "prometheus-rules": fleet.render_rules,
    "keda": fleet.render_keda,
    "argo-rollouts": fleet_argo.render,
    "flagger": fleet_flagger.render,
    "openslo": fleet_openslo.render,
    "grafana": fleet_grafana.render,
}
"""The same targets on a serving stack's own series (`--metrics vllm|sglang|tgi`)."""


def export(budget: Budget, target: str, options: ExportOptions | None = None) -> str:
    """The configuration text of `target` for this budget."""
    try:
        render = TARGETS[target]
    except KeyError:
        raise BudgetError(
            f"to must be one of {', '.join(TARGETS)}, got {target!r}", param="to"
        ) from None
    metrics = options.metrics if options is not None else "tailbudget"
    preset(metrics)  # a bad name is a one-line error before anything renders
    if metrics != "tailbudget":
        render = FLEET_TARGETS[target]
    return render(budget, options)


__all__ = [
    "DEFAULT_BURN_WINDOWS",
    "FLEET_TARGETS",
    "TARGETS",
    "BurnWindow",
    "ExportOptions",
    "export",
    "latency_buckets",
    "parse_burn_windows",
]
