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
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from tailbudget.budget.policy import Policy
from tailbudget.control.decision import Decision
from tailbudget.control.engine import Controller
from tailbudget.control.llm_log import slice_series
from tailbudget.control.logsource import ReplayLog, p99_of_log
from tailbudget.errors import PolicyError
from tailbudget.report import fmt

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
    from tailbudget.control.baselines import log_baselines

    found = log_baselines(other, policy)
    others = {k: v for k, v in found.values.items() if k != "p99"}
    p99 = found.values.get("p99", p99_of_log(other))
    return Baseline(
        p99, f"p99 of {source} ({other.ts_s.size} requests)", others, tuple(found.describe(source))
    )


def window_baseline(log: ReplayLog, window_s: float) -> Baseline:
    """The p99 of the first `window_s` of the log (the 'before' of a deploy)."""
    end = log.ts_s[0] + window_s
    n = int(np.searchsorted(log.ts_s, end, side="left"))
    if n < 100:
        raise PolicyError(
            f"--baseline-window {window_s:g}s holds only {n} requests; a p99 needs at least "
            "100: widen the window or pass --baseline-p99 MS"
        )
    p99 = float(np.quantile(log.total_ms[:n], 0.99))
    return Baseline(p99, f"p99 of the log's first {window_s:g}s ({n} requests)")


def _iso(ts_s: float, absolute: bool) -> str:
    if not absolute:  # offsets from an unknown zero: an ISO-8601 duration
        return f"PT{ts_s:.3f}S"
    return datetime.fromtimestamp(ts_s, tz=UTC).isoformat().replace("+00:00", "Z")


