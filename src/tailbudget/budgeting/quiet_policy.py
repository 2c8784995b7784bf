"""The policy of a budget measured from a healthy log: the default rules, raised where
the log's own windows reach them.

The defaults scale to the SLO (scale-up at 64% of the p95 objective, or of the highest
end-to-end percentile stated without p95; the LLM default at 90% of ttft.p95). A budget
measured from a log states objectives the log meets, and the service's own 60 s windows
cross those shares of them all the time: replaying the log would scale up, shed or roll
back the very service the budget describes, and a KEDA object exported from it would
scale a healthy service to its maximum. So `init --from` replays the log with the
default rules, through the same Controller `replay` and `serve` run, and raises each
rule that fires to 10% above the highest value the log reaches on it. A log that
breaches a stated objective keeps the defaults: the policy should act on that service.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tailbudget.budget.default_policy import default_clear
from tailbudget.budget.load import parse_budget
from tailbudget.budget.metric import parse_metric
from tailbudget.budget.policy import resolve_policy
from tailbudget.budget.policy_model import Policy, Rule
from tailbudget.control.logsource import replay_log_of
from tailbudget.control.replay import replay
from tailbudget.logs.table import LogTable

if TYPE_CHECKING:
    from tailbudget.control.replay_record import ReplayDecision, ReplayPoint

MARGIN = 1.1
"""A raised threshold sits this far beyond the log's highest window value."""
ROUNDS = 6
"""Replays at most; each raises the rules that still fire."""
QUIETED = ("scale_up", "trim_logging", "shed_load", "rollback")


def quiet_policy(text: str, log: LogTable) -> tuple[list[str], list[str]]:
    """(`policy:` lines to append to the budget text, what was raised), both empty when the
    default rules take no action on the log, or the log has no timestamps to replay."""

    if not log.has_timestamp:
        return [], []
    policy = resolve_policy(parse_budget(text, source="the measured budget"))
    data = replay_log_of(log)
    raised: dict[str, float] = {}
    for _ in range(ROUNDS):
        rep = replay(data, policy)
        fired = [d for d in rep.decisions if d.action in QUIETED]
        if not fired:
            break
        rules = [_raised(r, fired, rep.timeline) for r in policy.rules]
        pairs = zip(rules, policy.rules, strict=True)
        raised |= {r.name: r.threshold for r, old in pairs if r != old}
        policy = policy.model_copy(update={"rules": rules})
    if not raised:
        return [], []
    notes = [f"{name} to {v:,.6g}" for name, v in raised.items()]
    return _policy_lines(policy), notes


def _raised(rule: Rule, fired: list[ReplayDecision], timeline: list[ReplayPoint]) -> Rule:
    seen = [
        float(v) for d in fired if d.rule == rule.name for v in (d.value, d.bound) if v is not None
    ]
    if not seen:
        return rule
    rising = parse_metric(rule.metric).higher_is_worse
    key = rule.metric.replace(".", "_")
    # An LLM series' figures are the point's extra fields: getattr reads both kinds.
    peaks = [float(v) for p in timeline if p.known and (v := getattr(p, key, None)) is not None]
    if rising:
        t = _round_up(max([*seen, *peaks]) * MARGIN)
        t = max(t, rule.threshold)
    else:
        t = min([*seen, *peaks]) / MARGIN
        t = min(t, rule.threshold)
    if not t > 0:
        return rule
    return rule.model_copy(
        update={"threshold": t, "clear_threshold": default_clear(rule.metric, t), "expr": ""}
    )


def _round_up(v: float) -> float:
    # Three significant figures, upwards: a readable number still above the peak.
    if v <= 0 or not math.isfinite(v):
        return v
    step = 10.0 ** (math.floor(math.log10(v)) - 2)
    return math.ceil(v / step) * step


def _policy_lines(policy: Policy) -> list[str]:
    lines = [
        "policy:   # the default rules, raised above what this log's own windows reach, so the",
        "          # service as measured triggers nothing: lower them to the load you plan for",
        "  rules:",
    ]
    for r in policy.rules:
        clear = f"{{threshold: {r.clear_threshold:.6g}, for: {r.clear_for_s:g}s}}"
        lines.append(
            f"    - {{name: {r.name}, metric: {r.metric}, op: '{r.op}', "
            f"threshold: {r.threshold:.6g}, action: {r.action}, for: {r.for_s:g}s, "
            f"cooldown: {r.cooldown_s:g}s, clear: {clear}}}"
        )
    return lines
