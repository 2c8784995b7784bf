"""PromQL on a serving stack's own histograms (`--metrics vllm|sglang|tgi`), for every target.

Every `--metrics vllm|sglang|tgi` target reads the server's histograms in
seconds (the budget is in ms) scoped by the preset's label (`model_name`), and
every one states where each target falls among the histogram's `le` bounds:
`check_target` decides, `resolve` turns its answer into the bound an SLI or a
threshold can count under and the notes that say so. The rules, KEDA, Argo,
Flagger, OpenSLO and Grafana exports all build their queries here, so they
read the same series the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from tailbudget._fleet import BucketCheck, FleetPreset, FleetSeries, check_target, preset
from tailbudget.budget.model import Budget
from tailbudget.budget.objectives import Objective
from tailbudget.budget.policy import Policy, Rule
from tailbudget.errors import PolicyError
from tailbudget.export.common import (
    ExportOptions,
    le_label,
    num,
    policy_of,
    promql_duration,
    wilson_lower_expr,
)

__all__ = [
    "CanaryCheck",
    "Resolved",
    "canary_check",
    "count_expr",
    "counter_expr",
    "fleet_parts",
    "goodput_series",
    "objectives_of",
    "quantile_expr",
    "requests_expr",
    "resolve",
    "rule_quantile",
    "rule_series",
    "selector",
    "series_of",
    "server_preset",
    "share_expr",
]


def fleet_parts(
    budget: Budget, options: ExportOptions | None
) -> tuple[ExportOptions, FleetPreset, Policy]:
    """What every target's `build_fleet` starts from: the options (the defaults for None),
    the preset they name and the budget's policy."""
    options = options or ExportOptions()
    return options, preset(options.metrics), policy_of(budget)


def server_preset(options: ExportOptions | None) -> FleetPreset | None:
    """The serving stack's preset that `options.metrics` names; None for tailbudget's own series."""
    metrics = (options or ExportOptions()).metrics
    return None if metrics == "tailbudget" else preset(metrics)


def selector(fleet: FleetPreset, budget: Budget, *extra: str) -> str:
    """The label matchers scoping a query to the budget's model, plus `extra` matchers."""
    return ", ".join(x for x in (fleet.selector(budget.service), *extra) if x)


def rule_series(fleet: FleetPreset, rule: Rule) -> FleetSeries | None:
    """The histogram a percentile rule (or its `_vs_baseline` form) reads, or None."""
    ref = rule.ref
    return fleet.of(ref.series) if ref.kind in ("quantile", "vs_baseline") else None


def series_of(fleet: FleetPreset, rule: Rule) -> FleetSeries | None:
    """The histogram a percentile rule reads (not its `_vs_baseline` form), or None."""
    return fleet.of(rule.ref.series) if rule.ref.kind == "quantile" else None


def rule_quantile(
    fleet: FleetPreset, budget: Budget, policy: Policy, rule: Rule
) -> tuple[str, str]:
    """The rule's percentile (seconds) over the policy window, and the min-samples guard."""
    series = series_of(fleet, rule)
    if series is None:
        raise PolicyError(f"rule {rule.name}: {fleet.name} exports no series for {rule.metric}")
    sel, rng = selector(fleet, budget), promql_duration(policy.window_s)
    q = rule.ref.q
    assert q is not None
    guard = f"{count_expr(series, sel, rng)} >= {policy.min_samples}"
    return quantile_expr(series, q, sel, rng), guard


def quantile_expr(series: FleetSeries, q: float, sel: str, rng: str) -> str:
    """The q-quantile (seconds) of `series` over `rng` (`5m`, `{{ interval }}`)."""
    return (
        f"histogram_quantile({q:g}, sum by (le) (rate({series.histogram}_bucket{{{sel}}}[{rng}])))"
    )


def count_expr(series: FleetSeries, sel: str, rng: str, fn: str = "increase") -> str:
    """Requests the histogram counted over `rng` (`fn="rate"`: per second)."""
    return f"sum({fn}({series.histogram}_count{{{sel}}}[{rng}]))"


