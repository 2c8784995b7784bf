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
from typing import Any

import numpy as np
import numpy.typing as npt

from tailbudget.budget.policy import Policy, Rule
from tailbudget.control.columns import StageColumn
from tailbudget.control.controller_state import controller_state, restore_controller
from tailbudget.control.controller_views import NO_BASELINE as NO_BASELINE
from tailbudget.control.controller_views import controller_notes, controller_status
from tailbudget.control.decision import Decision
from tailbudget.control.rules import Measure, fmt, measure
from tailbudget.control.series_windows import GOODPUT, SeriesWindows
from tailbudget.control.stage_windows import StageWindows
from tailbudget.control.stats import z_of
from tailbudget.control.transitions import EPS, RuleState, sized, step, trigger_of
from tailbudget.control.windows import RollingWindow, WindowStats
from tailbudget.errors import PolicyError

__all__ = ["Controller", "Decision"]

log = logging.getLogger("tailbudget.control")
_RECENT = 50


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
        self.external = False
        """True when the last evaluation judged stats handed in (e.g. from Prometheus)."""
        self._z = z_of(policy.confidence)
        self._rules: dict[str, RuleState] = {r.name: RuleState() for r in policy.rules}
        self.asked: deque[tuple[float, int]] = deque()
        """(evaluation time, desired replicas) over the last window (breach sizing)."""
        self.breached_at: dict[int, float] = {}
        """Replica count -> when a sized scale-up last fired while it served the window
        (breach sizing: scale-down does not return to it within SCALE_DOWN_HOLD_S)."""

    def replicas_behind_window(self, now_s: float) -> int:
        """The fewest replicas asked for over the last window: what served the requests
        the window holds (a replica asked for serves only once it is ready)."""
        asked = [n for t, n in self.asked if t >= now_s - self.policy.window_s - EPS]
        return min([self.desired_replicas, *asked])

    def rule_state(self, name: str) -> RuleState:
        """The live state of rule `name` (KeyError for a rule not in the policy)."""
        return self._rules[name]

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
        # One slot grouping of the timestamps for every window of the batch (one ring).
        groups = self.series.groups(ts)
        used = self.window.observe_many(ts, total_ms, error, groups=groups)
        try:
            if stages:
                self.stages.observe(ts, stages, groups)
            self.series.observe(ts, total_ms, error, series or {}, stages or {}, groups)
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

    def _inputs(
        self,
        now_s: float,
        stats: WindowStats | None,
        series: Mapping[str, WindowStats] | None,
    ) -> tuple[WindowStats, dict[str, WindowStats]]:
        """The stats this evaluation judges; breaks every streak after missed evaluations."""
        p = self.policy
        self.external = stats is not None
        if stats is None:
            stats = self.window_stats(now_s)
            if series is None:
                series = self.series_stats(now_s)
        out = dict(series or {})
        if self.last_evaluated_s is not None and (
            now_s - self.last_evaluated_s > 2.0 * p.evaluate_every_s + EPS
            or now_s < self.last_evaluated_s
        ):
            # evaluations were missed: nothing is known to have held in between
            for st in self._rules.values():
                st.since = st.clear_since = None
        self.last_evaluated_s = now_s
        self.last_stats = stats
        self.last_series = out
        self.evaluations += 1
        return stats, out

    def _measure(
        self, stats: WindowStats, series: Mapping[str, WindowStats]
    ) -> tuple[dict[str, Measure], dict[str, bool]]:
        """Every rule's measure, and whether its trigger condition holds."""
        p = self.policy
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
            if m.trigger is not None and sized(self, rule):
                holds[rule.name] = m.trigger > trigger_of(self, rule)
            else:
                holds[rule.name] = m.trigger is not None and rule.holds(m.trigger)
        return measures, holds

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
        judged, by_name = self._inputs(now_s, stats, series)
        measures, holds = self._measure(judged, by_name)
        self.asked.append((now_s, self.desired_replicas))
        while self.asked and self.asked[0][0] < now_s - self.policy.window_s - EPS:
            self.asked.popleft()
        for rule in self.policy.rules:  # every rule's value of this evaluation, before any
            st = self._rules[rule.name]  # steps (a scale-down reads the others')
            st.value = measures[rule.name].value
            if st.value is not None and measures[rule.name].missing is None and sized(self, rule):
                self._learn(rule, st, judged, by_name, now_s)
        decisions: list[Decision] = []
        for rule in self.policy.rules:
            d = step(self, rule, measures[rule.name], holds, judged, now_s)
            if d is not None:
                decisions.append(d)
        for d in decisions:
            self._record(d)
        return decisions

    def _learn(
        self,
        rule: Rule,
        st: RuleState,
        stats: WindowStats,
        series: Mapping[str, WindowStats],
        now_s: float,
    ) -> None:
        """Breach sizing: one more window on the rule's load line (control/sizing.py)."""
        window = self._stats_of(rule, stats, series)
        span = window.window_s if window is not None and window.window_s else self.policy.window_s
        # a window still filling (the first minute after a start) holds fewer seconds than
        # its width: its count over the width put the first windows at a fraction of their
        # load, a point that bent the line (a slope learned from start-up, not from load)
        span = min(span, self.window.covered_s())
        if window is None or st.value is None or span <= 0:
            return
        served = max(1, self.replicas_behind_window(now_s))
        # a whole window: the ring full and one count asked for throughout (what that count
        # measured, for predicting it again rather than the line scaled to it)
        whole = span >= self.policy.window_s - EPS and served == max(n for _, n in self.asked)
        st.load = window.count / span / served
        st.line.add(now_s, st.load, st.value, served, whole)

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
        return controller_notes(self)

    def status(self, now_s: float) -> dict[str, Any]:
        """A JSON-able picture: window stats, rules, active actions, replicas, notes."""
        return controller_status(self, now_s)

    # ---- persistence -------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """JSON-able state to restart from (rule streaks, replicas, baseline, window)."""
        return controller_state(self)

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
        restore_controller(c, state)
        return c
