"""The policy engine: rolling windows in, decisions out, the same code live and in replay.

Semantics, in one place:
- a rule with `for` fires only when its condition held at every evaluation
  across that span; a missed evaluation (gap > 2 x evaluate_every) or an
  unknown window breaks the streak;
- `unknown` (fewer than `min_samples` requests) never triggers an action and
  never counts as recovery;
- after firing, a rule waits `cooldown` before it may fire again;
- recovery (scale_down, restore_logging, stop_shedding) needs the metric at or
  below the rule's clear threshold (hysteresis) at every evaluation for
  `clear_for` (stabilization); scale_down steps once per stabilization window;
- a rollback re-arms silently once its clear condition has held;
- without a baseline a `_vs_baseline` rule is inactive, and status says so;
- a rule reads the window of its metric's series: end to end, an LLM series
  (ttft, tpot, itl), goodput's good-request counts or a stage, each on the
  same ring and each unknown below `min_samples` observations;
- in dry_run every decision is made and journaled as if executed, marked.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tailbudget.budget.policy import RECOVERY, Policy, Rule
from tailbudget.control.decision import Decision
from tailbudget.control.rules import Measure, clear_reason, fmt, measure, trigger_reason
from tailbudget.control.series_windows import GOODPUT, SeriesWindows
from tailbudget.control.stage_windows import StageWindows
from tailbudget.control.stats import z_of
from tailbudget.control.wal import StageColumn
from tailbudget.control.windows import RollingWindow, WindowStats
from tailbudget.errors import PolicyError

__all__ = ["Controller", "Decision"]

log = logging.getLogger("tailbudget.control")
_EPS = 1e-9
_RECENT = 50
NO_BASELINE = "no baseline: p99 rollback rule inactive"


@dataclass
class _RuleState:
    since: float | None = None
    clear_since: float | None = None
    last_fired: float | None = None
    engaged: bool = False
    status: str = "idle"
    value: float | None = None
    bound: float | None = None


class Controller:
    """Evaluates a `Policy` over rolling windows and returns `Decision`s."""

    def __init__(
        self, policy: Policy, *, journal: Callable[[Decision], object] | None = None
    ) -> None:
        self.policy = policy
        self.journal = journal
        """Called with every decision as it is made (before the caller executes it)."""
        self.window = RollingWindow(policy.window_s, policy.sub_windows)
        reads_goodput = any(r.ref.kind.startswith("goodput") for r in policy.rules)
        self.series = SeriesWindows(
            policy.window_s, policy.sub_windows, thresholds=policy.goodput, goodput=reads_goodput
        )
        """ttft / tpot / itl windows and the good-request counts."""
        self.stages = StageWindows(policy.window_s, policy.sub_windows)
        """One window per pipeline stage."""
        self.baseline_p99_ms: float | None = policy.baseline_p99_ms
        self.baselines: dict[str, float] = dict(policy.baselines)
        """Baselines of the other metrics (`ttft.p99`, `goodput`)."""
        self.last_series: dict[str, WindowStats] = {}
        self.desired_replicas: int = policy.replicas.min
        self.evaluations = 0
        self.last_evaluated_s: float | None = None
        self.last_stats: WindowStats | None = None
        self.recent: deque[Decision] = deque(maxlen=_RECENT)
        self._z = z_of(policy.confidence)
        self._external = False
        self._rules: dict[str, _RuleState] = {r.name: _RuleState() for r in policy.rules}

    # ---- input ----------------------------------------------------------------------

    def observe(self, ts_s: float, total_ms: float, error: bool = False) -> bool:
        """Record one request (hot path: never raises; bad input is counted)."""
        try:
            return self.window.observe(ts_s, total_ms, error)
        except Exception:  # the hot path must not break a request
            log.exception("observe failed; observation dropped and counted")
            self.window.rejected += 1
            return False

    def observe_many(
        self, ts: npt.ArrayLike, total_ms: npt.ArrayLike, error: npt.ArrayLike | None = None
    ) -> int:
        """Record a batch of requests (numpy arrays); returns how many were used."""
        return self.window.observe_many(ts, total_ms, error)

    def observe_columns(
        self,
        ts: npt.NDArray[np.float64],
        total_ms: npt.NDArray[np.float64],
        error: npt.NDArray[np.bool_],
        series: Mapping[str, StageColumn] | None = None,
        stages: Mapping[str, StageColumn] | None = None,
    ) -> int:
        """Record a validated batch with its LLM series and stage times (rows by index)."""
        used = self.window.observe_many(ts, total_ms, error)
        try:
            if stages:
                self.stages.observe(ts, stages)
            self.series.observe(ts, total_ms, error, series or {}, stages or {})
        except Exception:  # the hot path must not break a request
            log.exception("series observe failed; series of the batch dropped")
        return used

    def set_baseline(self, p99_ms: float | None, metric: str = "p99") -> None:
        """Set (or with None, remove) the baseline of `metric` (`p99`, `ttft.p99`, `goodput`)."""
        if p99_ms is not None:
            if isinstance(p99_ms, bool) or not isinstance(p99_ms, int | float):
                raise PolicyError(f"baseline {metric} must be a number, got {p99_ms!r}")
            if not (math.isfinite(p99_ms) and p99_ms > 0):
                raise PolicyError(f"baseline {metric} must be a positive number, got {p99_ms!r}")
            p99_ms = float(p99_ms)
        if metric == "p99":
            self.baseline_p99_ms = p99_ms
        elif p99_ms is None:
            self.baselines.pop(metric, None)
        else:
            self.baselines[metric] = p99_ms

    def baseline(self, name: str) -> float | None:
        """The baseline of metric `name` in force, or None."""
        return self.baseline_p99_ms if name == "p99" else self.baselines.get(name)

    # ---- evaluation --------------------------------------------------------------------

    def window_stats(self, now_s: float) -> WindowStats:
        """The in-process window's stats at `now_s`."""
        return self.window.stats(
            now_s,
            min_samples=self.policy.min_samples,
            confidence=self.policy.confidence,
            qs=self.policy.series.get("e2e", ()),
        )

    def series_stats(self, now_s: float) -> dict[str, WindowStats]:
        """The in-process LLM series, goodput and stage windows at `now_s`, by name."""
        p, want = self.policy, self.policy.series
        n, level = p.min_samples, p.confidence
        out = self.stages.stats(now_s, min_samples=n, confidence=level, qs=want)
        out.update(self.series.stats(now_s, min_samples=n, confidence=level, qs=want))
        return out

    def _stats_of(
        self, rule: Rule, stats: WindowStats, series: Mapping[str, WindowStats]
    ) -> WindowStats | None:
        ref = rule.ref
        if ref.kind in ("goodput", "goodput_vs_baseline"):
            return series.get(GOODPUT)
        if ref.kind == "error_rate" or ref.series == "e2e":
            return stats
        return series.get(ref.series)

    def evaluate(
        self,
        now_s: float,
        stats: WindowStats | None = None,
        series: Mapping[str, WindowStats] | None = None,
    ) -> list[Decision]:
        """Evaluate every rule at `now_s`.

        On `stats` (end to end) and `series` (ttft, tpot, itl, goodput, stages) when
        given, e.g. from Prometheus; else on the own windows. A series missing from
        a given `series` is unknown.
        """
        p = self.policy
        self._external = stats is not None
        if stats is None:
            stats = self.window_stats(now_s)
            if series is None:
                series = self.series_stats(now_s)
        series = dict(series or {})
        if self.last_evaluated_s is not None and (
            now_s - self.last_evaluated_s > 2.0 * p.evaluate_every_s + _EPS
            or now_s < self.last_evaluated_s
        ):
            # evaluations were missed: nothing is known to have held in between
            for st in self._rules.values():
                st.since = st.clear_since = None
        self.last_evaluated_s = now_s
        self.last_stats = stats
        self.last_series = series
        self.evaluations += 1

        measures: dict[str, Measure] = {}
        holds: dict[str, bool] = {}
        for rule in p.rules:
            window = self._stats_of(rule, stats, series)
            ref = rule.ref
            base = None
            if ref.kind == "vs_baseline":
                base = self.baseline(ref.name.removesuffix("_vs_baseline"))
            elif ref.kind == "goodput_vs_baseline":
                base = self.baseline("goodput")
            m = measure(
                rule,
                window,
                known=window is not None and window.known and window.count >= p.min_samples,
                baseline=base,
                z=self._z,
                confidence=p.confidence,
            )
            measures[rule.name] = m
            holds[rule.name] = m.trigger is not None and rule.holds(m.trigger)

        decisions: list[Decision] = []
        for rule in p.rules:
            st, m = self._rules[rule.name], measures[rule.name]
            st.value, st.bound = m.value, m.bound
            if m.missing is not None:
                st.since = st.clear_since = None
                st.status = m.missing
                continue
            if holds[rule.name]:
                st.clear_since = None
                if st.since is None:
                    st.since = now_s
                st.status = "holding"
                if now_s - st.since + _EPS >= rule.for_s and self._cooled(rule, st, now_s):
                    d = self._fire(rule, st, m, stats, now_s)
                    if d is not None:
                        decisions.append(d)
                continue
            st.since = None
            st.status = "engaged" if st.engaged else "idle"
            if not st.engaged:
                st.clear_since = None
                continue
            assert m.value is not None
            if not rule.cleared(m.value):
                st.clear_since = None
                continue
            if st.clear_since is None:
                st.clear_since = now_s
            st.status = "clearing"
            if now_s - st.clear_since + _EPS >= rule.clear_for_s:
                d = self._recover(rule, st, m, stats, now_s, holds)
                if d is not None:
                    decisions.append(d)
        for d in decisions:
            self._record(d)
        return decisions

    def _cooled(self, rule: Rule, st: _RuleState, now_s: float) -> bool:
        return st.last_fired is None or now_s - st.last_fired + _EPS >= rule.cooldown_s

    def _decision(
        self,
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
            dry_run=self.policy.dry_run,
            bound=m.bound,
            bound_kind=m.bound_kind,
            count=stats.count,
            replicas=replicas,
        )

    def _fire(
        self, rule: Rule, st: _RuleState, m: Measure, stats: WindowStats, now_s: float
    ) -> Decision | None:
        reason = trigger_reason(rule, m, stats, stats.window_s)
        if rule.action == "scale_up":
            r = self.policy.replicas
            if self.desired_replicas >= r.max:
                st.status = "at_max_replicas"
                return None
            before = self.desired_replicas
            self.desired_replicas = min(r.max, before + r.step)
            st.engaged, st.last_fired = True, now_s
            reason += f"; desired replicas {before} -> {self.desired_replicas}"
            return self._decision(
                rule, "scale_up", m, rule.threshold, reason, stats, now_s, self.desired_replicas
            )
        if st.engaged:
            return None  # a toggle already on stays on; nothing new to do
        already = rule.action in self.active
        st.engaged, st.last_fired = True, now_s
        st.status = "engaged"
        if already:
            return None  # another rule turned this action on
        return self._decision(rule, rule.action, m, rule.threshold, reason, stats, now_s)

    def _recover(
        self,
        rule: Rule,
        st: _RuleState,
        m: Measure,
        stats: WindowStats,
        now_s: float,
        holds: dict[str, bool],
    ) -> Decision | None:
        undo = RECOVERY[rule.action]
        others = [o for o in self.policy.rules if o.name != rule.name and o.action == rule.action]
        if rule.action == "scale_up":
            r = self.policy.replicas
            if any(holds[o.name] for o in others) or self.desired_replicas <= r.min:
                st.engaged = self.desired_replicas > r.min and st.engaged
                st.clear_since = now_s
                return None
            before = self.desired_replicas
            self.desired_replicas = max(r.min, before - r.step)
            st.engaged = self.desired_replicas > r.min
            st.clear_since = now_s  # the next step needs a whole stabilization window again
            reason = clear_reason(rule, m, stats) + (
                f"; desired replicas {before} -> {self.desired_replicas}"
            )
            return self._decision(
                rule,
                "scale_down",
                m,
                rule.clear_threshold,
                reason,
                stats,
                now_s,
                self.desired_replicas,
            )
        st.engaged, st.clear_since = False, None
        st.status = "idle"
        if undo is None or any(self._rules[o.name].engaged for o in others):
            return None  # a rollback re-arms; a toggle another rule holds stays on
        return self._decision(
            rule, undo, m, rule.clear_threshold, clear_reason(rule, m, stats), stats, now_s
        )

    def _record(self, d: Decision) -> None:
        self.recent.append(d)
        log.info(
            "decision %s%s rule=%s metric=%s value=%s threshold=%s: %s",
            d.action,
            " (dry run)" if d.dry_run else "",
            d.rule,
            d.metric,
            fmt(d.metric, d.value),
            fmt(d.metric, d.threshold),
            d.reason,
        )
        if self.journal is not None:
            self.journal(d)

    def clear(self, action: str) -> list[str]:
        """Disengage every rule holding `action` on (an operator's word that it is over).

        Returns the names of the rules cleared. For when recovery cannot be seen:
        after a rollback the canary often gets no traffic, and no data never counts
        as recovery. A rule whose condition still holds fires again after its `for`.
        """
        cleared = []
        for rule in self.policy.rules:
            st = self._rules[rule.name]
            if rule.action == action and st.engaged:
                st.engaged, st.since, st.clear_since, st.status = False, None, None, "idle"
                cleared.append(rule.name)
        return cleared

    # ---- views -------------------------------------------------------------------------

    def rule_states(self) -> dict[str, dict[str, Any]]:
        """Each rule's last status, value and bound, by name."""
        return {
            name: {"status": st.status, "value": st.value, "bound": st.bound, "engaged": st.engaged}
            for name, st in self._rules.items()
        }

    def engaged_rules(self, action: str) -> set[str]:
        """Names of the rules of `action` now engaged."""
        return {
            r.name for r in self.policy.rules if r.action == action and self._rules[r.name].engaged
        }

    @property
    def active(self) -> frozenset[str]:
        """Actions currently in effect (scale_up while desired replicas exceed the minimum)."""
        out: set[str] = {
            r.action
            for r in self.policy.rules
            if r.action != "scale_up" and self._rules[r.name].engaged
        }
        if self.desired_replicas > self.policy.replicas.min:
            out.add("scale_up")
        return frozenset(out)

    def notes(self) -> list[str]:
        """Facts a reader must know about this controller's state."""
        out: list[str] = []
        if self.baseline_p99_ms is None and any(
            r.metric == "p99_vs_baseline" for r in self.policy.rules
        ):
            out.append(NO_BASELINE)
        for r in self.policy.rules:
            ref = r.ref
            if ref.kind == "goodput_vs_baseline" or (
                ref.kind == "vs_baseline" and ref.series != "e2e"
            ):
                name = ref.name.removesuffix("_vs_baseline")
                if self.baseline(name) is None:
                    out.append(f"no {name} baseline: rule {r.name} inactive")
        if self.series.itl_summaries:
            out.append(
                f"{self.series.itl_summaries} requests sent an itl summary, not their gaps: "
                "their own p99 stands in, so itl percentiles read high"
            )
        if self.series.unjudged:
            out.append(
                f"{self.series.unjudged} requests lacked a metric a goodput threshold names: "
                "not judged good or bad"
            )
        if self.policy.dry_run:
            out.append("dry run: decisions are journaled, not executed")
        if self.window.late:
            out.append(f"{self.window.late} observations arrived after their window had passed")
        if self.window.rejected:
            out.append(f"{self.window.rejected} observations rejected (non-finite time or value)")
        return out

    def status(self, now_s: float) -> dict[str, Any]:
        """A JSON-able picture: window stats, rules, active actions, replicas, notes."""
        # stats handed in (e.g. from Prometheus) are what the controller judged by
        external = self._external and self.last_stats is not None
        stats = self.last_stats if external and self.last_stats else self.window_stats(now_s)
        p = self.policy
        return {
            "t_s": now_s,
            "known": stats.known and stats.count >= p.min_samples,
            "stats": stats.to_dict(),
            "desired_replicas": self.desired_replicas,
            "replicas": p.replicas.model_dump(),
            "active": sorted(self.active),
            "dry_run": p.dry_run,
            "baseline_p99_ms": self.baseline_p99_ms,
            "baselines": dict(self.baselines),
            "series": {
                k: v.to_dict()
                for k, v in (self.last_series if external else self.series_stats(now_s)).items()
            },
            "evaluations": self.evaluations,
            "last_evaluated_s": self.last_evaluated_s,
            "policy": {
                "source": p.source,
                "window_s": p.window_s,
                "evaluate_every_s": p.evaluate_every_s,
                "min_samples": p.min_samples,
                "confidence": p.confidence,
            },
            "rules": [
                {
                    **r.model_dump(),
                    "status": self._rules[r.name].status,
                    "engaged": self._rules[r.name].engaged,
                    "holding_since": self._rules[r.name].since,
                    "clear_since": self._rules[r.name].clear_since,
                    "last_fired": self._rules[r.name].last_fired,
                    "value": self._rules[r.name].value,
                    "bound": self._rules[r.name].bound,
                }
                for r in p.rules
            ],
            "notes": self.notes(),
            "last_decisions": [d.to_dict() for d in self.recent],
        }

    # ---- persistence -------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """JSON-able state to restart from (rule streaks, replicas, baseline, window)."""
        return {
            "version": 1,
            "desired_replicas": self.desired_replicas,
            "baseline_p99_ms": self.baseline_p99_ms,
            "evaluations": self.evaluations,
            "last_evaluated_s": self.last_evaluated_s,
            "rules": {
                name: {
                    "since": st.since,
                    "clear_since": st.clear_since,
                    "last_fired": st.last_fired,
                    "engaged": st.engaged,
                }
                for name, st in self._rules.items()
            },
            "recent": [d.to_dict() for d in self.recent],
            "window": self.window.to_state(),
            "baselines": dict(self.baselines),
            "series": self.series.to_state(),
        }

    @classmethod
    def from_state(
        cls,
        policy: Policy,
        state: dict[str, Any],
        *,
        journal: Callable[[Decision], object] | None = None,
    ) -> Controller:
        """A controller for `policy` resumed from `to_state()` (unknown rules are skipped)."""
        c = cls(policy, journal=journal)
        try:
            r = policy.replicas
            c.desired_replicas = min(r.max, max(r.min, int(state.get("desired_replicas", r.min))))
            base = state.get("baseline_p99_ms", policy.baseline_p99_ms)
            c.set_baseline(None if base is None else float(base))
            c.evaluations = int(state.get("evaluations", 0))
            last = state.get("last_evaluated_s")
            c.last_evaluated_s = None if last is None else float(last)
            for name, raw in dict(state.get("rules", {})).items():
                if name in c._rules:
                    st = c._rules[name]
                    st.since = _opt_float(raw.get("since"))
                    st.clear_since = _opt_float(raw.get("clear_since"))
                    st.last_fired = _opt_float(raw.get("last_fired"))
                    st.engaged = bool(raw.get("engaged", False))
                    st.status = "engaged" if st.engaged else "idle"
            for raw in state.get("recent", []):
                c.recent.append(Decision(**raw))
            if "window" in state:
                c.window.load_state(state["window"])
            for name, value in dict(state.get("baselines", {})).items():
                c.set_baseline(float(value), str(name))
            if "series" in state:  # absent in state written before LLM series
                c.series.load_state(state["series"])
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise PolicyError(
                f"controller state is not valid ({type(exc).__name__}: {exc}); "
                "delete the state file to start fresh"
            ) from None
        return c


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)