def share_expr(series: FleetSeries, le: float, sel: str, rng: str) -> str:
    """The share of requests at or under the bound `le` (s) over `rng`."""
    under = ", ".join(x for x in (sel, f'le="{le_label(le)}"') if x)
    return (
        f"sum(rate({series.histogram}_bucket{{{under}}}[{rng}]))\n"
        f"/\nsum(rate({series.histogram}_count{{{sel}}}[{rng}]))"
    )


@dataclass(frozen=True, slots=True)
class Resolved:
    """A target placed among a histogram's bounds: the bound to count under, and why."""

    check: BucketCheck
    le: float | None
    """The existing bound nearest the target (None: the histogram has no bounds)."""
    notes: tuple[str, ...]

    @property
    def around(self) -> str:
        """'le 0.1 s .. 0.25 s' (the bounds either side of the target)."""
        if self.check.exact:
            return f"le {num(self.check.target_s)} s (a bound at the target)"
        lo = "none" if self.check.below is None else f"{num(self.check.below)} s"
        hi = "+Inf" if self.check.above is None else f"{num(self.check.above)} s"
        return f"le {lo} .. {hi}"


def resolve(series: FleetSeries, target_ms: float, what: str) -> Resolved:
    """Where `target_ms` falls on `series`, the nearest `le` bound, and notes saying so."""
    check = check_target(series, target_ms, what)
    le = check.nearest
    notes: list[str] = []
    if le is not None and not check.exact:
        notes.append(
            f"{what}: no bucket at {target_ms:g} ms in {series.histogram}; it counts "
            f"requests under the nearest bound le={le:g} s ({le * 1000:g} ms) instead"
        )
    if check.warning:
        notes.append(check.warning)
    return Resolved(check, le, tuple(notes))


def objectives_of(
    budget: Budget, fleet: FleetPreset
) -> tuple[list[tuple[Objective, FleetSeries]], list[str]]:
    """Each percentile objective with the preset's series, and a note per unmapped one."""
    mapped: list[tuple[Objective, FleetSeries]] = []
    notes: list[str] = []
    for o in budget.objectives:
        series = fleet.of(o.metric)
        if series is None:
            notes.append(f"objective {o.key}: {fleet.name} exports no {o.metric} histogram")
        else:
            mapped.append((o, series))
    return mapped, notes


def goodput_series(
    budget: Budget, fleet: FleetPreset
) -> tuple[tuple[str, FleetSeries, float] | None, str | None]:
    """(metric, series, threshold ms) when goodput is one histogram's share, else a note.

    A histogram counts one metric at a time: with per-request thresholds on two
    metrics it cannot say which requests met both, so such goodput is not exported.
    """
    if budget.objectives.goodput is None:
        return None, None
    thresholds = budget.objectives.thresholds()
    if len(thresholds) != 1:
        return None, (
            f"goodput (thresholds on {', '.join(thresholds)}): the {fleet.name} histograms "
            "count each metric alone, not the requests that met every threshold at once; "
            "`tailbudget serve` measures it per request"
        )
    ((metric, ms),) = thresholds.items()
    series = fleet.of(metric)
    if series is None:
        return None, f"goodput: {fleet.name} exports no {metric} histogram"
    return (metric, series, ms), None


def counter_expr(counter: str, sel: str, rng: str, fn: str = "rate") -> str:
    """`fn` (rate, increase) of a preset's counter (which may carry its own matchers)."""
    name, _, own = counter.partition("{")
    matchers = ", ".join(x for x in (own.rstrip("}"), sel) if x)
    return f"sum({fn}({name}{{{matchers}}}[{rng}]))"


@dataclass(frozen=True, slots=True)
class CanaryCheck:
    """A rollback rule as one canary query: `value` compared with `threshold` when guarded."""

    rule: Rule
    value: str
    """PromQL: seconds for percentiles, a ratio otherwise."""
    guards: tuple[str, ...]
    """Each non-empty only with `min_samples` requests: below that the check is unknown."""
    threshold: float
    notes: tuple[str, ...] = ()


