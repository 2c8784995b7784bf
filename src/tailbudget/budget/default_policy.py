"""The default policies: the reactive-scaling defaults on end-to-end p95, and the LLM default."""

from __future__ import annotations

from typing import Any

from tailbudget.budget.metric import parse_metric
from tailbudget.budget.model import SLO
from tailbudget.budget.objectives import Objectives
from tailbudget.budget.policy_model import Action, Rule
from tailbudget.budget.slo import as_objectives
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


def default_rules(
    slo: SLO | Objectives | None, rollback_for_s: float = 120.0
) -> tuple[list[Rule], str]:
    """The default reactive-scaling rules, scaled to the SLO p95 when the budget has one."""
    objectives = as_objectives(slo)
    p95 = objectives.e2e().get("p95") if objectives is not None else None
    scale = p95 / SEED_SLO_P95_MS if p95 is not None else 1.0
    rate = objectives.error_rate if objectives is not None else None
    err = rate if rate else SEED_ERROR_RATE
    up, trim, shed = (SEED_SCALE_UP_MS * scale, SEED_TRIM_MS * scale, SEED_SHED_MS * scale)
    if p95 is None:
        where = "default (rules for a 2800 ms p95 SLO)"
        exprs: tuple[str, ...] = ("1800 ms", "2800 ms", "3000 ms")
    else:
        where = f"default, scaled to slo.p95 = {p95:g} ms"
        exprs = tuple(f"{100 * v / p95:.1f}% of p95" for v in (up, trim, shed))

    def latency(name: str, t: float, expr: str, for_s: float, action: Action) -> Rule:
        return Rule(
            name=name,
            metric="p95",
            threshold=t,
            for_s=for_s,
            action=action,
            cooldown_s=60.0,
            clear_threshold=default_clear("p95", t),
            clear_for_s=120.0,
            expr=expr,
        )

    rules = [
        latency("scale_up_p95", up, exprs[0], 0.0, "scale_up"),
        latency("trim_logging_p95", trim, exprs[1], 120.0, "trim_logging"),
        latency("shed_load_p95", shed, exprs[2], 120.0, "shed_load"),
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


def llm_default_rules(
    targets: TargetTable, rollback_for_s: float = 120.0
) -> tuple[list[Rule], str]:
    """The LLM default: TTFT is the queueing signal (see docs/act-llm.md).

    scale_up when the ttft percentile passes 90% of its target; shed_load when it
    stays over the target for 2m; rollback when goodput is significantly below the
    baseline's (the Wilson upper bound under it), ttft.p99 exceeds 1.2x its baseline
    for `rollback_for`, or the error rate exceeds its objective (1% without one).
    """
    metric = ttft_objective(targets)
    if metric is None:
        raise PolicyError("the LLM default policy needs a ttft objective (slo: ttft: {p95: ms})")
    target = float(targets[metric])
    up = LLM_SCALE_SHARE * target
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


__all__ = ["default_clear", "default_rules", "llm_default_rules", "ttft_objective"]
