"""Recording rules of `--to prometheus-rules`: per-stage and end-to-end percentiles over
the policy window, request counts, the error ratio and its Wilson lower bound (the inputs
the policy alerts compare, as the controller does)."""

from __future__ import annotations

from tailbudget import _metric_names as names
from tailbudget._json import JsonDict
from tailbudget._units import PERCENTILES
from tailbudget.budget.model import Budget
from tailbudget.budget.policy import Policy
from tailbudget.control.stats import z_of
from tailbudget.export.common import (
    error_lower_rule,
    error_ratio_rule,
    num,
    promql_duration,
    quantile,
    request_count_rule,
    request_quantile_rule,
    service_selector,
    stage_quantile_rule,
    wilson_lower_expr,
)


def requests_increase_rule(window_s: float) -> str:
    """Requests counted by tailbudget_requests_total over the window."""
    return f"service:tailbudget_requests:increase{promql_duration(window_s)}"


def error_ratio_expr(sel: str, window: str) -> str:
    """Share of requests with outcome=error over `window`, by service (0 with no error)."""
    total = f"sum by (service) (rate({names.REQUESTS_TOTAL}{{{sel}}}[{window}]))"
    errors = f'sum by (service) (rate({names.REQUESTS_TOTAL}{{{sel}, outcome="error"}}[{window}]))'
    # Without any error yet the error series does not exist; `or ... * 0` makes the ratio 0.
    return f"({errors} or {total} * 0) / {total}"


def latency_group(budget: Budget, policy: Policy, interval_s: float) -> JsonDict:
    """Recording rules over the policy window (the inputs of the policy alerts)."""
    sel = service_selector(budget)
    w_s = policy.window_s
    w = promql_duration(w_s)
    rules: list[JsonDict] = []
    for p in PERCENTILES:
        rules.append(
            {
                "record": stage_quantile_rule(p, w_s),
                "expr": f"histogram_quantile({num(quantile(p))}, sum by (service, stage, le) "
                f"(rate({names.STAGE_DURATION}_bucket{{{sel}}}[{w}])))",
            }
        )
    for p in PERCENTILES:
        rules.append(
            {
                "record": request_quantile_rule(p, w_s),
                "expr": f"histogram_quantile({num(quantile(p))}, sum by (service, le) "
                f"(rate({names.REQUEST_DURATION}_bucket{{{sel}}}[{w}])))",
            }
        )
    rules.append(
        {
            "record": request_count_rule(w_s),
            "expr": f"sum by (service) (increase({names.REQUEST_DURATION}_count{{{sel}}}[{w}]))",
        }
    )
    rules.append(
        {
            "record": requests_increase_rule(w_s),
            "expr": f"sum by (service) (increase({names.REQUESTS_TOTAL}{{{sel}}}[{w}]))",
        }
    )
    rules.append({"record": error_ratio_rule(w_s), "expr": error_ratio_expr(sel, w)})
    z = z_of(policy.confidence)
    p_ = f"{error_ratio_rule(w_s)}{{{sel}}}"
    n_ = f"{requests_increase_rule(w_s)}{{{sel}}}"
    rules.append({"record": error_lower_rule(w_s), "expr": wilson_lower_expr(p_, n_, z)})
    return {
        "name": f"tailbudget-{budget.service}-latency",
        "interval": promql_duration(interval_s),
        "rules": rules,
    }
