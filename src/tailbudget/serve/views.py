"""What the runtime shows: the verdict, `/v1/status` and the figures `/metrics` exports.

Each view reads the runtime once under its lock, so a reader never sees a
batch half applied (counted but not yet in the window, or the reverse).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tailbudget._units import Percentile
from tailbudget._verdict import judge
from tailbudget.control.stage_windows import stage_summary
from tailbudget.control.windows import UNKNOWN, RollingWindow, WindowStats
from tailbudget.serve.classes import class_view
from tailbudget.serve.view_records import (
    PolicyView,
    RuleState,
    ShedView,
    SloObjective,
    SnapshotView,
    StatusView,
    VerdictBy,
    VerdictView,
    WalView,
    WindowView,
)

if TYPE_CHECKING:
    from tailbudget.budget.objectives import Objective
    from tailbudget.control.engine import Controller
    from tailbudget.serve.runtime import Runtime

__all__ = ["metrics_view", "status", "verdict"]


def _window(rt: Runtime, now_s: float) -> dict[str, Any]:
    """The window the verdict is based on: Prometheus' last answer or the in-process one."""
    if rt.config.prometheus is not None:
        stats = rt.last_stats
        source = f"prometheus {rt.config.prometheus.url}"
    else:
        stats = rt.controller.window_stats(now_s)
        source = "in-process"
    if stats is None:  # Prometheus not asked yet
        return {"known": False, "source": source, "count": 0}
    return {**stats.to_dict(), "known": stats.known, "source": source}


def _stages(rt: Runtime, now_s: float) -> dict[str, WindowStats]:
    """Each stage's window at `now_s` (always in-process: Prometheus is not asked)."""
    p = rt.policy
    return rt.stage_windows.stats(now_s, min_samples=p.min_samples, confidence=p.confidence)


def _series(rt: Runtime, now_s: float) -> dict[str, WindowStats]:
    """The LLM series and goodput windows: Prometheus' last answer or the in-process ones."""
    if rt.config.prometheus is not None:
        return {k: v for k, v in rt.controller.last_series.items() if k not in rt.stage_windows}
    p = rt.policy
    return rt.controller.series.stats(
        now_s, min_samples=p.min_samples, confidence=p.confidence, qs=p.series
    )


def _rollback_rules(rt: Runtime) -> list[dict[str, Any]]:
    """Each rollback rule's last state: the objectives the verdict is made of."""
    status = rt.controller.rule_states()
    return [
        {"rule": r.name, "metric": r.metric, **status[r.name]}
        for r in rt.policy.rules
        if r.action == "rollback"
    ]


def verdict(rt: Runtime, now_s: float) -> VerdictView:
    """healthy | rollback | unknown, for Argo Rollouts (jsonPath `{$.verdict}`) or Flagger.

    `by` names the rule (and its metric) behind a rollback, or the rules whose
    windows are unknown; a verdict is healthy only when every active rollback
    rule could judge its own metric.
    """
    with rt.lock:
        window = _window(rt, now_s)
        active = sorted(rt.controller.active)
        rules = _rollback_rules(rt)
        fired = rt.controller.engaged_rules("rollback")
        reason = rt.heartbeat.unknown_because(now_s)
    unknown = [r for r in rules if r["status"] == "unknown"]
    if "rollback" in active:  # engaged until cleared: a failed evaluation is no recovery
        answer = "rollback"
        by = [{"rule": r["rule"], "metric": r["metric"]} for r in rules if r["rule"] in fired]
    elif reason is not None:
        answer = "unknown"
        by = [{"rule": None, "metric": "evaluation"}]
    elif not window.get("known") or unknown:
        answer = "unknown"
        by = [{"rule": r["rule"], "metric": r["metric"]} for r in unknown]
        if not window.get("known"):
            by.insert(0, {"rule": None, "metric": "e2e window"})
    else:
        answer = "healthy"
        by = [
            {"rule": r["rule"], "metric": r["metric"]} for r in rules if r["status"] != "inactive"
        ]
    if answer == "unknown" and reason is None:
        reason = "too few observations in the window to judge" + (
            f" ({', '.join(str(b['metric']) for b in by)})" if by else ""
        )
    return VerdictView(
        verdict=answer,
        reason=reason if answer == "unknown" else None,
        healthy=answer == "healthy",
        rollback=answer == "rollback",
        by=[VerdictBy.model_validate(b) for b in by],
        window=WindowView.model_validate(window),
        active=active,
        objectives=[RuleState.model_validate(r) for r in rules],
    )


def _prometheus(rt: Runtime) -> dict[str, Any] | None:
    """What `--prometheus` reads: preset, queries, and the buckets around each threshold."""
    source = rt.config.prometheus
    if source is None:
        return None
    targets = {r.metric: r.threshold for r in rt.policy.rules if r.ref.kind == "quantile"}
    checks = source.buckets(targets)
    return {
        "url": source.url,
        "metrics": source.preset.name,
        "queries": source.queries(),
        "last_error": source.last_error,
        "buckets": {
            metric: {
                "threshold_ms": targets[metric],
                "le_below_s": c.below,
                "le_above_s": c.above,
                "warning": c.warning,
            }
            for metric, c in checks.items()
        },
        "notes": [*source.preset.notes, *(c.warning for c in checks.values() if c.warning)],
    }


