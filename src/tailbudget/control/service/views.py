"""What the runtime shows: the verdict, `/v1/status` and the figures `/metrics` exports.

Each view reads the runtime once under its lock, so a reader never sees a
batch half applied (counted but not yet in the window, or the reverse).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tailbudget.control.stage_windows import stage_summary
from tailbudget.control.windows import WindowStats

if TYPE_CHECKING:
    from tailbudget.control.service.runtime import Runtime

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


def verdict(rt: Runtime, now_s: float) -> dict[str, Any]:
    """healthy | rollback | unknown, for Argo Rollouts (jsonPath `{$.verdict}`) or Flagger."""
    with rt.lock:
        window = _window(rt, now_s)
        active = sorted(rt.controller.active)
    if "rollback" in active:
        answer = "rollback"
    elif not window.get("known"):
        answer = "unknown"
    else:
        answer = "healthy"
    return {
        "verdict": answer,
        "healthy": answer == "healthy",
        "rollback": answer == "rollback",
        "window": window,
        "active": active,
    }


def status(rt: Runtime, now_s: float) -> dict[str, Any]:
    """The JSON of `GET /v1/status`."""
    judged = verdict(rt, now_s)
    with rt.lock:
        controller = rt.controller.status(now_s)
        notes = [*rt.notes, *controller.get("notes", [])]
        if rt.snapshot_error is not None:
            notes.append(f"{rt.snapshot_error}: the write-ahead log keeps every batch")
        return {
            "service": rt.config.service,
            "verdict": judged["verdict"],
            "observations_total": rt.observations_total,
            "errors_total": rt.errors_total,
            "stage_observations": dict(rt.stage_observations),
            "window": judged["window"],
            "stages": {name: stage_summary(s) for name, s in _stages(rt, now_s).items()},
            "active": judged["active"],
            "desired_replicas": rt.replicas.desired,
            "shed": None
            if rt.shed is None
            else {"fraction": rt.shed.current_fraction, "rate_per_s": rt.shed.current_rate},
            "baseline_p99_ms": controller.get("baseline_p99_ms"),
            "dry_run": rt.policy.dry_run,
            "policy": {
                "source": rt.policy.source,
                "window_s": rt.policy.window_s,
                "evaluate_every_s": rt.policy.evaluate_every_s,
                "min_samples": rt.policy.min_samples,
                "rules": [r.model_dump() for r in rt.policy.rules],
            },
            "decisions_total": sum(rt.decisions_total.values()),
            "last_decisions": list(rt.last_decisions)[-10:],
            "last_evaluated_s": rt.last_evaluated_s,
            "notes": notes,
            "controller": controller,
            "state_dir": str(rt.state.root),
            # group commit at work: fewer fsyncs than batches under concurrent posts
            "snapshot": {"written_s": rt.snapshot_written_s, "error": rt.snapshot_error},
            "wal": {
                "bytes": rt.state.wal.size(),
                "batches": rt.state.wal.appended,
                "fsyncs": rt.state.wal.fsyncs,
            },
        }


def metrics_view(rt: Runtime, now_s: float) -> dict[str, Any]:
    """The figures `/metrics` exports."""
    with rt.lock:
        return {
            "window": _window(rt, now_s),
            "active": set(rt.controller.active),
            "desired_replicas": rt.replicas.desired,
            "shed_fraction": 0.0 if rt.shed is None else rt.shed.current_fraction,
            "observations_total": rt.observations_total,
            "errors_total": rt.errors_total,
            "stages": _stages(rt, now_s),
            "stage_observations": dict(rt.stage_observations),
            "decisions_total": dict(rt.decisions_total),
            "rules": [
                {k: rule.get(k) for k in ("name", "metric", "threshold", "value", "engaged")}
                for rule in rt.controller.status(now_s)["rules"]
            ],
        }