def _num(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else round(float(v), 6)


def _decision_dict(d: Decision, t0: float, absolute: bool) -> dict[str, Any]:
    return {
        "t": _iso(d.t_s, absolute),
        "t_offset_s": round(d.t_s - t0, 3),
        "action": d.action,
        "metric": d.metric,
        "value": _num(d.value),
        "threshold": _num(d.threshold),
        "reason": d.reason,
        "rule": d.rule,
        "bound": _num(d.bound),
        "bound_kind": d.bound_kind,
        "count": d.count,
        "replicas": d.replicas,
        "dry_run": d.dry_run,
    }


_ACTIVE = ("scale_up", "shed_load", "trim_logging", "rollback")
"""Actions that would change the latencies a live service goes on to record."""


def open_loop_note(by_action: Mapping[str, int], active_at_end: list[str]) -> str:
    """What an open-loop replay cannot see, for the actions it took."""
    text = (
        "open loop: the recorded latencies do not react to the decisions, so after a "
        "scale_up, shed_load, trim_logging or rollback the replay keeps reading the latencies "
        "as they were recorded"
    )
    acted = [f"{a} x{by_action[a]}" for a in _ACTIVE if by_action.get(a)]
    if acted:
        text += (
            f"; here {', '.join(acted)}: a live service would have sped up after the first "
            "of them, so later triggers and actions still active at the end"
            f" ({', '.join(active_at_end) or 'none'}) are an upper bound"
        )
    return text


def _series_point(controller: Any, log: ReplayLog) -> dict[str, Any]:
    # The LLM series the log carries (ttft, tpot, itl...): their window p95/p99 per point.
    return {
        f"{name}_{k}": _num(getattr(v, k))
        for name, v in controller.last_series.items()
        if name in log.series and name != "goodput"
        for k in ("p95", "p99")
    }


def _point(now: float, t0: float, absolute: bool, s: Any) -> dict[str, Any]:
    return {
        "t": _iso(now, absolute),
        "t_offset_s": round(now - t0, 3),
        "p50": _num(s.p50),
        "p95": _num(s.p95),
        "p99": _num(s.p99),
        "error_rate": _num(s.error_rate),
        "error_rate_lower": _num(s.error_rate_lower),
        "count": s.count,
        "known": s.known,
    }


def replay(
    log: ReplayLog,
    policy: Policy,
    *,
    baseline: Baseline | None = None,
    service: str | None = None,
) -> dict[str, Any]:
    """Every decision the policy takes over `log`, a per-evaluation timeline and notes."""
    if baseline is not None:
        policy = policy.with_baseline(baseline.p99_ms)
        if baseline.others:
            merged = {**policy.baselines, **baseline.others}
            policy = policy.model_copy(update={"baselines": merged})
    controller = Controller(policy)
    every, window = policy.evaluate_every_s, policy.window_s
    ts, ms, err = log.ts_s, log.total_ms, log.error
    t0, t_end = float(ts[0]), float(ts[-1])
    absolute = log.absolute_time
    decisions: list[dict[str, Any]] = []
    by_action: Counter[str] = Counter()
    timeline: list[dict[str, Any]] = []
    stride, evaluations, unknown = 1, 0, 0  # every `stride`-th evaluation is kept
    fed = 0
    skipped = 0
    k = math.floor(t0 / every) + 1
    last_k = math.floor(t_end / every) + 1
    while k <= last_k:
        now = k * every
        upto = int(np.searchsorted(ts, now, side="left"))
        if upto > fed:
            controller.observe_columns(
                ts[fed:upto],
                ms[fed:upto],
                err[fed:upto],
                slice_series(log.series, fed, upto),
                slice_series(log.stages, fed, upto),
            )
            fed = upto
        for d in controller.evaluate(now):
            by_action[d.action] += 1
            if len(decisions) < MAX_DECISIONS:
                decisions.append(_decision_dict(d, t0, absolute))
        s = controller.last_stats
        assert s is not None
        evaluations += 1
        unknown += not s.known
        if (evaluations - 1) % stride == 0:
            timeline.append({**_series_point(controller, log), **_point(now, t0, absolute, s)})
            if len(timeline) > MAX_TIMELINE:
                # Halve the resolution rather than grow without bound: the output stays
                # a few MB whatever the log's span and the evaluation period.
                timeline, stride = timeline[::2], stride * 2
        k += 1
        if fed < ts.size and s.count == 0:
            nxt = float(ts[fed])
            if nxt - now > _LONG_GAP_WINDOWS * window:
                # a long silence: evaluating it would only add unknown points
                jump = math.floor(nxt / every) + 1
                skipped += jump - k
                k = jump
    notes = [open_loop_note(by_action, sorted(controller.active))]
    notes += list(log.notes) + controller.notes()
    if sum(by_action.values()) > len(decisions):
        notes.append(
            f"{sum(by_action.values()):,} decisions; the first {len(decisions):,} are listed "
            "(summary counts them all)"
        )
    if stride > 1:
        notes.append(
            f"timeline: every {stride}th of {evaluations:,} evaluations shown "
            f"(at most {MAX_TIMELINE:,} points)"
        )
    if log.series:
        notes.append(
            "LLM series replayed: "
            + ", ".join(f"{k} ({len(v)} values)" for k, v in sorted(log.series.items()))
        )
    if baseline is not None:
        notes.append(f"baseline p99 {fmt.ms(baseline.p99_ms)} ms: {baseline.source}")
        notes += list(baseline.notes)
    elif policy.baseline_p99_ms is not None:
        notes.append(f"baseline p99 {fmt.ms(policy.baseline_p99_ms)} ms: from the policy")
    notes.append(SIMULATE_POINTER)
    if skipped:
        notes.append(f"{skipped} evaluations skipped over long silences (state unknown)")
    if unknown:
        notes.append(
            f"{unknown} of {evaluations} evaluations unknown (< {policy.min_samples} requests "
            "in the window): no action, no recovery"
        )
    return {
        "source": log.source,
        "format": log.format,
        "service": service,
        "rows": log.rows,
        "start": _iso(t0, absolute),
        "end": _iso(t_end, absolute),
        "duration_s": round(t_end - t0, 3),
        "window_s": window,
        "evaluate_every_s": every,
        "evaluations": evaluations,
        "baseline_p99_ms": controller.baseline_p99_ms,
        "baselines": dict(sorted(controller.baselines.items())),
        "baseline_source": baseline.source
        if baseline
        else ("policy" if policy.baseline_p99_ms else None),
        "dry_run": policy.dry_run,
        "loop": "open",
        "final_replicas": controller.desired_replicas,
        "active_at_end": sorted(controller.active),
        "summary": dict(sorted(by_action.items())),
        "decisions": decisions,
        "timeline": timeline,
        "policy": {
            "source": policy.source,
            "window_s": window,
            "evaluate_every_s": every,
            "min_samples": policy.min_samples,
            "confidence": policy.confidence,
            "dry_run": policy.dry_run,
            "baseline_p99_ms": controller.baseline_p99_ms,
            "replicas": policy.replicas.model_dump(),
            "rules": [r.model_dump() for r in policy.rules],
        },
        "notes": notes,
    }
