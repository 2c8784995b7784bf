"""Measuring one rule's metric on a window, with the bound it is judged by.

Latency rules compare the window's percentile itself (scaling should be
prompt). The error-rate and p99-vs-baseline rules compare a one-sided
confidence bound, so binomial noise at low traffic does not trigger a
rollback: the Wilson lower bound of the error rate, and the order-statistic
lower bound of the p99 over the baseline. Recovery compares the point value
with the (lower) clear threshold: hysteresis provides the margin there.
"""

from __future__ import annotations

from dataclasses import dataclass

from tailbudget.budget.policy import Rule
from tailbudget.control.stats import wilson
from tailbudget.control.windows import WindowStats
from tailbudget.report.fmt import threshold

__all__ = ["Measure", "fmt", "measure"]


@dataclass(frozen=True, slots=True)
class Measure:
    """A rule's metric on one window, or why it has none (unknown / inactive)."""

    value: float | None
    """Point value: ms, error ratio, or p99 / baseline."""
    trigger: float | None = None
    """What the trigger threshold is compared with (the bound, or the value)."""
    bound: float | None = None
    bound_kind: str | None = None
    missing: str | None = None
    """'unknown' or 'inactive' when there is nothing to compare, with `why`."""
    why: str = ""


def measure(
    rule: Rule,
    stats: WindowStats,
    *,
    known: bool,
    baseline_p99_ms: float | None,
    z: float,
    confidence: float,
) -> Measure:
    """The value, trigger operand and bound of `rule` on `stats`."""
    if rule.metric == "p99_vs_baseline" and baseline_p99_ms is None:
        return Measure(None, missing="inactive", why="no baseline: p99 rollback rule inactive")
    if not known:
        return Measure(None, missing="unknown", why=f"unknown: {stats.count} requests in window")
    level = f"{confidence:g}"
    if rule.metric in ("p50", "p95", "p99"):
        v = getattr(stats, rule.metric)
        if v is None:
            return Measure(None, missing="unknown", why=f"unknown: no {rule.metric} in window")
        return Measure(v, trigger=v)
    if rule.metric == "error_rate":
        rate = stats.error_rate
        if rate is None:
            return Measure(None, missing="unknown", why="unknown: no requests in window")
        lower = stats.error_rate_lower
        if lower is None:
            bounds = wilson(stats.errors, stats.count, z)
            lower = bounds[0] if bounds else None
        if lower is None:
            return Measure(None, missing="unknown", why="unknown: no requests in window")
        return Measure(rate, trigger=lower, bound=lower, bound_kind=f"wilson_cc_lower@{level}")
    # p99_vs_baseline
    assert baseline_p99_ms is not None
    if stats.p99 is None:
        return Measure(None, missing="unknown", why="unknown: no p99 in window")
    ratio = stats.p99 / baseline_p99_ms
    if stats.p99_lower is None:
        # figures from outside (e.g. Prometheus) carry no distribution: point estimate
        return Measure(ratio, trigger=ratio, bound=None, bound_kind="point_estimate")
    lower = stats.p99_lower / baseline_p99_ms
    return Measure(ratio, trigger=lower, bound=lower, bound_kind=f"p99_lower@{level}")


def fmt(metric: str, value: float | None) -> str:
    """A metric value for people: '1,950 ms', '3.2%', '1.35x' (the reports' one formatter)."""
    return threshold(metric, value)


def trigger_reason(rule: Rule, m: Measure, stats: WindowStats, window_s: float | None) -> str:
    """Why a trigger fired, with the value, the bound and the threshold."""
    name = "error rate" if rule.metric == "error_rate" else rule.metric.replace("_vs_", " / ")
    text = f"{name} {fmt(rule.metric, m.value)}"
    if m.bound is not None:
        kind = "Wilson lower bound" if rule.metric == "error_rate" else "lower bound"
        text += f" ({kind} {fmt(rule.metric, m.bound)})"
    text += f" {rule.op} {fmt(rule.metric, rule.threshold)}"
    if rule.expr and any(k in rule.expr for k in ("%", "of", "x")):
        text += f" [{rule.expr}]"
    if rule.for_s:
        text += f", held at every evaluation for {rule.for_s:g}s"
    if window_s:
        text += f"; {window_s:g}s window"
    text += f", n={stats.count}"
    if rule.metric == "error_rate":
        text += f", errors={stats.errors}"
    return text


def clear_reason(rule: Rule, m: Measure, stats: WindowStats) -> str:
    """Why a recovery happened."""
    name = "error rate" if rule.metric == "error_rate" else rule.metric.replace("_vs_", " / ")
    return (
        f"{name} {fmt(rule.metric, m.value)} <= clear {fmt(rule.metric, rule.clear_threshold)} "
        f"held at every evaluation for {rule.clear_for_s:g}s (rule {rule.name}), n={stats.count}"
    )
