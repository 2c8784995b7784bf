"""Replicas a load needs, from the fitted model: `capacity`'s search at a rate and request mix.

The model policy asks every evaluation and the hindsight floor asks once a
minute, so answers are cached per bucket: the rate rounded up to the next step
of 10% (a bucket never asks for less than the load it stands for) and the mix's
mean prompt and answer tokens (25% steps). Each candidate count runs the model
with that many replicas held fixed on Poisson arrivals at the bucket's rate,
the requests drawn from the mix, for long enough to hold `min_requests`.
With a `Burst` (the busiest few seconds seen lately, when busier than the
rate) the run is whole minutes, each holding the burst once at a random
offset: an objective judges each minute's percentile, and a 5 s burst is a
share of its minute, not a sustained rate. Every bucket scales the same random
draws (common random numbers), so neighbouring loads differ by load, not luck.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from tailbudget.budget.objectives import Objectives
from tailbudget.sim.capacity import fewest_replicas
from tailbudget.sim.engines import run_once
from tailbudget.sim.model import ServiceModel
from tailbudget.sim.objectives import ObjectiveResult, measure
from tailbudget.sim.policies import FixedPolicy
from tailbudget.sim.trace import Arrivals

__all__ = ["Burst", "Mix", "Sizer", "Sizing", "mix_columns", "worst_ratio"]

_RATE_STEP = 1.10
_MIX_STEP = 1.25
_MAX_UTILIZATION = 0.9
"""A queue-model count busier than this is refused: its queue grows over spans longer than
the simulated one, which starts empty and so understates the wait near saturation."""
_PROBE_MAX = 64
"""The most replicas simulated to learn what no count beats (the tail of the work itself)."""
_MIN_RATE = 0.05
"""Requests/s below which a load is sized as this one (a replica is up anyway)."""


@dataclass(frozen=True)
class Mix:
    """Requests to draw from: rows of the model's samples, with a trace's token counts."""

    src: npt.NDArray[np.int64]
    input_tokens: npt.NDArray[np.float64] | None = None
    output_tokens: npt.NDArray[np.float64] | None = None

    means: tuple[float, float] | None = None
    """The means `key` buckets, when the caller has them (else computed from the rows)."""

    def key(self, model: ServiceModel) -> tuple[int, int]:
        """The mix's bucket: mean prompt and answer tokens (or mean work) in 25% steps."""

        def step(x: float) -> int:
            return round(math.log(max(x, 1e-9)) / math.log(_MIX_STEP))

        if self.means is None:
            a, b = mix_columns(model, self.src, self)
            means = (float(np.mean(a)), float(np.mean(b)))
        else:
            means = self.means
        if not _has_tokens(model, self):
            return step(means[0]), 0
        return step(means[0]), step(means[1])


class _Tokens(Protocol):
    @property
    def input_tokens(self) -> npt.NDArray[np.float64] | None: ...
    @property
    def output_tokens(self) -> npt.NDArray[np.float64] | None: ...


def _has_tokens(model: ServiceModel, rows: _Tokens) -> bool:
    s = model.samples
    return (rows.input_tokens is not None or s.input_tokens is not None) and (
        rows.output_tokens is not None or s.output_tokens is not None
    )


def mix_columns(
    model: ServiceModel, src: npt.NDArray[np.int64], rows: _Tokens
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per request, what a mix's bucket averages: prompt and answer tokens (the rows' own,
    else the model's samples'), or the work and zeros when tokens are unknown."""
    s = model.samples
    if not _has_tokens(model, rows):
        return np.asarray(s.work_ms[src], dtype=np.float64), np.zeros(src.size)
    tin = rows.input_tokens
    if tin is None:
        assert s.input_tokens is not None
        tin = s.input_tokens[src]
    tout = rows.output_tokens
    if tout is None:
        assert s.output_tokens is not None
        tout = s.output_tokens[src]
    return np.asarray(tin, dtype=np.float64), np.asarray(tout, dtype=np.float64)


MINUTE_S = 60.0


@dataclass(frozen=True)
class Burst:
    """`count` requests within `span_s`: the busiest span seen lately, sized as a burst
    inside every minute rather than as a sustained rate (a minute's percentile is what an
    objective judges, and a 5 s burst is a share of its minute, not the whole of it)."""

    count: int
    span_s: float

    def into(
        self, t: npt.NDArray[np.float64], duration: float, rng: np.random.Generator
    ) -> npt.NDArray[np.float64]:
        """Poisson times `t` with each minute's arrivals in one span (at a random offset)
        replaced by `count` uniform times in it."""
        parts = []
        for m in range(round(duration / MINUTE_S)):
            lo = m * MINUTE_S + rng.uniform(0.0, MINUTE_S - self.span_s)
            t = t[(t < lo) | (t >= lo + self.span_s)]
            parts.append(lo + rng.uniform(0.0, self.span_s, size=self.count))
        return np.sort(np.concatenate([t, *parts]))


@dataclass(frozen=True)
class Sizing:
    """The fewest replicas for a load, and what the model predicts with them."""

    rate_per_s: float
    """The bucket's rate (at least the rate asked about)."""
    replicas: int | None
    """None when the search's maximum does not meet every gated objective."""
    predicted: list[ObjectiveResult]
    binding: str | None
    """The objective that breaches with one fewer (None at one replica)."""
    headroom: bool = True
    """False: the count meets every target but not with the headroom (none does)."""
    met: bool = True
    """False: no count up to the most allowed meets every objective; `replicas` is then
    the fewest winning 90% of what the most would (the rest of the tail is not load)."""