def _class_stats(rt: Runtime, now_s: float) -> dict[str, Any]:
    """The class windows and counters for /metrics (nothing for a budget without classes)."""
    if not rt.config.classes:
        return {}
    p = rt.policy
    stats = rt.class_windows.stats(now_s, min_samples=p.min_samples, confidence=p.confidence)
    for name in rt.class_controllers:  # a listed class with no observation posted yet
        stats.setdefault(name, UNKNOWN)
    return {
        "classes": stats,
        "class_observations": dict(rt.class_observations),
        "classes_shed": list(rt.shed_order.shed),
        "classes_ruled": list(rt.class_controllers),
    }


def _classes(rt: Runtime, now_s: float) -> dict[str, Any] | None:
    """Per class: its window, its e2e objectives judged on it, its all-time count."""
    if not rt.config.classes:
        return None
    found = _class_stats(rt, now_s)
    out = class_view(found["classes"], {name: list(objs) for name, objs in rt.config.classes})
    shed = found["classes_shed"]
    extra = dict(rt.config.class_series_objectives)
    for name, view in out.items():
        view["observations_total"] = found["class_observations"].get(name, 0)
        controller = rt.class_controllers.get(name)
        if controller is not None:  # a listed class: its shed rules and whether it is shed
            view["shed"] = name in shed
            view["rules"] = controller.rule_states()
            view["objectives"] += _series_judged(controller, extra.get(name, ()), now_s)
    return out


def _series_judged(
    controller: Controller, objectives: Sequence[tuple[str, str, float]], now_s: float
) -> list[dict[str, Any]]:
    """A class's TTFT/TPOT/ITL and stage objectives judged on its rules' windows of those
    series (`unknown` with too few), as its e2e objectives are on its window."""
    if not objectives:
        return []
    series = controller.series_stats(now_s)
    out = []
    for metric, p, target in objectives:
        s = series.get(metric)
        value = s.q(Percentile.parse(p).q) if s is not None and s.known else None
        verdict = "unknown" if value is None else "breach" if value > target else "pass"
        out.append(
            {"metric": metric, "percentile": p, "target_ms": target, "value_ms": value,
             "verdict": verdict}
        )  # fmt: skip
    return out


def _window_of(rt: Runtime, metric: str) -> RollingWindow | None:
    """The in-process window an objective's metric is judged on (None: none yet, or the
    figures come from Prometheus, which has no per-request counts)."""
    if rt.config.prometheus is not None:
        return None
    if metric == "e2e":
        return rt.controller.window
    if metric in ("ttft", "tpot", "itl"):
        return rt.controller.series.window(metric)
    return rt.stage_windows.window(metric)


def _judged(rt: Runtime, o: Objective, now_s: float) -> SloObjective:
    """One gated objective over the window by the one verdict rule (tailbudget._verdict):
    a breach its requests prove, however few; a pass on enough of them; else neither."""
    window = _window_of(rt, o.metric)
    if window is not None:
        figure, n, over = window.counted(now_s, o.q, o.target_ms)
        v = judge(o.percentile, o.target_ms, figure, n, over)
    else:  # Prometheus' figures: no count over the target, the figure and the minimum
        stats = rt.last_stats if o.metric == "e2e" else rt.controller.last_series.get(o.metric)
        figure = None if stats is None else stats.q(o.q)
        n = 0 if stats is None else stats.count
        v = judge(o.percentile, o.target_ms, figure, n, None)
    return SloObjective(
        objective=o.key,
        target_ms=o.target_ms,
        measured_ms=figure,
        verdict=v.verdict,
        n=v.n,
        over=v.over,
        confidence=v.confidence,
        reason=v.reason,
    )


def _slo(rt: Runtime, now_s: float, rollout: str) -> tuple[str, list[SloObjective]]:
    """The status verdict: breach when a gated objective's window proves it, healthy when
    every one passes, else unknown. Without a budget's objectives, the rollback rules'
    verdict stands (rollback reads breach). A stale evaluation is unknown either way."""
    objs = rt.config.objectives
    gated = [o for o in objs.gated() if o.metric not in ("goodput",)] if objs else []
    if not gated:
        return {"rollback": "breach"}.get(rollout, rollout), []
    with rt.lock:
        rows = [_judged(rt, o, now_s) for o in gated]
    said = {r.verdict for r in rows}
    if "breach" in said:
        return "breach", rows
    if rt.heartbeat.unknown_because(now_s) is not None or said != {"pass"}:
        return "unknown", rows
    return "healthy", rows


def _stage_views(rt: Runtime, now_s: float) -> dict[str, dict[str, Any]]:
    """Each stage's window with its budget slices and burn (the window's percentile over
    its slice, 1 = the whole slice), as /metrics' tailbudget_stage_budget_burn."""
    out = {name: stage_summary(s) for name, s in _stages(rt, now_s).items()}
    for stage, pct, ms in rt.config.slices:
        view = out.get(stage)
        if view is None:
            continue
        view.setdefault("budget", {})[pct] = ms
        measured = view.get(pct)
        if measured is not None and ms > 0:
            view.setdefault("burn", {})[pct] = float(measured) / ms
    return out


