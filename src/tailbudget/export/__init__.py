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
"""Export targets by name, as `tailbudget export --to` spells them; each reads tailbudget's
own series or, with `ExportOptions.metrics`, a serving stack's (vllm, sglang, tgi)."""


def export(budget: Budget, target: str, options: ExportOptions | None = None) -> str:
    """The configuration text of `target` for this budget."""
    try:
        render = TARGETS[target]
    except KeyError:
        raise BudgetError(
            f"to must be one of {', '.join(TARGETS)}, got {target!r}", param="to"
        ) from None
    # a bad name is a one-line error before anything renders
    preset(options.metrics if options is not None else "tailbudget")
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
