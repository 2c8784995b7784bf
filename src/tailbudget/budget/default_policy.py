"""The default policies: the reactive-scaling defaults on end-to-end p95, and the LLM default."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from tailbudget._units import quantile_of
from tailbudget.budget.metric import parse_metric
from tailbudget.budget.model import SLO
from tailbudget.budget.objectives import Objectives
from tailbudget.budget.policy_model import Action, Rule
from tailbudget.budget.thresholds import TargetTable
from tailbudget.errors import PolicyError

# The default rules' numbers, stated for an SLO p95 of 2800 ms.
SEED_SLO_P95_MS = 2800.0
SEED_SCALE_UP_MS = 1800.0
SEED_TRIM_MS = 2800.0
SEED_SHED_MS = 3000.0
SEED_ERROR_RATE = 0.01
SEED_BASELINE_RATIO = 1.2


def default_clear(metric: str, threshold: float) -> float:
    """Hysteresis used when a rule gives no clear threshold."""
    kind = parse_metric(metric).kind
    if kind == "vs_baseline":
        return 1.0 + (threshold - 1.0) / 2.0 if threshold > 1.0 else threshold
    if kind in ("goodput", "goodput_vs_baseline"):
        return threshold + (1.0 - threshold) / 2.0 if threshold < 1.0 else threshold
    if kind == "error_rate":
        return threshold / 2.0
    return threshold * 0.85


def watched_objective(objectives: Objectives | None) -> tuple[str, float] | None:
    """The end-to-end objective the default rules watch: p95 when the SLO states it, else
    its highest stated percentile (a p99-only SLO is watched at p99), else None."""
    if objectives is None:
        return None
    e2e = objectives.e2e()
    if "p95" in e2e:
        return "p95", float(e2e["p95"])
    if not e2e:
        return None
    name = max(e2e, key=quantile_of)
    return name, float(e2e[name])


def default_rules(
    slo: SLO | Objectives | None, rollback_for_s: float = 120.0
) -> tuple[list[Rule], str]:
    """The default reactive-scaling rules, scaled to the budget's end-to-end objective.

    The seed numbers are stated for a 2800 ms p95 SLO: scale-up at 64.3% of it, trim at
    100%, shed at 107.1%. They watch p95 scaled to slo.p95; an SLO without p95 is
    watched at the percentile it states (its highest), at the same shares of that target,
    never at a p95 threshold the budget never set. The seed rules stand only without
    any end-to-end objective."""
    objectives = None if slo is None else Objectives.coerce(slo)
    watched = watched_objective(objectives)
    metric, target = watched if watched is not None else ("p95", SEED_SLO_P95_MS)
    scale = target / SEED_SLO_P95_MS
    rate = objectives.error_rate if objectives is not None else None
    err = rate if rate else SEED_ERROR_RATE
    up, trim, shed = (SEED_SCALE_UP_MS * scale, SEED_TRIM_MS * scale, SEED_SHED_MS * scale)
    if watched is None:
        where = "default (rules for a 2800 ms p95 SLO)"
        exprs: tuple[str, ...] = ("1800 ms", "2800 ms", "3000 ms")
    else:
        where = f"default, scaled to slo.{metric} = {target:g} ms"
        exprs = tuple(f"{100 * v / target:.1f}% of {metric}" for v in (up, trim, shed))

    def latency(action: Action, t: float, expr: str, for_s: float) -> Rule:
        return Rule(
            name=f"{action}_{metric.replace('.', '_')}",
            metric=metric,
            threshold=t,
            for_s=for_s,
            action=action,
            cooldown_s=60.0,
            clear_threshold=default_clear(metric, t),
            clear_for_s=120.0,
            expr=expr,
        )

    rules = [
        latency("scale_up", up, exprs[0], 0.0),
        latency("trim_logging", trim, exprs[1], 120.0),
        latency("shed_load", shed, exprs[2], 120.0),
        _error_rule(err, rollback_for_s),
        Rule(
            name="rollback_p99_baseline",
            metric="p99_vs_baseline",
            threshold=SEED_BASELINE_RATIO,
            for_s=rollback_for_s,
            action="rollback",
            cooldown_s=600.0,
            clear_threshold=default_clear("p99_vs_baseline", SEED_BASELINE_RATIO),
            clear_for_s=120.0,
            expr="1.2x baseline",
        ),
    ]
    return rules, where


def _error_rule(err: float, rollback_for_s: float) -> Rule:
    return Rule(
        name="rollback_error_rate",
        metric="error_rate",
        threshold=err,
        for_s=rollback_for_s,
        action="rollback",
        cooldown_s=600.0,
        clear_threshold=default_clear("error_rate", err),
        clear_for_s=120.0,
        expr=f"{err:g}",
    )


LLM_SCALE_SHARE = 0.9
"""The LLM default scales up when ttft passes this share of its target."""


def ttft_objective(targets: TargetTable) -> str | None:
    """`ttft.p95` when the budget sets it, else the ttft objective at the highest percentile."""
    found = [parse_metric(k) for k in targets if k.startswith("ttft.p")]
    if not found:
        return None
    if any(r.q == 0.95 for r in found):
        return "ttft.p95"
    return max(found, key=lambda r: r.q or 0.0).name


SCALED_SERIES = ("e2e", "ttft", "tpot", "itl")
"""Series whose percentile falls when replicas are added: queueing shows in ttft and e2e,
and fewer sequences per replica shorten every decode step (tpot, itl)."""


def scale_up_objectives(targets: TargetTable, gated: Collection[str] | None = None) -> list[str]:
    """Every latency objective besides the watched ttft one that more replicas lower
    (e2e, ttft, tpot, itl percentiles; not a stage, whose time need not be load), in the
    table's order; `gated` (canonical names) keeps only those that gate."""
    watched = ttft_objective(targets)
    out = []
    for name in targets:
        ref = parse_metric(name)
        if ref.kind != "quantile" or ref.series not in SCALED_SERIES or ref.name == watched:
            continue
        if gated is None or ref.name in gated:
            out.append(ref.name)
    return out


