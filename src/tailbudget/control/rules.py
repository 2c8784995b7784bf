"""Measuring one rule's metric on a window, with the bound it is judged by.

Latency rules (`p95`, `ttft.p95`, `retrieval.p99`) compare the window's
percentile itself (scaling should be prompt). The error-rate, goodput and
baseline rules compare a one-sided confidence bound, so binomial noise at low
traffic does not trigger a rollback: the Wilson lower bound of the error rate,
the Wilson upper bound of goodput (a fall must be significant), and the
order-statistic lower bound of a percentile over its baseline. Recovery
compares the point value with the clear threshold: hysteresis provides the
margin there.
"""

from __future__ import annotations

from dataclasses import dataclass

from tailbudget._fmt import threshold
from tailbudget.budget.policy import Rule
from tailbudget.control.stats import wilson
from tailbudget.control.windows import WindowStats

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
    stats: WindowStats | None,
    *,
    known: bool,
    baseline: float | None,
    z: float,
    confidence: float,
) -> Measure:
    """The value, trigger operand and bound of `rule` on `stats` (its series' window).

    `known` says whether the window holds enough requests; `baseline` is the
    baseline of the rule's metric (None leaves a `_vs_baseline` rule inactive).
    """
    ref = rule.ref
    if ref.ratio_of_baseline and baseline is None:
        return Measure(
            None, missing="inactive", why=f"no baseline: {rule.name} ({rule.metric}) inactive"
        )
    if stats is None or not known:
        count = 0 if stats is None else stats.count
        what = "requests" if ref.series in ("e2e", "") else f"{ref.series} observations"
        return Measure(None, missing="unknown", why=f"unknown: {count} {what} in window")
    level = f"{confidence:g}"
    if ref.kind == "error_rate":
        return _error_rate(stats, z, level)
    if ref.kind in ("goodput", "goodput_vs_baseline"):
        return _goodput(stats, z, level, baseline if ref.ratio_of_baseline else None)
    assert ref.q is not None
    v = stats.q(ref.q)
    if v is None:
        return Measure(None, missing="unknown", why=f"unknown: no {rule.metric} in window")
    if ref.kind == "quantile":
        return Measure(v, trigger=v)
    assert baseline is not None
    ratio = v / baseline
    lower_ms = stats.q_bounds(ref.q)[0]
    if lower_ms is None:
        # figures from outside (e.g. Prometheus) carry no distribution: point estimate
        return Measure(ratio, trigger=ratio, bound=None, bound_kind="point_estimate")
    lower = lower_ms / baseline
    return Measure(ratio, trigger=lower, bound=lower, bound_kind=f"{ref.percentile}_lower@{level}")


def _error_rate(stats: WindowStats, z: float, level: str) -> Measure:
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


def _goodput(stats: WindowStats, z: float, level: str, baseline: float | None) -> Measure:
    """Goodput compares its Wilson upper bound: a fall must be significant to act."""
    bounds = wilson(stats.errors, stats.count, z)  # errors here: requests not good
    if bounds is None:
        return Measure(None, missing="unknown", why="unknown: no judged requests in window")
    share, upper = 1.0 - stats.errors / stats.count, 1.0 - bounds[0]
    scale = 1.0 if baseline is None else baseline
    return Measure(
        share / scale,
        trigger=upper / scale,
        bound=upper / scale,
        bound_kind=f"wilson_cc_upper@{level}",
    )


def fmt(metric: str, value: float | None) -> str:
    """A metric value for people: '1,950 ms', '3.2%', '1.35x' (the reports' one formatter)."""
    return threshold(metric, value)


def _name(rule: Rule) -> str:
    if rule.metric == "error_rate":
        return "error rate"
    return rule.metric.replace("_vs_", " / ")


def trigger_reason(rule: Rule, m: Measure, stats: WindowStats, window_s: float | None) -> str:
    """Why a trigger fired, with the value, the bound and the threshold."""
    text = f"{_name(rule)} {fmt(rule.metric, m.value)}"
    if m.bound is not None:
        kind = "Wilson bound" if m.bound_kind and "wilson" in m.bound_kind else "bound"
        side = "upper" if not rule.rising else "lower"
        kind = kind.replace(" bound", f" {side} bound")
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
    elif rule.ref.kind in ("goodput", "goodput_vs_baseline"):
        text += f", not good={stats.errors}"
    return text


def clear_reason(rule: Rule, m: Measure, stats: WindowStats, clear: float | None = None) -> str:
    """Why a recovery happened; `clear` is the threshold the decision used when it is not
    the stated one (breach sizing's learned clear line)."""
    side = "<=" if rule.rising else ">="
    line = rule.clear_threshold if clear is None else clear
    return (
        f"{_name(rule)} {fmt(rule.metric, m.value)} {side} clear "
        f"{fmt(rule.metric, line)} "
        f"held at every evaluation for {rule.clear_for_s:g}s (rule {rule.name}), n={stats.count}"
    )
