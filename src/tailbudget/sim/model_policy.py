"""The `model` policy: replicas from the fitted service model, the reactive rules as the guard.

Each evaluation:

- **load**: the arrival rate per evaluation is smoothed with Holt's linear
  (double exponential) smoothing, level and trend; the load to size for is the
  larger of the last minute's rate and the forecast one provisioning delay and
  one evaluation ahead (when a replica asked for now would be taking work),
  with the busiest `peak_span_s` of the last `peak_window_s` as a burst inside
  every minute (`Burst`); with `surge` > 1, also that multiple of the rate for
  a provisioning delay (a step no forecast sees);
- **mix**: the prompt and answer tokens (or the logged requests) of the
  arrivals over the last `mix_window_s`;
- **desired** = the fewest replicas meeting every gated objective with the
  headroom at that load and mix: `capacity`'s search on the same model
  (`Sizer`), so `capacity`'s curve and the policy agree by construction;
- **scale-down** only once the model has said fewer suffice at every
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

import math
from collections import deque

import numpy as np

from tailbudget.budget.objectives import Objectives
from tailbudget.budget.policy_model import ModelMode
from tailbudget.control.decision import Decision
from tailbudget.sim.fleet import Knobs, TickView
from tailbudget.sim.model import ServiceModel
from tailbudget.sim.policies import BudgetPolicy
from tailbudget.sim.sizing import Burst, Mix, Sizer, Sizing, mix_columns
from tailbudget.sim.trace import Arrivals

__all__ = ["Holt", "ModelPolicy", "ModelPolicyOptions", "model_headroom"]

DRIFT_METRIC = "measured_vs_model"
"""A drift decision's metric: measured over predicted, a ratio (`_vs_`: printed 1.31x)."""
DEFAULT_HEADROOM = 0.1
"""Without a budget headroom: size to 90% of every target (the framework's 'scale before
breach at about 90%')."""


ModelPolicyOptions = ModelMode
"""The policy's knobs are the budget's `policy.model` block (one type)."""


class Holt:
    """Holt's linear smoothing of a rate sampled once per evaluation."""

    def __init__(self, alpha: float, beta: float) -> None:
        self.alpha, self.beta = alpha, beta
        self.level: float | None = None
        self.trend = 0.0

    def update(self, x: float) -> None:
        """One observation."""
        if self.level is None:
            self.level = x
            return
        prev = self.level
        self.level = self.alpha * x + (1.0 - self.alpha) * (prev + self.trend)
        self.trend = self.beta * (self.level - prev) + (1.0 - self.beta) * self.trend

    def forecast(self, steps: float) -> float:
        """The rate `steps` evaluations ahead (never below zero)."""
        return max(0.0, (self.level or 0.0) + self.trend * steps)