def llm_default_rules(
    targets: TargetTable, rollback_for_s: float = 120.0, gated: Collection[str] | None = None
) -> tuple[list[Rule], str]:
    """The LLM default: TTFT is the queueing signal (see docs/act-llm.md).

    scale_up when the ttft percentile passes 90% of its target; shed_load when it
    stays over the target for 2m; scale_up too when any other gated e2e, ttft, tpot or
    itl objective passes 90% of its target (fewer sequences per replica shorten the
    decode step); rollback when goodput is significantly below the baseline's (the
    Wilson upper bound under it), ttft.p99 exceeds 1.2x its baseline for
    `rollback_for`, or the error rate exceeds its objective (1% without one).
    """
    metric = ttft_objective(targets)
    if metric is None:
        raise PolicyError("the LLM default policy needs a ttft objective (slo: ttft: {p95: ms})")
    target = float(targets[metric])
    up_share = LLM_SCALE_SHARE
    up = up_share * target
    err = targets.get("error_rate") or SEED_ERROR_RATE

    def rule(name: str, metric: str, t: float, expr: str, **kw: Any) -> Rule:
        base = {"cooldown_s": 60.0, "clear_for_s": 120.0, "for_s": 0.0}
        return Rule(
            name=name,
            metric=metric,
            threshold=t,
            expr=expr,
            clear_threshold=default_clear(metric, t),
            **{**base, **kw},
        )

    rollback = {"for_s": rollback_for_s, "action": "rollback", "cooldown_s": 600.0}
    rules = [
        rule(f"scale_up_{metric}", metric, up, f"90% of {metric}", action="scale_up"),
        rule(
            f"shed_load_{metric}",
            metric,
            target,
            f"100% of {metric}",
            for_s=120.0,
            action="shed_load",
        ),
        *(
            rule(f"scale_up_{m}", m, up_share * targets[m], f"90% of {m}", action="scale_up")
            for m in scale_up_objectives(targets, gated)
        ),
        rule(
            "rollback_goodput_baseline",
            "goodput_vs_baseline",
            1.0,
            "100% of baseline",
            op="<",
            **rollback,
        ),
        rule(
            "rollback_ttft_p99_baseline",
            "ttft.p99_vs_baseline",
            SEED_BASELINE_RATIO,
            "1.2x baseline",
            **rollback,
        ),
        _error_rule(err, rollback_for_s),
    ]
    return rules, f"default (LLM), scaled to {metric} = {target:g} ms"


__all__ = [
    "default_clear",
    "default_rules",
    "llm_default_rules",
    "scale_up_objectives",
    "ttft_objective",
    "watched_objective",
]
