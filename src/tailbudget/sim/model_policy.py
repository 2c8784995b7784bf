"""The `model` policy: the floor's judgement of the forecast minute, the reactive rules as guard.

Each evaluation:

- **load**: the arrival rate per evaluation is smoothed with Holt's linear
  (double exponential) smoothing, level and trend; the load to size for is the
  larger of the last minute's rate and the forecast one provisioning delay and
  one evaluation ahead (when a replica asked for now would be taking work); with
  `surge` > 1, that multiple of it (a step no forecast sees);
- **the forecast minute** (`Forecast`): the whole minutes of the last
  `mix_window_s`, each as it arrived (its bursts, its prompts and answers),
  scaled to the load sized for (thinned, or joined by a shifted copy of its own
  arrivals), two draws each;
- **desired** = the fewest replicas meeting every gated objective in at least
  `probability` of the forecast minutes, each judged as the hindsight floor
  judges a minute (`sim.judge`: the same function, the same search). The margin
  is that probability, not a tightened target. With a forecast that knows the
  arrivals (`KnownMinutes`) the policy asks, at every evaluation, for what the
  floor pays at that second;
- **scale-down** only once the judgement has said fewer suffice at every
  evaluation of a whole cooldown; then to the largest count it asked for in it;
- **drift guard**: the model's prediction at the current load and ready count
  is compared with what the last minute measured (e2e and TTFT objectives,
  what the completions carry); when the measured figure exceeds the predicted
  one by more than `drift_error` for `drift_for_s`, the policy is *drifting*:
  the reactive rules (the live Controller on the budget's rules) take over
  scaling and shedding until the measurement is back within the error for as
  long.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from tailbudget.budget.objectives import Objectives
from tailbudget.budget.policy_model import ModelMode
from tailbudget.control.decision import Decision
from tailbudget.sim.fit_table import outside_words
from tailbudget.sim.fleet import Knobs, TickView
from tailbudget.sim.forecast import Forecast, Holt, RecentMinutes
from tailbudget.sim.judge import Judge, Minute
from tailbudget.sim.model import ServiceModel
from tailbudget.sim.policies import BudgetPolicy
from tailbudget.sim.sizing import Mix, Sizer, mix_columns
from tailbudget.sim.trace import Arrivals

__all__ = ["ModelPolicy", "ModelPolicyOptions", "model_headroom"]

DRIFT_METRIC = "measured_vs_model"
"""A drift decision's metric: measured over predicted, a ratio (`_vs_`: printed 1.31x)."""
DEFAULT_HEADROOM = 0.1
"""The drift guard's predictions are sized with this headroom when none is stated."""

ModelPolicyOptions = ModelMode
"""The policy's knobs are the budget's `policy.model` block (one type)."""