def canary_check(
    fleet: FleetPreset,
    budget: Budget,
    rule: Rule,
    pods: tuple[str, str],
    rng: str,
    min_samples: int,
    z: float,
) -> CanaryCheck | str:
    """The rollback rule on the canary's pods (`pods`: canary and baseline selectors).

    `_vs_baseline` rules compare the canary with the baseline pods (Argo's stable
    ReplicaSet, Flagger's primary). Returns a note when the preset cannot express it.
    """
    ref, (canary, base) = rule.ref, pods
    why = f"rule {rule.name} ({rule.metric}): {fleet.name}"
    if ref.kind == "error_rate":
        if fleet.errors is None:
            return f"{why} counts no failed requests; left out"
        total, n = requests_expr(fleet, canary, rng), requests_expr(fleet, canary, rng, "increase")
        ratio = f"(({counter_expr(fleet.errors, canary, rng)} or vector(0))\n/\n{total})"
        value = wilson_lower_expr(ratio, f"({n})", z)
        return CanaryCheck(rule, value, (f"{n} >= {min_samples}",), rule.threshold)
    if ref.kind in ("goodput", "goodput_vs_baseline"):
        return _goodput_check(fleet, budget, rule, pods, (rng, min_samples, z))
    series = rule_series(fleet, rule)
    if series is None or ref.q is None:
        return f"{why} exports no {ref.series} histogram; left out"
    value = quantile_expr(series, ref.q, canary, rng)
    guards = [f"{count_expr(series, canary, rng)} >= {min_samples}"]
    if ref.kind == "vs_baseline":
        value = f"{value}\n/\n{quantile_expr(series, ref.q, base, rng)}"
        guards.append(f"{count_expr(series, base, rng)} >= {min_samples}")
        return CanaryCheck(rule, value, tuple(guards), rule.threshold)
    where = resolve(series, rule.threshold, rule.metric)
    around = f"rule {rule.name}: {where.around} of {series.histogram} around {rule.threshold:g} ms"
    notes = (around, where.check.warning) if where.check.warning else (around,)
    return CanaryCheck(rule, value, tuple(guards), round(rule.threshold / 1000.0, 9), notes)


def requests_expr(fleet: FleetPreset, sel: str, rng: str, fn: str = "rate") -> str:
    """Requests served over `rng`: the preset's request counter, else the e2e histogram's count."""
    if fleet.requests is not None:
        return counter_expr(fleet.requests, sel, rng, fn)
    e2e = fleet.of("e2e")
    assert e2e is not None, "every preset maps e2e"
    return count_expr(e2e, sel, rng, fn)


def _goodput_check(
    fleet: FleetPreset,
    budget: Budget,
    rule: Rule,
    pods: tuple[str, str],
    window: tuple[str, int, float],
) -> CanaryCheck | str:
    """Goodput as the share under the threshold's `le`, read at its Wilson upper bound."""
    (rng, min_samples, z), (canary, base) = window, pods
    found, why = goodput_series(budget, fleet)
    if found is None:
        return f"rule {rule.name} ({rule.metric}): " + (why or "the budget sets no goodput")
    metric, series, ms = found
    where = resolve(series, ms, f"goodput.{metric}")
    assert where.le is not None
    n = count_expr(series, canary, rng)
    slow = f"(1 - ({share_expr(series, where.le, canary, rng)}))"
    # Rolls back only when goodput is significantly low: its upper bound is under.
    value = f"(1 - ({wilson_lower_expr(slow, f'({n})', z)}))"
    guards = [f"{n} >= {min_samples}"]
    if rule.ref.kind == "goodput_vs_baseline":
        value = f"({value})\n/\n({share_expr(series, where.le, base, rng)})"
        guards.append(f"{count_expr(series, base, rng)} >= {min_samples}")
    return CanaryCheck(rule, value, tuple(guards), rule.threshold, where.notes)