def _objectives(rt: Runtime, now_s: float) -> list[dict[str, Any]]:
    """Each rule's metric against its threshold: the per-objective picture status shows."""
    states = rt.controller.rule_states()
    return [
        {
            "rule": r.name,
            "metric": r.metric,
            "action": r.action,
            "threshold": r.threshold,
            "op": r.op,
            **states[r.name],
        }
        for r in rt.policy.rules
    ]


def status(rt: Runtime, now_s: float) -> StatusView:
    """The JSON of `GET /v1/status`: its verdict is the SLO's (the gated objectives on
    the window), the rules' rollout verdict and actions beside it."""
    judged = verdict(rt, now_s)
    slo_verdict, slo = _slo(rt, now_s, judged.verdict)
    with rt.lock:
        controller = rt.controller.status(now_s)
        notes = [*rt.notes, *controller.get("notes", [])]
        prometheus = _prometheus(rt)
        if prometheus is not None:
            notes += prometheus["notes"]
        if rt.snapshot_error is not None:
            notes.append(f"{rt.snapshot_error}: the write-ahead log keeps every batch")
        return StatusView(
            service=rt.config.service,
            verdict=slo_verdict,
            slo=slo,
            rollout_verdict=judged.verdict,
            observations_total=rt.observations_total,
            errors_total=rt.errors_total,
            stage_observations=dict(rt.stage_observations),
            window=judged.window,
            stages=_stage_views(rt, now_s),
            series={name: s.to_dict() for name, s in _series(rt, now_s).items()},
            objectives=_objectives(rt, now_s),
            classes=_classes(rt, now_s),
            verdict_by=judged.by,
            prometheus=prometheus,
            active=judged.active,
            desired_replicas=rt.replicas.desired,
            desired_replicas_reason=_reason(rt),
            model=None if rt.model is None else rt.model.status(rt.replicas.desired),
            shed=None
            if rt.shed is None
            else ShedView(fraction=rt.shed.current_fraction, rate_per_s=rt.shed.current_rate),
            baseline_p99_ms=controller.get("baseline_p99_ms"),
            baselines=controller.get("baselines", {}),
            dry_run=rt.policy.dry_run,
            policy=PolicyView(
                mode="model" if rt.model is not None else "reactive",
                source=rt.policy.source,
                window_s=rt.policy.window_s,
                evaluate_every_s=rt.policy.evaluate_every_s,
                min_samples=rt.policy.min_samples,
                rules=list(rt.policy.rules),
            ),
            decisions_total=sum(rt.decisions_total.values()),
            last_decisions=list(rt.last_decisions)[-10:],
            last_evaluated_s=rt.last_evaluated_s,
            evaluation=rt.heartbeat.view(now_s),
            last_error=rt.heartbeat.failure,
            notes=notes,
            controller=controller,
            state_dir=str(rt.state.root),
            # group commit at work: fewer fsyncs than batches under concurrent posts
            snapshot=SnapshotView(written_s=rt.snapshot_written_s, error=rt.snapshot_error),
            wal=WalView(
                bytes=rt.state.wal.size(),
                batches=rt.state.wal.appended,
                fsyncs=rt.state.wal.fsyncs,
            ),
        )


def _reason(rt: Runtime) -> str:
    """Why the desired count is what it is: the model's sizing, or the last scale decision."""
    if rt.model is not None:
        why = rt.model.policy.why
        return f"drifting, the rules guard: {why}" if rt.model.drifting else why
    last = next(
        (d for d in reversed(rt.last_decisions) if d.get("action") in ("scale_up", "scale_down")),
        None,
    )
    return "the policy's minimum" if last is None else str(last.get("reason", ""))


def metrics_view(rt: Runtime, now_s: float) -> dict[str, Any]:
    """The figures `/metrics` exports."""
    with rt.lock:
        return {
            "evaluation_age_s": rt.heartbeat.age_s(now_s),
            "evaluation_errors": dict(rt.heartbeat.errors),
            "window": _window(rt, now_s),
            "active": set(rt.controller.active),
            "desired_replicas": rt.replicas.desired,
            "model": None
            if rt.model is None
            else {
                "predicted": dict(rt.model.policy.predicted),
                "measured": dict(rt.model.policy.measured),
                "drifting": rt.model.drifting,
                "model_replicas": rt.model.policy.need,
            },
            "shed_fraction": 0.0 if rt.shed is None else rt.shed.current_fraction,
            "observations_total": rt.observations_total,
            "errors_total": rt.errors_total,
            "stages": _stages(rt, now_s),
            "series": _series(rt, now_s),
            "stage_observations": dict(rt.stage_observations),
            **_class_stats(rt, now_s),
            "decisions_total": dict(rt.decisions_total),
            "rules": [
                {k: rule.get(k) for k in ("name", "metric", "threshold", "value", "engaged")}
                for rule in rt.controller.status(now_s)["rules"]
            ],
        }