class ModelPolicy:
    """Desired replicas: the floor's judgement of the forecast minute; the rules guard drift."""

    def __init__(
        self,
        model: ServiceModel,
        objectives: Objectives,
        arrivals: Arrivals,
        guard: BudgetPolicy | None,
        *,
        opts: ModelMode,
        headroom: float,
        bounds: tuple[int, int],
        seed: int = 0,
        forecast: Forecast | None = None,
    ) -> None:
        self.name = "model"
        self.every_s = 10.0 if guard is None else guard.every_s
        self.model, self.arrivals, self.guard, self.opts = model, arrivals, guard, opts
        self.judge = Judge(model, objectives)
        self.forecast: Forecast = forecast or RecentMinutes(opts.mix_window_s, seed)
        self.sizer = Sizer(model, objectives, headroom=headroom, seed=seed)
        """The drift guard's prediction at the current load and count."""
        self.objectives = objectives
        self.bounds = bounds
        self.delay = float(model.provision_delay_s.value)
        self.holt = Holt(opts.alpha, opts.beta)
        self.last_t: float | None = None
        self.low_since: float | None = None
        self.low_max = 0
        self.done: deque[tuple[float, np.ndarray, np.ndarray | None]] = deque()
        self.off_since: float | None = None
        self.back_since: float | None = None
        self.drifting = False
        self._sums_of: Arrivals | None = None
        self._sums_cache: tuple[np.ndarray, np.ndarray] = (np.zeros(1), np.zeros(1))
        self._judged: dict[object, tuple[int, bool, int]] = {}
        self._minutes: list[Minute] = []
        self.mix: Mix | None = None
        self.predicted: dict[str, float] = {}
        """The e2e/TTFT objectives the model predicts at the current load and replicas."""
        self.measured: dict[str, float] = {}
        """The same over the last minute's completions (when enough)."""
        self.ratio: float | None = None
        """The largest measured / predicted of those (None when nothing was measured)."""
        self.load: tuple[float, float, float] = (0.0, 0.0, 0.0)
        """(rate over the last minute, forecast, rate sized for) at the last evaluation."""
        self.need = bounds[0]
        self.met = True
        """False: no count up to the bound meets the forecast minutes with the probability."""
        self.draws = 0
        """Forecast minutes judged at the last evaluation."""
        self.why = "no evaluation yet"

    # ---- load ---------------------------------------------------------------------

    def _count(self, lo: float, hi: float) -> int:
        t = self.arrivals.t_s
        return int(np.searchsorted(t, hi, side="right") - np.searchsorted(t, lo, side="right"))

    def _mix(self, now: float) -> Mix:
        t, a = self.arrivals.t_s, self.arrivals
        lo = int(np.searchsorted(t, now - self.opts.mix_window_s, side="right"))
        hi = int(np.searchsorted(t, now, side="right"))
        if hi - lo < 20:
            lo = max(0, hi - 200)
        if hi <= lo:
            return Mix(np.arange(self.model.samples.size, dtype=np.int64))
        sums = self._sums()
        return Mix(
            a.src[lo:hi],
            None if a.input_tokens is None else a.input_tokens[lo:hi],
            None if a.output_tokens is None else a.output_tokens[lo:hi],
            means=(
                (sums[0][hi] - sums[0][lo]) / (hi - lo),
                (sums[1][hi] - sums[1][lo]) / (hi - lo),
            ),
        )

    def _sums(self) -> tuple[np.ndarray, np.ndarray]:
        """Running sums of what the mix's bucket averages, per arrival (once per arrivals):
        the mix of any window is then two subtractions, not a pass over it."""
        if self._sums_of is not self.arrivals:
            cols = mix_columns(self.model, self.arrivals.src, self.arrivals)
            self._sums_of = self.arrivals
            self._sums_cache = tuple(
                np.concatenate(([0.0], np.cumsum(c, dtype=np.float64))) for c in cols
            )  # type: ignore[assignment]
        return self._sums_cache

    def _load(self, now: float) -> tuple[float, float, float]:
        """(rate over the last minute, Holt forecast at ready time, rate to size for)."""
        span = self.every_s if self.last_t is None else max(now - self.last_t, 1e-9)
        self.holt.update(self._count(now - span, now) / span)
        self.last_t = now
        minute = self._count(now - 60.0, now) / min(60.0, max(now, self.every_s))
        ahead = self.holt.forecast((self.delay + self.every_s) / self.every_s)
        return minute, ahead, max(minute, ahead, 1e-3) * self.opts.surge

    def _judge(self, now: float, rate: float) -> tuple[int, bool, int]:
        """(the count, whether it meets the minutes with the probability, minutes judged):
        the most any forecast minute needs; cached per forecast key."""
        key, minutes = self.forecast.minutes(self.arrivals, now, rate)
        self._minutes = minutes
        if key in self._judged:
            return self._judged[key]
        lo, hi = self.bounds
        need, met, judged = max(1, lo), True, 0
        for draws in minutes:
            judged += len(draws)
            n = self.judge.fewest(draws, self.opts.probability, hi)
            if n is None:
                met = False
                n = self.judge.knee(draws, max(1, lo), hi)
            need = max(need, n)
        self._judged[key] = (min(hi, need), met, judged)
        return self._judged[key]

    # ---- drift ----------------------------------------------------------------------

    def _window(self, now: float) -> dict[str, np.ndarray]:
        """The last minute's finite e2e and TTFT figures (enough of them), by metric."""
        while self.done and self.done[0][0] < now - 60.0:
            self.done.popleft()
        out: dict[str, np.ndarray] = {}
        for metric in ("e2e", "ttft"):
            vals = [v if metric == "e2e" else f for _, v, f in self.done]
            got = [v for v in vals if v is not None]
            x = np.concatenate(got) if got else np.empty(0)
            x = x[np.isfinite(x)]
            if x.size >= self.opts.min_samples:
                out[metric] = x
        return out

    def _departs(self, now: float, rate: float, ready: int) -> bool:
        """Does any e2e/TTFT objective measure above the model's prediction plus its error?"""
        pred = self.sizer.predict(rate, self.mix or self._mix(now), max(1, ready))
        self.predicted, self.measured = {}, {}
        wanted = [
            r for r in pred if r.objective.metric in ("e2e", "ttft") and r.measured_ms is not None
        ]
        window = self._window(now) if wanted else {}
        qs: dict[str, list[float]] = {}
        for r in wanted:
            qs.setdefault(r.objective.metric, []).append(r.objective.q)
        # one partial sort per metric for all its quantiles
        got = {
            (m, q): float(v)
            for m, q_list in qs.items()
            if m in window
            for q, v in zip(q_list, np.quantile(window[m], q_list), strict=True)
        }
        off = False
        self.ratio = None
        for r in wanted:
            o = r.objective
            assert r.measured_ms is not None
            self.predicted[o.key] = r.measured_ms
            value = got.get((o.metric, o.q))
            if value is None:
                continue
            self.measured[o.key] = value
            off = off or value > r.measured_ms * (1.0 + self.opts.drift_error)
            if r.measured_ms > 0:
                self.ratio = max(self.ratio or 0.0, value / r.measured_ms)
        return off

    def _drift(self, view: TickView, rate: float) -> list[Decision]:
        now, was = view.now_s, self.drifting
        off = self._departs(now, rate, view.ready)
        if off:
            self.back_since = None
            self.off_since = now if self.off_since is None else self.off_since
            if now - self.off_since >= self.opts.drift_for_s:
                self.drifting = True
        else:
            self.off_since = None
            self.back_since = now if self.back_since is None else self.back_since
            if now - self.back_since >= self.opts.drift_for_s:
                self.drifting = False
        if self.drifting == was:
            return []
        what = (
            f"measured departs from the model's prediction by more than "
            f"{self.opts.drift_error:.0%} for {self.opts.drift_for_s:g} s: the reactive rules "
            "take over"
            if self.drifting
            else "measured back within the model's error: the model scales again"
        )
        action = "drift_detected" if self.drifting else "drift_cleared"
        # A ratio, in a `_vs_` metric's unit (1.31x against 1.25x), never "0.25 ms".
        limit = 1.0 + self.opts.drift_error
        return [Decision(now, action, DRIFT_METRIC, self.ratio, limit, "model", what)]

    # ---- the evaluation -------------------------------------------------------------

    def _why(self, minute: float, ahead: float, need: int, hi: int) -> str:
        head = (
            f"load now {minute:.3g}/s, forecast {ahead:.3g}/s in {self.delay + self.every_s:g} s "
            f"(Holt){self._surged()}: "
        )
        p = self.opts.probability
        if self.met:
            return head + (
                f"{need} replicas meet every objective in {p:.0%} of the forecast minutes "
                f"({self.draws} judged as the floor judges a minute{self._spread()})"
            )
        return head + (
            f"no count up to {hi} meets every objective in {p:.0%} of the forecast minutes; "
            f"{need} wins 90% of what {hi} would: the rest of the tail is not load"
        )

    def _spread(self) -> str:
        """'; their counts vary ...' when the recent minutes proved more spread than Poisson."""
        f = self.forecast
        if not isinstance(f, RecentMinutes) or f.spread <= 1.0:
            return ""
        return (
            f"; their counts vary {f.spread:.3g}x a Poisson count's variance, as the last "
            f"{f.history} minutes' did"
        )

    def _surged(self) -> str:
        s = self.opts.surge
        return f", x{s:g} surge until a replica asked for now is ready" if s > 1.0 else ""

    def _guard(self, view: TickView, knobs: Knobs, need: int, out: list[Decision]) -> int:
        """The reactive rules: while drifting they scale up and shed (scaling down stays
        the model's); the count to hold."""
        guard_knobs = Knobs(desired=knobs.desired)
        ruled: list[Decision] = []
        if self.guard is not None:
            self.guard.controller.desired_replicas = knobs.desired
            ruled = self.guard.tick(view, guard_knobs)
        if self.drifting:
            if guard_knobs.desired > need:
                need = guard_knobs.desired
                out += [d for d in ruled if d.action == "scale_up"]
            out += [d for d in ruled if d.action not in ("scale_up", "scale_down")]
            knobs.shed, knobs.trim = guard_knobs.shed, guard_knobs.trim
        else:
            knobs.shed = knobs.trim = False
        return need

    def tick(self, view: TickView, knobs: Knobs) -> list[Decision]:
        """Judge the forecast minute; scale down only after a whole cooldown; guard drift."""
        now = view.now_s
        if view.done_ts.size:
            self.done.append((now, view.done_ms, view.done_ttft_ms))
        minute, ahead, rate = self._load(now)
        self.mix = self._mix(now)
        lo, hi = self.bounds
        need, self.met, self.draws = self._judge(now, rate)
        need = max(lo, min(hi, need))
        self.load, self.need = (minute, ahead, rate), need
        self.why = self._why(minute, ahead, need, hi)
        out = self._drift(view, minute)
        need = self._guard(view, knobs, need, out)
        current = knobs.desired
        if need >= current:
            self.low_since, self.low_max = None, 0
            if need > current:
                knobs.desired = need
                if not any(d.action == "scale_up" for d in out):
                    out.append(self._decision(now, "scale_up", current, need))
            return out
        self.low_since = now if self.low_since is None else self.low_since
        self.low_max = max(self.low_max, need)
        if now - self.low_since >= self.opts.cooldown_s:
            target = self.low_max
            self.low_since, self.low_max = None, 0
            knobs.desired = target
            out.append(self._decision(now, "scale_down", current, target))
        return out

    def _binding(self, n: int) -> str:
        """'; X would breach with n - 1' (the gated objective most often over its target
        in the forecast minutes one replica fewer misses), or '' at one replica."""
        if n <= 1 or self.drifting or not self.met:
            return ""
        over: dict[str, int] = {}
        for draws in self._minutes:
            for d in draws:
                for r in self.judge.run(d, n - 1):
                    if r.objective.gated and (r.measured_ms is None or r.minutes_in_breach):
                        over[r.objective.key] = over.get(r.objective.key, 0) + 1
        if not over:
            return ""
        return f"; {max(over, key=lambda k: over[k])} would breach with {n - 1}"

    def _decision(self, now: float, action: str, old: int, new: int) -> Decision:
        minute, ahead, _ = self.load
        p = self.opts.probability
        if self.drifting:
            why = "drifting: the reactive rules' count"
        elif not self.met:
            why = (
                f"no count meets every objective in {p:.0%} of the forecast minutes; {new} "
                "wins 90% of what the most would"
            )
        else:
            why = f"{new} replicas meet every objective in {p:.0%} of the forecast minutes" + (
                f" for {self.opts.cooldown_s:g} s" if action == "scale_down" else ""
            )
            why += self._spread()
            why += self._binding(new)
        fitted = self.model.fit is not None and bool(self.model.fit.rows)  # an LLM fit's runs
        why += outside_words(self.model.load_levels, ahead / max(new, 1)) if fitted else ""
        # value: the count the model asks for; threshold: the count it had. (Load now
        # against the forecast read as a scale-up below its own threshold.)
        return Decision(
            t_s=now,
            action=action,
            metric="replicas",
            value=float(new),
            threshold=float(old),
            rule="model",
            reason=(
                f"load now {minute:.3g}/s, forecast {ahead:.3g}/s in "
                f"{self.delay + self.every_s:g} s (Holt){self._surged()}: {why} (each judged "
                f"as the floor judges a minute); desired replicas {old} -> {new}"
            ),
            replicas=new,
        )


def model_headroom(opts: ModelMode, budget_headroom: float) -> float:
    """The stated headroom, else the budget's, else 10%."""
    if opts.headroom is not None:
        return opts.headroom
    return budget_headroom if budget_headroom > 0 else DEFAULT_HEADROOM
