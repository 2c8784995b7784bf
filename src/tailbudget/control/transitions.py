"""One rule's state machine: holding, firing, cooling down, clearing, recovering.

Each evaluation `step`s every rule on its `Measure`: a rule that held at every
evaluation across its `for` fires (once its cooldown has passed); an engaged
rule whose value stays at or below its clear threshold for `clear_for`
recovers. scale_up steps the desired replicas up and, on recovery, down one
step per stabilization window (with `sizing: breach`, the LLM default's, up to
the count the breach asks for and down only while one replica fewer is predicted
to hold; see `_breach_target` and `_clears`); toggles (trim_logging, shed_load) turn on once
whichever rule turns them on and off when no rule holds them; a rollback
re-arms silently once its clear condition has held.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tailbudget.budget.default_policy import LLM_SCALE_SHARE
from tailbudget.budget.policy import RECOVERY, Rule
from tailbudget.control.decision import Decision
from tailbudget.control.rules import Measure, clear_reason, fmt, trigger_reason
from tailbudget.control.sizing import LoadLine
from tailbudget.control.windows import WindowStats

if TYPE_CHECKING:
    from tailbudget.control.engine import Controller

__all__ = ["EPS", "RuleState", "sized", "step", "trigger_of"]

EPS = 1e-9
"""Slack on time comparisons, so a span of exactly `for` counts as held."""


@dataclass
class RuleState:
    """Where one rule stands between evaluations."""

    since: float | None = None
    clear_since: float | None = None
    last_fired: float | None = None
    engaged: bool = False
    status: str = "idle"
    value: float | None = None
    bound: float | None = None
    line: LoadLine = field(default_factory=LoadLine)
    """Breach sizing: the rule's percentile against load per replica (control/sizing.py)."""
    load: float | None = None
    """Breach sizing: the last window's observations per second per serving replica."""


SCALE_DOWN_HOLD_S = 300.0
"""Breach sizing never scales down to a count that breached (a sized scale-up fired while
it served the window) within this span: the Kubernetes HPA's default scale-down
stabilization window. The flap it prevents: a percentile whose window noise crosses the
threshold at n replicas, stepped down to n, up again, down again."""

MEASURED_WINDOWS = 2
"""A count's own measurement predicts it (not the line scaled to it) once it served this many
whole windows' worth of evaluations: one window is one draw of its noise."""

_SCALE_UP_LIMIT = (2, 4)
"""Breach sizing asks at most for max(2 x current, current + 4) replicas at once: the
Kubernetes HPA's default scale-up limit (100% or 4 pods per period, the larger)."""


def step(
    c: Controller,
    rule: Rule,
    m: Measure,
    holds: dict[str, bool],
    stats: WindowStats,
    now_s: float,
) -> Decision | None:
    """Advance `rule` by one evaluation; the decision it makes, if any."""
    st = c.rule_state(rule.name)
    st.value, st.bound = m.value, m.bound
    if m.missing is not None:
        st.since = st.clear_since = None
        st.status = m.missing
        return None
    if holds[rule.name]:
        st.clear_since = None
        if st.since is None:
            st.since = now_s
        st.status = "holding"
        if now_s - st.since + EPS >= rule.for_s and _cooled(rule, st, now_s):
            return _fire(c, rule, st, m, stats, now_s)
        return None
    st.since = None
    st.status = "engaged" if st.engaged else "idle"
    if not st.engaged:
        st.clear_since = None
        return None
    assert m.value is not None
    if not _clears(c, rule, m.value):
        st.clear_since = None
        return None
    if st.clear_since is None:
        st.clear_since = now_s
    st.status = "clearing"
    if now_s - st.clear_since + EPS >= rule.clear_for_s:
        return _recover(c, rule, st, m, stats, now_s, holds)
    return None


def _cooled(rule: Rule, st: RuleState, now_s: float) -> bool:
    return st.last_fired is None or now_s - st.last_fired + EPS >= rule.cooldown_s


