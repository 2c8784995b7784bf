"""A `Controller`'s restart state: rule streaks, replicas, baselines and its windows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tailbudget.control.decision import Decision
from tailbudget.control.sizing import LoadLine
from tailbudget.errors import PolicyError

if TYPE_CHECKING:
    from tailbudget.control.engine import Controller

__all__ = ["controller_state", "restore_controller"]


def controller_state(c: Controller) -> dict[str, Any]:
    """JSON-able state to restart from (rule streaks, replicas, baseline, window)."""
    return {
        "version": 1,
        "desired_replicas": c.desired_replicas,
        "baseline_p99_ms": c.baseline_p99_ms,
        "evaluations": c.evaluations,
        "last_evaluated_s": c.last_evaluated_s,
        "rules": {
            r.name: {
                "since": st.since,
                "clear_since": st.clear_since,
                "last_fired": st.last_fired,
                "engaged": st.engaged,
                "line": st.line.to_state(),
            }
            for r in c.policy.rules
            for st in (c.rule_state(r.name),)
        },
        "recent": [d.to_dict() for d in c.recent],
        "window": c.window.to_state(),
        "baselines": dict(c.baselines),
        "series": c.series.to_state(),
        # breach sizing's memory: which counts breached when (a scale-down does not return
        # to one within SCALE_DOWN_HOLD_S, restart or not) and the counts asked for over
        # the last window (what served the windows a restarted controller judges)
        "breached_at": {str(n): t for n, t in sorted(c.breached_at.items())},
        "asked": [[t, n] for t, n in c.asked],
    }


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def _restore_rules(c: Controller, rules: dict[str, Any]) -> None:
    known = {r.name for r in c.policy.rules}
    for name, raw in rules.items():
        if name in known:  # rules no longer in the policy are skipped
            st = c.rule_state(name)
            st.since = _opt_float(raw.get("since"))
            st.clear_since = _opt_float(raw.get("clear_since"))
            st.last_fired = _opt_float(raw.get("last_fired"))
            st.engaged = bool(raw.get("engaged", False))
            if "line" in raw:  # absent in state written before breach sizing
                st.line = LoadLine.from_state(dict(raw["line"]))
            st.status = "engaged" if st.engaged else "idle"


def _restore_sizing(c: Controller, state: dict[str, Any]) -> None:
    """Breach sizing's hold and served counts (absent in state written before they were kept)."""
    for n, t in dict(state.get("breached_at", {})).items():
        c.breached_at[int(n)] = float(t)
    c.asked.extend((float(t), int(n)) for t, n in state.get("asked", []))


def restore_controller(c: Controller, state: dict[str, Any]) -> None:
    """Load `controller_state()` output into a fresh controller; PolicyError when malformed."""
    try:
        r = c.policy.replicas
        c.desired_replicas = min(r.max, max(r.min, int(state.get("desired_replicas", r.min))))
        base = state.get("baseline_p99_ms", c.policy.baseline_p99_ms)
        c.set_baseline(None if base is None else float(base))
        c.evaluations = int(state.get("evaluations", 0))
        c.last_evaluated_s = _opt_float(state.get("last_evaluated_s"))
        _restore_rules(c, dict(state.get("rules", {})))
        for raw in state.get("recent", []):
            c.recent.append(Decision(**raw))
        if "window" in state:
            c.window.load_state(state["window"])
        for name, value in dict(state.get("baselines", {})).items():
            c.set_baseline(float(value), str(name))
        if "series" in state:  # absent in state written before LLM series
            c.series.load_state(state["series"])
        _restore_sizing(c, state)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise PolicyError(
            f"controller state is not valid ({type(exc).__name__}: {exc}); "
            "delete the state file to start fresh"
        ) from None
