"""SLO burn-rate alerts of `--to prometheus-rules` (group `<service>-slo`): multi-window
multi-burn-rate alerts on the error budget and on the latency SLI (the share of requests
slower than the SLO, counted from the `le` bucket at the SLO threshold)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from tailbudget import _metric_names as names
from tailbudget._json import JsonDict
from tailbudget.budget.model import Budget
from tailbudget.export.common import (
    BurnWindow,
    ExportOptions,
    bucket_at_or_below,
    camel,
    error_ratio_rule,
    latency_buckets,
    le_label,
    num,
    promql_duration,
    quantile,
    seconds,
    service_selector,
    slow_ratio_rule,
    template_text,
)
from tailbudget.export.prometheus_records import error_ratio_expr


def slo_group(
    budget: Budget, options: ExportOptions, interval_s: float, notes: list[str]
) -> JsonDict | None:
    """Multi-window multi-burn-rate alerts on the error budget and the latency SLI."""
    sel = service_selector(budget)
    windows = sorted({w for b in options.burn_windows for w in (b.long_s, b.short_s)})
    records: list[JsonDict] = []
    alerts: list[JsonDict] = []
    err = budget.objectives.error_rate
    if err is None or err <= 0:
        notes.append("slo.error_rate is not set: no error-budget burn-rate alerts.")
    else:
        for w_s in windows:
            records.append(
                {
                    "record": error_ratio_rule(w_s),
                    "expr": error_ratio_expr(sel, promql_duration(w_s)),
                }
            )
        alerts += _burn_alerts(
            budget,
            options,
            ("ErrorBudgetBurn", error_ratio_rule, {}),
            err,
            "error budget burn {factor}x over {long}/{short} would need an error ratio of "
            "{limit} (>= 1): skipped.",
            notes,
        )
    buckets = options.buckets_s or latency_buckets(budget)
    for p in budget.gated:
        target_ms = budget.objectives.e2e().get(p)
        if target_ms is None:  # pragma: no cover - the budget model requires gated SLOs
            continue
        bound = bucket_at_or_below(seconds(target_ms), buckets)
        if bound is None:
            notes.append(
                f"slo.{p} = {num(target_ms)} ms is below every histogram bucket: "
                f"no latency burn-rate alert for {p}."
            )
            continue
        if abs(bound - seconds(target_ms)) > 1e-12:
            notes.append(
                f"slo.{p} = {num(target_ms)} ms is not a bucket bound; the latency SLI counts "
                f"requests over le={le_label(bound)} s as slow (stricter). Add "
                f"{num(seconds(target_ms))} to the histogram buckets for an exact SLI."
            )
        allowed = round(1.0 - quantile(p), 9)
        for w_s in windows:
            w = promql_duration(w_s)
            good = (
                f"sum by (service) (rate({names.REQUEST_DURATION}_bucket"
                f'{{{sel}, le="{le_label(bound)}"}}[{w}]))'
            )
            total = f"sum by (service) (rate({names.REQUEST_DURATION}_count{{{sel}}}[{w}]))"
            records.append({"record": slow_ratio_rule(p, w_s), "expr": f"1 - {good} / {total}"})
        extra = {"percentile": p, "slo_seconds": num(seconds(target_ms))}
        alerts += _burn_alerts(
            budget,
            options,
            (f"LatencyBudgetBurn{p.upper()}", partial(slow_ratio_rule, p), extra),
            allowed,
            f"latency burn {{factor}}x for {p} needs a slow share of {{limit}} (>= 1): skipped.",
            notes,
        )
    if not records:
        return None
    return {
        "name": f"tailbudget-{budget.service}-slo",
        "interval": promql_duration(interval_s),
        "rules": records + alerts,
    }


def _burn_alerts(
    budget: Budget,
    options: ExportOptions,
    alert: tuple[str, Callable[[float], str], dict[str, str]],
    allowed: float,
    too_high: str,
    notes: list[str],
) -> list[JsonDict]:
    """An alert (kind, series by window, extra labels) per burn window whose bad share,
    `factor` x the `allowed` share, is under 1; for each other a note, `too_high` filled
    in with the window's factor, long and short spans and the share it would need."""
    out: list[JsonDict] = []
    kind, series, extra = alert
    for b in options.burn_windows:
        limit = b.factor * allowed
        if limit >= 1.0:
            long, short = promql_duration(b.long_s), promql_duration(b.short_s)
            notes.append(
                too_high.format(factor=num(b.factor), long=long, short=short, limit=num(limit))
            )
            continue
        out.append(_burn_alert(budget, kind, series, b, limit, extra))
    return out


def _burn_alert(
    budget: Budget,
    kind: str,
    series: Callable[[float], str],
    b: BurnWindow,
    limit: float,
    extra: dict[str, str],
) -> JsonDict:
    sel = service_selector(budget)
    long_w, short_w = promql_duration(b.long_s), promql_duration(b.short_s)
    expr = (
        f"{series(b.long_s)}{{{sel}}} > {num(limit)}\n"
        f"and on (service)\n{series(b.short_s)}{{{sel}}} > {num(limit)}"
    )
    return {
        "alert": f"Tailbudget{kind}{camel(long_w)}",
        "expr": expr,
        "labels": {
            "severity": b.severity,
            "service": template_text(budget.service),
            "long_window": long_w,
            "short_window": short_w,
            "burn_rate": num(b.factor),
            **extra,
        },
        "annotations": {
            "summary": f"{template_text(budget.service)}: {kind} at {num(b.factor)}x over "
            f"{long_w} and {short_w}",
            "description": f"The bad share is above {num(limit)} ({num(b.factor)}x the budget) "
            f"over both {long_w} and {short_w}.",
        },
    }