def _decision(
    c: Controller,
    rule: Rule,
    action: str,
    m: Measure,
    threshold: float,
    reason: str,
    stats: WindowStats,
    now_s: float,
    replicas: int | None = None,
) -> Decision:
    return Decision(
        t_s=now_s,
        action=action,
        metric=rule.metric,
        value=m.value,
        threshold=threshold,
        rule=rule.name,
        reason=reason,
        dry_run=c.policy.dry_run,
        bound=m.bound,
        bound_kind=m.bound_kind,
        count=stats.count,
        replicas=replicas,
    )


def _fire(
    c: Controller, rule: Rule, st: RuleState, m: Measure, stats: WindowStats, now_s: float
) -> Decision | None:
    reason = trigger_reason(rule, m, stats, stats.window_s)
    if rule.action == "scale_up":
        r = c.policy.replicas
        if c.desired_replicas >= r.max:
            st.status = "at_max_replicas"
            return None
        before = c.desired_replicas
        after = before + r.step
        if sized(c, rule):
            after = _breach_target(c, rule, m, now_s)
            if after <= before:
                return None  # the window still shows fewer replicas than asked for
        c.desired_replicas = min(r.max, after)
        st.engaged, st.last_fired = True, now_s
        at = trigger_of(c, rule)
        if at != rule.threshold:
            reason += f" (over {at:.4g}: {LLM_SCALE_SHARE:.0%} of the room above the floor)"
        reason += f"; desired replicas {before} -> {c.desired_replicas}"
        return _decision(c, rule, "scale_up", m, at, reason, stats, now_s, c.desired_replicas)
    if st.engaged:
        return None  # a toggle already on stays on; nothing new to do
    already = rule.action in c.active
    st.engaged, st.last_fired = True, now_s
    st.status = "engaged"
    if already:
        return None  # another rule turned this action on
    return _decision(c, rule, rule.action, m, rule.threshold, reason, stats, now_s)


def _recover(
    c: Controller,
    rule: Rule,
    st: RuleState,
    m: Measure,
    stats: WindowStats,
    now_s: float,
    holds: dict[str, bool],
) -> Decision | None:
    others = [o for o in c.policy.rules if o.name != rule.name and o.action == rule.action]
    if rule.action == "scale_up":
        # one fewer replica only when no other scale-up rule's metric is above its own clear
        # threshold: with rules on ttft and tpot, the ttft rule clearing alone would step
        # down into a tpot breach, then back up (a flap)
        blocked = any(holds[o.name] or _above_clear(c, o) for o in others)
        return _scale_down(c, rule, st, m, stats, now_s, blocked)
    st.engaged, st.clear_since = False, None
    st.status = "idle"
    undo = RECOVERY[rule.action]
    if undo is None or any(c.rule_state(o.name).engaged for o in others):
        return None  # a rollback re-arms; a toggle another rule holds stays on
    return _decision(
        c, rule, undo, m, rule.clear_threshold, clear_reason(rule, m, stats), stats, now_s
    )


def _above_clear(c: Controller, rule: Rule) -> bool:
    """The rule's metric, as this evaluation measured it, is above its clear threshold
    (unknown is not: it never blocks, as it never triggers)."""
    value = c.rule_state(rule.name).value
    return value is not None and not _clears(c, rule, value)


def sized(c: Controller, rule: Rule) -> bool:
    """Breach sizing applies: a scale_up rule on a latency percentile, `sizing: breach`."""
    return (
        c.policy.sizing == "breach"
        and rule.action == "scale_up"
        and rule.rising
        and rule.ref.kind == "quantile"
    )


def _breach_target(c: Controller, rule: Rule, m: Measure, now_s: float) -> int:
    """The replicas the breach asks for: those that served the window, times how far its
    percentile is over the threshold (target tracking, as the HPA sizes), at least one
    more than served it and at most the HPA's scale-up limit over the count asked now."""
    assert m.value is not None
    served = max(1, c.replicas_behind_window(now_s))
    want = c.rule_state(rule.name).line.wanted(served, m.value, trigger_of(c, rule))
    c.breached_at[served] = now_s
    now = c.desired_replicas
    return min(want, max(_SCALE_UP_LIMIT[0] * now, now + _SCALE_UP_LIMIT[1]))


