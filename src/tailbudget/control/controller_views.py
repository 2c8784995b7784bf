"""What a `Controller` shows: its status picture and the notes a reader must know."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tailbudget.control.engine import Controller

__all__ = ["NO_BASELINE", "controller_notes", "controller_status"]

NO_BASELINE = "no baseline: p99 rollback rule inactive"


def _baseline_notes(c: Controller) -> list[str]:
    out: list[str] = []
    if c.baseline_p99_ms is None and any(r.metric == "p99_vs_baseline" for r in c.policy.rules):
        out.append(NO_BASELINE)
    for r in c.policy.rules:
        ref = r.ref
        if ref.kind == "goodput_vs_baseline" or (ref.kind == "vs_baseline" and ref.series != "e2e"):
            name = ref.name.removesuffix("_vs_baseline")
            if c.baseline(name) is None:
                out.append(f"no {name} baseline: rule {r.name} inactive")
    return out


def controller_notes(c: Controller) -> list[str]:
    """Facts a reader must know about the controller's state."""
    out = _baseline_notes(c)
    if c.series.itl_summaries:
        out.append(
            f"{c.series.itl_summaries} requests sent an itl summary, not their gaps: "
            "their own p99 stands in, so itl percentiles read high"
        )
    if c.series.unjudged:
        out.append(
            f"{c.series.unjudged} requests lacked a metric a goodput threshold names: "
            "not judged good or bad"
        )
    if c.policy.dry_run:
        out.append("dry run: decisions are journaled, not executed")
    if c.window.late:
        out.append(f"{c.window.late} observations arrived after their window had passed")
    if c.window.rejected:
        out.append(f"{c.window.rejected} observations rejected (non-finite time or value)")
    return out


def _rules(c: Controller) -> list[dict[str, Any]]:
    out = []
    for r in c.policy.rules:
        st = c.rule_state(r.name)
        out.append(
            {
                **r.model_dump(),
                "status": st.status,
                "engaged": st.engaged,
                "holding_since": st.since,
                "clear_since": st.clear_since,
                "last_fired": st.last_fired,
                "value": st.value,
                "bound": st.bound,
            }
        )
    return out


def controller_status(c: Controller, now_s: float) -> dict[str, Any]:
    """A JSON-able picture: window stats, rules, active actions, replicas, notes."""
    # stats handed in (e.g. from Prometheus) are what the controller judged by
    external = c.external and c.last_stats is not None
    stats = c.last_stats if external and c.last_stats else c.window_stats(now_s)
    series = c.last_series if external else c.series_stats(now_s)
    p = c.policy
    return {
        "t_s": now_s,
        "known": stats.known and stats.count >= p.min_samples,
        "stats": stats.to_dict(),
        "desired_replicas": c.desired_replicas,
        "replicas": p.replicas.model_dump(),
        "active": sorted(c.active),
        "dry_run": p.dry_run,
        "baseline_p99_ms": c.baseline_p99_ms,
        "baselines": dict(c.baselines),
        "series": {k: v.to_dict() for k, v in series.items()},
        "evaluations": c.evaluations,
        "last_evaluated_s": c.last_evaluated_s,
        "policy": {
            "source": p.source,
            "window_s": p.window_s,
            "evaluate_every_s": p.evaluate_every_s,
            "min_samples": p.min_samples,
            "confidence": p.confidence,
        },
        "rules": _rules(c),
        "notes": controller_notes(c),
        "last_decisions": [d.to_dict() for d in c.recent],
    }
