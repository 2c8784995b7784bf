"""Replay: run the live `Controller` over a recorded log with a simulated clock.

The log is fed in time order, one evaluation interval at a time, through
`observe_many`; the controller is evaluated at every multiple of
`evaluate_every` of log time. Same engine code as live, no separate path.

A replay is open loop: the latencies are the recorded ones, whatever the controller
decides, so it shows when the policy would act, not what its actions would change.
The output says so (`loop: "open"` and the first note).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

from tailbudget import _fmt as fmt
from tailbudget.budget.policy import Policy
from tailbudget.control.baselines import log_baselines
from tailbudget.control.cold_windows import mark_cold_rollbacks
from tailbudget.control.decision import Decision
from tailbudget.control.engine import Controller
from tailbudget.control.llm_log import slice_series
from tailbudget.control.logsource import ReplayLog, p99_of_log
from tailbudget.control.replay_classes import ClassPolicy, replay_classes, shed_steps
from tailbudget.control.replay_record import (
    ReplayDecision,
    ReplayPoint,
    ReplayPolicy,
    ReplayReport,
    ReplayRows,
)
from tailbudget.control.windows import WindowStats
from tailbudget.errors import PolicyError

__all__ = ["Baseline", "log_baseline", "replay", "window_baseline"]

SIMULATE_POINTER = (
    "to see what the decisions do to latency and replica-hours, run `tailbudget simulate LOG` "
    "(the same policy closed loop, on a service model fitted from this log)"
)
_LONG_GAP_WINDOWS = 30
MAX_DECISIONS = 10_000
"""Decisions listed in a replay (the summary counts every one)."""
MAX_TIMELINE = 5_000
"""Timeline points in a replay; a longer run keeps every 2nd, 4th, ... evaluation."""
"""A silence longer than this many windows is jumped over (one unknown point is kept)."""


@dataclass(frozen=True)
class Baseline:
    """The p99 the rollback rule compares with, and where it came from."""

    p99_ms: float
    source: str
    others: Mapping[str, float] = field(default_factory=dict)
    """Baselines of the other metrics rules compare with (`ttft.p99`, `goodput`)."""
    notes: tuple[str, ...] = ()
    """What was measured for them, and which could not be."""


def log_baseline(other: ReplayLog, policy: Policy, source: str) -> Baseline:
    """Every baseline `policy` compares with, from the whole of the baseline log `other`."""

    found = log_baselines(other, policy)
    others = {k: v for k, v in found.values.items() if k != "p99"}
    # Not `get(..., p99_of_log(other))`: that would sort the whole log again every time.
    p99 = found.values["p99"] if "p99" in found.values else p99_of_log(other)
    return Baseline(
        p99, f"p99 of {source} ({other.ts_s.size} requests)", others, tuple(found.describe(source))
    )


def window_baseline(log: ReplayLog, window_s: float) -> Baseline:
    """The p99 of the first `window_s` of the log (the 'before' of a deploy)."""
    end = log.ts_s[0] + window_s
    n = int(np.searchsorted(log.ts_s, end, side="left"))
    if n < 100:
        raise PolicyError(
            f"baseline_window {window_s:g}s holds only {n} requests; a p99 needs at least "
            "100: widen the window or state baseline_p99 in ms",
            param="baseline_window",
        )
    p99 = float(np.quantile(log.total_ms[:n], 0.99))
    return Baseline(p99, f"p99 of the log's first {window_s:g}s ({n} requests)")


def _iso(ts_s: float, absolute: bool) -> str:
    if not absolute:  # offsets from an unknown zero: an ISO-8601 duration
        return f"PT{ts_s:.3f}S"
    return datetime.fromtimestamp(ts_s, tz=UTC).isoformat().replace("+00:00", "Z")


def _num(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else round(float(v), 6)


def _decision(d: Decision, t0: float, absolute: bool) -> ReplayDecision:
    # cold_window stays None here: mark_cold_rollbacks sets it once the walk is done
    return ReplayDecision(
        t=_iso(d.t_s, absolute),
        t_offset_s=round(d.t_s - t0, 3),
        action=d.action,
        metric=d.metric,
        value=_num(d.value),
        threshold=_num(d.threshold),
        reason=d.reason,
        rule=d.rule,
        bound=_num(d.bound),
        bound_kind=d.bound_kind,
        count=d.count,
        replicas=d.replicas,
        dry_run=d.dry_run,
    )


_ACTIVE = ("scale_up", "shed_load", "trim_logging", "rollback")
"""Actions that would change the latencies a live service goes on to record."""


def open_loop_note(
    by_action: Mapping[str, int], active_at_end: list[str], *, at_completion: bool = False
) -> str:
    """What an open-loop replay cannot see, for the actions it took, and when it observes
    each request (`at_completion`: the log's timestamp is the send time)."""
    when = "at completion: send time + e2e" if at_completion else "at the log's timestamp"
    text = (
        f"open loop: each request is observed {when}; the recorded latencies do not react "
        "to the decisions, so after a scale_up, shed_load, trim_logging or rollback the "
        "replay keeps reading the latencies as they were recorded"
    )
    acted = [f"{a} x{by_action[a]}" for a in _ACTIVE if by_action.get(a)]
    if acted:
        text += (
            f"; here {', '.join(acted)}: a live service would have sped up after the first "
            "of them, so later triggers and actions still active at the end"
            f" ({', '.join(active_at_end) or 'none'}) are an upper bound"
        )
    return text


def _series_point(controller: Controller, log: ReplayLog) -> dict[str, float | None]:
    # The LLM series the log carries (ttft, tpot, itl...): their window p95/p99 per point.
    return {
        f"{name}_{k}": _num(getattr(v, k))
        for name, v in controller.last_series.items()
        if name in log.series and name != "goodput"
        for k in ("p95", "p99")
    }


def _point(
    now: float, t0: float, absolute: bool, s: WindowStats, series: dict[str, float | None]
) -> ReplayPoint:
    # The series' figures are the record's extra fields, one pair per series.
    return ReplayPoint(
        t=_iso(now, absolute),
        t_offset_s=round(now - t0, 3),
        p50=_num(s.p50),
        p95=_num(s.p95),
        p99=_num(s.p99),
        error_rate=_num(s.error_rate),
        error_rate_lower=_num(s.error_rate_lower),
        count=s.count,
        known=s.known,
        **series,
    )


@dataclass
class _Walk:
    """What walking the log's evaluations found."""

    decisions: list[ReplayDecision] = field(default_factory=list)
    by_action: Counter[str] = field(default_factory=Counter)
    timeline: list[ReplayPoint] = field(default_factory=list)
    stride: int = 1
    """Every `stride`-th evaluation is in the timeline."""
    evaluations: int = 0
    unknown: int = 0
    skipped: int = 0


def _feed(controller: Controller, log: ReplayLog, lo: int, hi: int) -> None:
    controller.observe_columns(
        log.ts_s[lo:hi],
        log.total_ms[lo:hi],
        log.error[lo:hi],
        slice_series(log.series, lo, hi),
        slice_series(log.stages, lo, hi),
    )


def _evaluate(controller: Controller, log: ReplayLog, now: float, walk: _Walk) -> WindowStats:
    t0, absolute = float(log.ts_s[0]), log.absolute_time
    for d in controller.evaluate(now):
        walk.by_action[d.action] += 1
        if len(walk.decisions) < MAX_DECISIONS:
            walk.decisions.append(_decision(d, t0, absolute))
    s = controller.last_stats
    assert s is not None
    walk.evaluations += 1
    walk.unknown += not s.known
    if (walk.evaluations - 1) % walk.stride == 0:
        walk.timeline.append(_point(now, t0, absolute, s, _series_point(controller, log)))
        if len(walk.timeline) > MAX_TIMELINE:
            # Halve the resolution rather than grow without bound: the output stays
            # a few MB whatever the log's span and the evaluation period.
            walk.timeline, walk.stride = walk.timeline[::2], walk.stride * 2
    return s


def _walk(controller: Controller, log: ReplayLog) -> _Walk:
    """Feed the log one evaluation period at a time and evaluate after each."""
    every, window = controller.policy.evaluate_every_s, controller.policy.window_s
    ts = log.ts_s
    walk = _Walk()
    fed = 0
    k = math.floor(float(ts[0]) / every) + 1
    last_k = math.floor(float(ts[-1]) / every) + 1
    while k <= last_k:
        now = k * every
        upto = int(np.searchsorted(ts, now, side="left"))
        if upto > fed:
            _feed(controller, log, fed, upto)
            fed = upto
        s = _evaluate(controller, log, now, walk)
        k += 1
        if fed < ts.size and s.count == 0:
            nxt = float(ts[fed])
            if nxt - now > _LONG_GAP_WINDOWS * window:
                # a long silence: evaluating it would only add unknown points
                jump = math.floor(nxt / every) + 1
                walk.skipped += jump - k
                k = jump
    return walk


def _notes(
    controller: Controller, log: ReplayLog, walk: _Walk, baseline: Baseline | None
) -> list[str]:
    policy = controller.policy
    notes = [
        open_loop_note(walk.by_action, sorted(controller.active), at_completion=log.at_completion)
    ]
    notes += list(log.notes) + controller.notes()
    if sum(walk.by_action.values()) > len(walk.decisions):
        notes.append(
            f"{sum(walk.by_action.values()):,} decisions; the first {len(walk.decisions):,} "
            "are listed (summary counts them all)"
        )
    if walk.stride > 1:
        notes.append(
            f"timeline: every {walk.stride}th of {walk.evaluations:,} evaluations shown "
            f"(at most {MAX_TIMELINE:,} points)"
        )
    if log.series:
        notes.append(
            "LLM series replayed: "
            + ", ".join(f"{k} ({fmt.count(len(v))} values)" for k, v in sorted(log.series.items()))
        )
    if walk.decisions:
        # The same objective reads 3,825 ms on the whole log and 3,828 in a decision: say why.
        notes.append(
            "a decision's value is its window's percentile as serve reads it live, off a "
            "sketch within 1% of the exact figure; the objectives on the whole log are exact"
        )
    if baseline is not None:
        notes.append(f"baseline p99 {fmt.ms(baseline.p99_ms)} ms: {baseline.source}")
        notes += list(baseline.notes)
    elif policy.baseline_p99_ms is not None:
        notes.append(f"baseline p99 {fmt.ms(policy.baseline_p99_ms)} ms: from the policy")
    notes.append(SIMULATE_POINTER)
    if walk.skipped:
        notes.append(
            f"{fmt.counted(walk.skipped, 'evaluation')} skipped over long silences (state unknown)"
        )
    if walk.unknown:
        notes.append(
            f"{walk.unknown} of {fmt.counted(walk.evaluations, 'evaluation')} unknown "
            f"(< {policy.min_samples} "
            "requests in the window): no action, no recovery"
        )
    return notes


def _with_baseline(policy: Policy, baseline: Baseline | None) -> Policy:
    if baseline is None:
        return policy
    policy = policy.with_baseline(baseline.p99_ms)
    if baseline.others:
        policy = policy.model_copy(update={"baselines": {**policy.baselines, **baseline.others}})
    return policy


def replay(
    log: ReplayLog,
    policy: Policy,
    *,
    baseline: Baseline | None = None,
    service: str | None = None,
    events: Sequence[tuple[datetime, str]] = (),
    cold_window_s: float = 300.0,
    classes: Sequence[ClassPolicy] = (),
    class_by: str | None = None,
) -> ReplayReport:
    """Every decision the policy takes over `log`, a per-evaluation timeline and notes.

    `events` (time, name), as the audit's `--events` reads them: a rollback inside the
    `cold_window_s` after a scale-up is marked as a cold start (`cold_window`).
    `classes` (with `log.labels`): each class's policy on its own requests, and which
    class each shed_load sheds (the highest priority number first).
    """
    policy = _with_baseline(policy, baseline)
    controller = Controller(policy)
    walk = _walk(controller, log)
    t0, t_end, absolute = float(log.ts_s[0]), float(log.ts_s[-1]), log.absolute_time
    cold = mark_cold_rollbacks(walk.decisions, t0, events, cold_window_s) if absolute else None
    if baseline is not None:
        source: str | None = baseline.source
    else:
        source = "policy" if policy.baseline_p99_ms else None
    report = ReplayReport(
        source=log.source,
        format=log.format,
        service=service,
        rows=ReplayRows(
            total=log.rows_total,
            used=int(log.ts_s.size),
            rejected=sum(log.rejected_reasons.values()),
            rejected_reasons=dict(log.rejected_reasons),
        ),
        start=_iso(t0, absolute),
        end=_iso(t_end, absolute),
        duration_s=round(t_end - t0, 3),
        window_s=policy.window_s,
        evaluate_every_s=policy.evaluate_every_s,
        evaluations=walk.evaluations,
        baseline_p99_ms=controller.baseline_p99_ms,
        baselines=dict(sorted(controller.baselines.items())),
        baseline_source=source,
        dry_run=policy.dry_run,
        final_replicas=controller.desired_replicas,
        active_at_end=sorted(controller.active),
        summary=dict(sorted(walk.by_action.items())),
        decisions=walk.decisions,
        timeline=walk.timeline,
        policy=ReplayPolicy(
            source=policy.source,
            window_s=policy.window_s,
            evaluate_every_s=policy.evaluate_every_s,
            min_samples=policy.min_samples,
            confidence=policy.confidence,
            dry_run=policy.dry_run,
            baseline_p99_ms=controller.baseline_p99_ms,
            replicas=policy.replicas,
            rules=list(policy.rules),
        ),
        notes=_notes(controller, log, walk, baseline) + ([cold] if cold else []),
    )
    if not classes:
        return report
    ran = replay_classes(log, classes, lambda c, sub: _decisions(_walk(c, sub)))
    order = [c.name for c in sorted(classes, key=lambda c: (-c.priority, c.name))]
    return report.model_copy(
        update={
            "class_by": class_by,
            "classes": ran,
            "shedding": shed_steps(walk.decisions, ran, order),
        }
    )


def _decisions(walk: _Walk) -> tuple[list[ReplayDecision], Counter[str]]:
    return walk.decisions, walk.by_action