def trigger_of(c: Controller, rule: Rule) -> float:
    """The threshold the rule's trigger compares with. Under breach sizing a scale_up rule
    on tpot, itl or e2e (the LLM default's, at LLM_SCALE_SHARE of its target) fires on
    that share of the room above its learned floor (control/sizing.py): 90% of a target
    near the decode step floor sits on the floor, where window noise fires it at any
    count. The ttft rule keeps its stated threshold (DESIGN.md: ttft.p95 past 90% of
    its target), as does every rule without breach sizing."""
    if not sized(c, rule) or rule.ref.series == "ttft":
        return rule.threshold
    return c.rule_state(rule.name).line.trigger(rule.threshold, LLM_SCALE_SHARE)


def _clears(c: Controller, rule: Rule, value: float) -> bool:
    """The rule's clear condition. Under breach sizing: one replica fewer is predicted to
    hold, within the rule's hysteresis share (clear / trigger threshold) of what the
    threshold leaves above the learned floor: by what n - 1 measured over whole windows
    where it served them (`measured_fewer`), else the part above the floor scaled to
    n - 1 of n (control/sizing.py). So the clear threshold cannot sit below the floor, as
    a share of the target can when the target is near it."""
    n = c.desired_replicas
    if not sized(c, rule) or n <= 1:
        return rule.cleared(value)
    share = rule.clear_threshold / rule.threshold
    there = measured_fewer(c, rule)
    return c.rule_state(rule.name).line.one_fewer_holds(n, value, trigger_of(c, rule), share, there)


def measured_fewer(c: Controller, rule: Rule) -> float | None:
    """What one replica fewer measured when it served whole windows (MEASURED_WINDOWS of
    them, after start-up), moved along the learned slope to this window's load spread
    over it; None when it has not (control/sizing.py)."""
    n, st = c.desired_replicas, c.rule_state(rule.name)
    if n <= 1 or st.load is None:
        return None
    need = MEASURED_WINDOWS * c.policy.sub_windows
    return st.line.measured(n - 1, st.load * n / (n - 1), need)


def _scale_down(
    c: Controller,
    rule: Rule,
    st: RuleState,
    m: Measure,
    stats: WindowStats,
    now_s: float,
    blocked: bool,
) -> Decision | None:
    r = c.policy.replicas
    if sized(c, rule):
        fewer = max(r.min, c.desired_replicas - r.step)
        breached = max((t for n, t in c.breached_at.items() if n >= fewer), default=None)
        blocked = blocked or (breached is not None and now_s - breached < SCALE_DOWN_HOLD_S)
    if blocked or c.desired_replicas <= r.min:
        st.engaged = c.desired_replicas > r.min and st.engaged
        st.clear_since = now_s
        return None
    before = c.desired_replicas
    clear = clear_of(c, rule)  # at the count it steps down from, as _clears judged it
    there = measured_fewer(c, rule) if sized(c, rule) else None
    c.desired_replicas = max(r.min, before - r.step)
    st.engaged = c.desired_replicas > r.min
    st.clear_since = now_s  # the next step needs a whole stabilization window again
    reason = clear_reason(rule, m, stats, clear)
    if there is not None:
        reason += f"; {before - 1} replicas measured {fmt(rule.metric, there)} at this load"
    reason += f"; desired replicas {before} -> {c.desired_replicas}"
    return _decision(c, rule, "scale_down", m, clear, reason, stats, now_s, c.desired_replicas)


def clear_of(c: Controller, rule: Rule) -> float:
    """The value `_clears` lets through at the current count: the stated clear threshold,
    or under breach sizing the learned line (floor + share of the room, scaled to n - 1 of
    n). A decision's threshold and reason give this one, not the stated figure it no
    longer compares with."""
    n = c.desired_replicas
    if not sized(c, rule) or n <= 1:
        return rule.clear_threshold
    share = rule.clear_threshold / rule.threshold
    there = measured_fewer(c, rule) is not None
    return c.rule_state(rule.name).line.clear_line(n, trigger_of(c, rule), share, there)
