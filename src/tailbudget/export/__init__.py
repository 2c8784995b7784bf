"""Budget as code for the ecosystem: generate Prometheus rules, a KEDA ScaledObject,
an Argo Rollouts AnalysisTemplate, Flagger MetricTemplates, OpenSLO documents and a
Grafana dashboard from one budget file, so the budget stays the single source of truth.
"""

from __future__ import annotations

from collections.abc import Callable

from tailbudget._fleet import preset
from tailbudget.budget.model import Budget
from tailbudget.errors import BudgetError
from tailbudget.export import argo, flagger, fleet, grafana, keda, openslo, prometheus_rules
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


def export(budget: Budget, target: str, options: ExportOptions | None = None) -> str:
    """The configuration text of `target` for this budget."""
    try:
        render = TARGETS[target]
    except KeyError:
        raise BudgetError(f"--to must be one of {', '.join(TARGETS)}, got {target!r}") from None
    metrics = options.metrics if options is not None else "tailbudget"
    preset(metrics)  # a bad name is a one-line error before anything renders
    if metrics != "tailbudget":
        if target not in fleet.FLEET_TARGETS:
            raise BudgetError(
                f"--metrics {metrics} works with --to {' or '.join(fleet.FLEET_TARGETS)}; "
                f"{target} reads tailbudget's own series (drop --metrics)"
            )
        render = fleet.render_rules if target == "prometheus-rules" else fleet.render_keda
    return render(budget, options)


__all__ = [
    "DEFAULT_BURN_WINDOWS",
    "TARGETS",
    "BurnWindow",
    "ExportOptions",
    "export",
    "latency_buckets",
    "parse_burn_windows",
]