def worst_ratio(results: list[ObjectiveResult]) -> tuple[float, str]:
    """Largest measured/target over the gated objectives, and that objective's key."""
    gated = [r for r in results if r.objective.gated] or results
    best, key = -math.inf, ""
    for r in gated:
        ratio = math.inf if r.measured_ms is None else r.measured_ms / r.objective.target_ms
        if ratio > best:
            best, key = ratio, r.objective.key
    return best, key


class Sizer:
    """The capacity search at a load, cached per rate and mix bucket."""

    def __init__(
        self,
        model: ServiceModel,
        objectives: Objectives,
        *,
        headroom: float,
        seed: int = 0,
        min_requests: int = 1500,
    ) -> None:
        self.model, self.objectives = model, objectives
        self.limit = 1.0 - headroom
        self.seed, self.min_requests = seed, min_requests
        self._runs: dict[tuple[int, tuple[int, int], int, Burst | None], list[ObjectiveResult]]
        self._runs = {}
        self._sizes: dict[tuple[int, tuple[int, int], int, Burst | None], Sizing] = {}
        self._mixes: dict[tuple[int, tuple[int, int]], Mix] = {}
        self.simulations = 0
        self._last: tuple[Mix, tuple[int, int]] | None = None

    def _key(self, mix: Mix) -> tuple[int, int]:
        """The mix's bucket; the policy asks twice an evaluation about the same mix."""
        if self._last is None or self._last[0] is not mix:
            self._last = (mix, mix.key(self.model))
        return self._last[1]

    @staticmethod
    def bucket(rate: float) -> int:
        """The rate's bucket: the next 10% step at or above it."""
        return math.ceil(math.log(max(rate, _MIN_RATE)) / math.log(_RATE_STEP) - 1e-9)

    def _arrivals(
        self, rate: float, mix: Mix, k: int, burst: Burst | None
    ) -> tuple[Arrivals, float]:
        duration = min(300.0, max(30.0, self.min_requests / rate))
        if burst is not None:  # whole minutes, each with the burst once
            per_min = rate * (MINUTE_S - burst.span_s) + burst.count
            duration = MINUTE_S * min(5, max(1, math.ceil(self.min_requests / per_min)))
        # common random numbers: every bucket scales the same draws, so a busier load is
        # never sized smaller by the luck of its sample
        rng = np.random.default_rng(self.seed)
        t = np.cumsum(rng.exponential(1.0 / rate, size=int(rate * duration * 1.2) + 8))
        t = t[t <= duration]
        if burst is not None:
            t = burst.into(t, duration, rng)
        pick = rng.integers(0, mix.src.size, size=t.size)
        return (
            Arrivals(
                t_s=t,
                src=mix.src[pick],
                low_priority=np.zeros(t.size, dtype=bool),
                input_tokens=None if mix.input_tokens is None else mix.input_tokens[pick],
                output_tokens=None if mix.output_tokens is None else mix.output_tokens[pick],
            ),
            duration,
        )

    def _knee(self, rate: float, mix: Mix, least: int, most: int, burst: Burst | None) -> int:
        """When no count meets the objectives: the fewest winning 90% of what `most`
        replicas would on the worst gated objective (as `capacity`'s knee)."""
        least = min(least, most)

        def worst(n: int) -> float:
            return worst_ratio(self.predict(rate, mix, n, burst))[0]

        first, best = worst(least), worst(most)
        if not (math.isfinite(first) and math.isfinite(best)) or first <= best:
            return least if math.isfinite(first) and first <= best else most
        goal = best + 0.1 * (first - best)
        lo, hi = least, most
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if worst(mid) <= goal else (mid, hi)
        return hi

    def _busy(self, rate: float, mix: Mix) -> float:
        """Queue model: the slots' worth of one replica the load keeps busy (Little's law);
        0 for the LLM model, whose step times show saturation within the simulated span."""
        m = self.model
        if m.kind != "queue" or m.load_slope is not None:
            return 0.0
        work_s = float(np.mean(m.samples.work_ms[mix.src])) / 1000.0
        return rate * work_s / max(1.0, float(m.concurrency.value))

    def burst_bucket(self, rate: float, burst: Burst | None) -> Burst | None:
        """The burst's bucket (its rate's next 10% step), None when it is no busier than
        the rate's bucket (a Poisson load's own busiest span is no burst)."""
        if burst is None or burst.count <= 0:
            return None
        kb = self.bucket(burst.count / burst.span_s)
        if kb <= self.bucket(rate):
            return None
        return Burst(math.ceil(_RATE_STEP**kb * burst.span_s - 1e-9), burst.span_s)

    def predict(
        self, rate: float, mix: Mix, replicas: int, burst: Burst | None = None
    ) -> list[ObjectiveResult]:
        """The objectives with `replicas` held fixed at the bucket of `rate` (and of the
        burst in every minute, when it is busier than the rate)."""
        k, mk, b = self.bucket(rate), self._key(mix), self.burst_bucket(rate, burst)
        mix = self._mixes.setdefault((k, mk), mix)
        key = (k, mk, replicas, b)
        if key not in self._runs:
            arr, end = self._arrivals(_RATE_STEP**k, mix, k, b)
            trace = run_once(self.model, arr, FixedPolicy(replicas), replicas=replicas, end_s=end)
            self._runs[key] = measure(trace, self.objectives, self.model.samples.stages)
            self.simulations += 1
        return self._runs[key]

    def _goal(self, rate: float, mix: Mix, most: int, burst: Burst | None) -> float:
        """The share of each target to size for: 1 - headroom, but never within the
        headroom of what the most replicas reach (the requests' own work, which no count
        beats): there a replica more buys noise, not margin, and the target is the goal."""
        if self.limit >= 1.0:
            return 1.0
        best = worst_ratio(self.predict(rate, mix, min(most, _PROBE_MAX), burst))[0]
        if not math.isfinite(best):
            return self.limit
        return min(1.0, max(self.limit, best / self.limit))

    def size(
        self,
        rate: float,
        mix: Mix,
        start: int = 1,
        sustained: float | None = None,
        most: int = 512,
        burst: Burst | None = None,
    ) -> Sizing:
        """The fewest replicas meeting every gated objective with the headroom at `rate`,
        and (queue model) at most 90% busy at the `sustained` rate (default `rate`): a
        burst's rate is sized by simulation, not held to the steady-state bound."""
        k, mk, b = self.bucket(rate), self._key(mix), self.burst_bucket(rate, burst)
        ks = k if sustained is None else min(k, self.bucket(sustained))
        if (k, mk, ks, b) in self._sizes:
            return self._sizes[(k, mk, ks, b)]

        busy = self._busy(_RATE_STEP**ks, mix)

        def ok(n: int, limit: float = self.limit) -> bool:
            if busy / n > _MAX_UTILIZATION:
                return False
            return worst_ratio(self.predict(rate, mix, n, burst))[0] <= limit

        n, goal = fewest_replicas(ok, start, most), self.limit
        if goal < 1.0 and (n is None or (n > 1 and ok(n - 1, 1.0))):
            # the headroom costs replicas: is it margin, or the tail no count beats?
            goal = self._goal(rate, mix, most, burst)
            if goal > self.limit:
                n = fewest_replicas(lambda c: ok(c, goal), start, most)
        kept = goal < 1.0 or self.limit >= 1.0  # False: sized to the targets themselves
        if n is None and goal < 1.0:  # headroom is the wish; the target, the need
            n, kept = fewest_replicas(lambda c: ok(c, 1.0), start, most), False
        if n is None:
            least = max(1, math.ceil(busy / _MAX_UTILIZATION))
            n = self._knee(rate, mix, least, most, burst)
            res = self.predict(rate, mix, n, burst)
            out = Sizing(_RATE_STEP**k, n, res, worst_ratio(res)[1], met=False)
        else:
            binding = worst_ratio(self.predict(rate, mix, n - 1, burst))[1] if n > 1 else None
            res = self.predict(rate, mix, n, burst)
            out = Sizing(_RATE_STEP**k, n, res, binding, headroom=kept)
        self._sizes[(k, mk, ks, b)] = out
        return out