class ModelPolicy:
    """Desired replicas from the model at the forecast load; the reactive rules guard drift."""

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
    ) -> None:
        self.name = "model"
        self.every_s = 10.0 if guard is None else guard.every_s
        self.model, self.arrivals, self.guard, self.opts = model, arrivals, guard, opts
        self.sizer = Sizer(model, objectives, headroom=headroom, seed=seed)
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
        self.last_sizing: Sizing | None = None
        self.peak_from = -np.inf
        self.peaks: deque[tuple[float, int]] = deque()
        self.burst: Burst | None = None
        self.background = 0.0
        self.driver = ""
        """What besides the forecast drives the count (a burst, a surge), for the reason."""
        """The last minute's rate without its busiest `peak_span_s` (a burst's background)."""
        self._sums_of: Arrivals | None = None
        self._sums_cache: tuple[np.ndarray, np.ndarray] = (np.zeros(1), np.zeros(1))
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
        """(rate over the last minute, Holt forecast at ready time, rate to size for);
        `self.burst` becomes the busiest span of the last `peak_window_s`."""
        span = self.every_s if self.last_t is None else max(now - self.last_t, 1e-9)
        self.holt.update(self._count(now - span, now) / span)
        self.last_t = now
        minute = self._count(now - 60.0, now) / min(60.0, max(now, self.every_s))
        ahead = self.holt.forecast((self.delay + self.every_s) / self.every_s)
        span = self.opts.peak_span_s
        self.burst = Burst(self._peak(now), span)
        recent = max((n for t, n in self.peaks if t > now - 60.0), default=0)
        self.background = max(0, self._count(now - 60.0, now) - recent) / (60.0 - span)
        return minute, ahead, max(minute, ahead, 1e-3)

    def _peak(self, now: float) -> int:
        """The most arrivals in a `peak_span_s` of the last `peak_window_s`: each evaluation
        adds the busiest span ending at one of its own arrivals (only past arrivals)."""
        t, o = self.arrivals.t_s, self.opts
        lo = int(np.searchsorted(t, self.peak_from, side="right"))
        hi = int(np.searchsorted(t, now, side="right"))
        self.peak_from = now
        if hi > lo:
            starts = np.searchsorted(t, t[lo:hi] - o.peak_span_s, side="right")
            self.peaks.append((now, int((np.arange(lo, hi) + 1 - starts).max())))
        while self.peaks and self.peaks[0][0] < now - o.peak_window_s:
            self.peaks.popleft()
        return max((n for _, n in self.peaks), default=0)

    def _bursty(self, burst: Burst, rate: float) -> bool:
        """Is the busiest span busier than Poisson arrivals at `rate` would show over the
        peak window, 99 times in 100? (a Gaussian bound on the busiest of twice as many
        spans as fit in it, for a sliding scan: mean + sqrt(2 ln(2n / 0.01)) sd)"""
        mean = rate * burst.span_s
        spans = max(1.0, self.opts.peak_window_s / burst.span_s)
        z = math.sqrt(2.0 * math.log(2.0 * spans / 0.01))
        return burst.count > mean + z * math.sqrt(mean) + 1.0

    def _size(self, rate: float, start: int, most: int) -> Sizing:
        """The fewest replicas for the rate with the remembered burst; with `surge`, also
        carrying `surge` x the rate for a provisioning delay (a burst as long as the delay)."""
        assert self.mix is not None
        sizing = self.sizer.size(rate, self.mix, start, most=most)
        self.driver = ""
        if self.burst is not None and self._bursty(self.burst, rate):
            # the burst recurs on the last minute's background (its rate without its own
            # busiest span): the burst's requests are not counted twice, once in the rate
            # and once as the burst
            hit = self.sizer.size(self.background, self.mix, start, most=most, burst=self.burst)
            if _larger(sizing, hit, most) is hit:
                window_min = self.opts.peak_window_s / 60
                sizing, self.driver = (
                    hit,
                    (
                        f", and a burst like the last {window_min:g} min's busiest "
                        f"({self.burst.count} requests in {self.burst.span_s:g} s) inside a minute"
                    ),
                )
        if self.opts.surge > 1.0:
            span = min(self.delay + self.every_s, 50.0)
            step = Burst(math.ceil(self.opts.surge * rate * span), span)
            surged = self.sizer.size(rate, self.mix, start, most=most, burst=step)
            if _larger(sizing, surged, most) is surged:
                sizing, self.driver = (
                    surged,
                    (f", and {self.opts.surge:g}x the rate until a replica asked for now is ready"),
                )
        return sizing

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

    def _why(self, minute: float, ahead: float, sizing: Sizing, need: int, hi: int) -> str:
        head = (
            f"load now {minute:.3g}/s, forecast {ahead:.3g}/s in {self.delay + self.every_s:g} s "
            f"(Holt){self.driver}: "
        )
        if sizing.met:
            room = "with headroom" if sizing.headroom else "(no count keeps the headroom)"
            return (
                head
                + f"{need} replicas meet every objective {room}"
                + (f"; {sizing.binding} would breach with {need - 1}" if sizing.binding else "")
            )
        return head + (
            f"no count up to {hi} meets every objective ({sizing.binding} stays over); "
            f"{need} wins 90% of what {hi} would: the rest of the tail is not load"
        )

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
        """Size for the forecast load; scale down only after a whole cooldown; guard drift."""
        now = view.now_s
        if view.done_ts.size:
            self.done.append((now, view.done_ms, view.done_ttft_ms))
        minute, ahead, rate = self._load(now)
        self.mix = self._mix(now)
        lo, hi = self.bounds
        sizing = self._size(rate, max(1, knobs.desired), hi)
        self.last_sizing = sizing
        need = hi if sizing.replicas is None else max(lo, min(hi, sizing.replicas))
        self.load, self.need = (minute, ahead, rate), need
        self.why = self._why(minute, ahead, sizing, need, hi)
        out = self._drift(view, minute)
        need = self._guard(view, knobs, need, out)
        current = knobs.desired
        if need >= current:
            self.low_since, self.low_max = None, 0
            if need > current:
                knobs.desired = need
                if not any(d.action == "scale_up" for d in out):
                    out.append(
                        self._decision(now, "scale_up", current, need, minute, ahead, sizing)
                    )
            return out
        self.low_since = now if self.low_since is None else self.low_since
        self.low_max = max(self.low_max, need)
        if now - self.low_since >= self.opts.cooldown_s:
            target = self.low_max
            self.low_since, self.low_max = None, 0
            knobs.desired = target
            out.append(self._decision(now, "scale_down", current, target, minute, ahead, sizing))
        return out

    def _decision(
        self, now: float, action: str, old: int, new: int, minute: float, ahead: float, s: Sizing
    ) -> Decision:
        if self.drifting:
            why = "drifting: the reactive rules' count"
        elif not s.met:
            why = (
                f"no count meets every objective ({s.binding} stays over); {new} wins 90% of "
                "what the most would"
            )
        else:
            room = "with headroom" if s.headroom else "(no count keeps the headroom)"
            why = f"{new} replicas meet every objective {room}" + (
                f" for {self.opts.cooldown_s:g} s" if action == "scale_down" else ""
            )
            why += f"; {s.binding} would breach with {new - 1}" if s.binding else ""
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
                f"{self.delay + self.every_s:g} s (Holt){self.driver}: {why}; desired replicas "
                f"{old} -> {new}"
            ),
            replicas=new,
        )


def _larger(a: Sizing, b: Sizing, most: int) -> Sizing:
    """The sizing asking for more replicas (an unmet search counts as the most)."""
    return b if (b.replicas or most + 1) > (a.replicas or most + 1) else a


def model_headroom(opts: ModelMode, budget_headroom: float) -> float:
    """The stated headroom, else the budget's, else 10%."""
    if opts.headroom is not None:
        return opts.headroom
    return budget_headroom if budget_headroom > 0 else DEFAULT_HEADROOM
