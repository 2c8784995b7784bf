"""The model policy's forecasts: the load (Holt) and the minutes a count must meet.

- `Holt`: Holt's linear (double exponential) smoothing of the arrival rate per
  evaluation, level and trend;
- `RecentMinutes`: the whole minutes of the recent past, each as it arrived (its
  bursts, its prompts and answers), scaled to the load sized for (thinned, or
  joined by shifted copies of its own arrivals), `_DRAWS` draws each, their counts
  Poisson about the load, or as spread as the last ten minutes' counts proved
  (`dispersion`);
- `KnownMinutes`: the minutes from now until a replica asked for now is ready,
  exactly as they will arrive (the floor's view; the one-judge test).

Apart from `sim.model_policy` so the policy's decision and what it forecasts can
change on their own.
"""

from __future__ import annotations

import functools
import math
from typing import Protocol

import numpy as np

from tailbudget.sim.judge import MINUTE_S, Draw, Minute, minute_of
from tailbudget.sim.trace import Arrivals

__all__ = ["Forecast", "Holt", "KnownMinutes", "RecentMinutes", "dispersion"]

_RATE_STEP = 1.10
"""The load is sized at the next 10% step at or above it (never less than it stands for)."""
_DRAWS = 2
"""Draws of each recent minute scaled to the load (thinning and shifting are random)."""
_HISTORY = 10
"""Whole minutes whose counts say how far the count of a minute varies (`dispersion`)."""
_PROVED = 0.999
"""Counts are taken as more spread than Poisson only when chance would show it in fewer
than 1 of 1,000 windows: a steady service keeps Poisson draws."""
_SPREAD_STEP = 1.5
"""The dispersion is judged at steps of 1.5x (a resolution for remembering draws)."""


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


class Forecast(Protocol):
    """The minutes a count asked for now must meet: a list of minutes (the count is the
    most any needs), each as draws of its arrivals (the share met is the probability)."""

    def minutes(self, arrivals: Arrivals, now: float, rate: float) -> tuple[object, list[Minute]]:
        """(a key: the same key, the same minutes; the minutes)."""
        ...


class KnownMinutes:
    """A forecast that knows the arrivals: the minutes from now until a replica asked for
    now is ready, each exactly as it will arrive (the floor's view)."""

    def __init__(self, arrivals: Arrivals, delay_s: float) -> None:
        self.arrivals, self.delay = arrivals, delay_s
        self.cuts = np.searchsorted(
            arrivals.t_s, np.arange(math.ceil(arrivals.t_s.max(initial=0.0) / MINUTE_S) + 2)
            * MINUTE_S, side="left",
        )  # fmt: skip

    def minutes(self, arrivals: Arrivals, now: float, rate: float) -> tuple[object, list[Minute]]:
        """Minutes now // 60 through (now + delay) // 60, one draw each (empty: none)."""
        first, last = int(now // MINUTE_S), int((now + self.delay + 1e-9) // MINUTE_S)
        out = []
        for m in range(first, min(last, self.cuts.size - 2) + 1):
            lo, hi = int(self.cuts[m]), int(self.cuts[m + 1])
            if hi > lo:
                out.append([Draw(("known", m), minute_of(self.arrivals, lo, hi, m * MINUTE_S))])
        return (first, last), out


class RecentMinutes:
    """The minutes of the recent past as they arrived, scaled to the load to size for.

    Each recent minute's draws at a load bucket are made once (seeded by the minute and
    the bucket), so a judgement made of them is made once too: a new minute adds its own
    draws, the others are judged already."""

    def __init__(self, span_s: float, seed: int = 0) -> None:
        self.count = max(1, round(span_s / MINUTE_S))
        self.seed = seed
        self.history = max(self.count, _HISTORY)
        self.spread = 1.0
        """How far the drawn counts vary, as a multiple of a Poisson count's variance."""
        self._made: dict[tuple[object, int, int], list[Draw]] = {}

    def minutes(self, arrivals: Arrivals, now: float, rate: float) -> tuple[object, list[Minute]]:
        """One forecast minute: each whole minute of the last `span_s` (before the first,
        what has arrived, stretched to a minute) at `rate`, `_DRAWS` draws each."""
        done = int(now // MINUTE_S)
        bucket = math.ceil(math.log(max(rate, 1e-3)) / math.log(_RATE_STEP) - 1e-9)
        spread = _spread_step(dispersion(arrivals.t_s, done, self.history))
        self.spread = _SPREAD_STEP**spread
        whole = range(max(0, done - self.count), done)
        spans: list[tuple[object, float, float]] = [
            (m, m * MINUTE_S, (m + 1) * MINUTE_S) for m in whole
        ]
        if not spans:
            spans = [(("partial", now), 0.0, max(now, 1e-3))]
        if len(self._made) > 4 * self.count * 64:  # keep what the window can still use
            self._made = {k: v for k, v in self._made.items() if k[0] in whole}
        draws: list[Draw] = []
        for name, a, b in spans:
            if (name, bucket, spread) not in self._made:
                self._made[(name, bucket, spread)] = self._draws(
                    arrivals, (name, a, b), bucket, spread
                )
            draws += self._made[(name, bucket, spread)]
        return (spans[0][0], done, bucket, spread), [draws] if draws else []

    def _draws(
        self, arrivals: Arrivals, span: tuple[object, float, float], bucket: int, spread: int
    ) -> list[Draw]:
        name, a, b = span
        t = arrivals.t_s
        lo, hi = int(np.searchsorted(t, a, "left")), int(np.searchsorted(t, b, "left"))
        if hi <= lo:
            return []
        base = _stretched(minute_of(arrivals, lo, hi, a), MINUTE_S / (b - a))
        want = _RATE_STEP**bucket * MINUTE_S  # arrivals in a minute at the load
        # no spread proved: the seeds (and so the draws) of Poisson counts, as before
        seeds = [self.seed, int(a // MINUTE_S), bucket + 10_000] + ([spread] if spread else [])
        rng = np.random.default_rng(seeds)
        wide = _SPREAD_STEP**spread
        return [
            Draw((name, bucket, spread, j), _scaled(base, want / base.size, rng, wide))
            for j in range(_DRAWS)
        ]


def dispersion(t: np.ndarray, done: int, minutes: int) -> float:
    """How much more the per-minute arrival counts of the last `minutes` whole minutes
    vary than Poisson counts would: the variance of successive differences, by their
    median absolute deviation (a level shift or a lone spike is one or two outliers,
    a trend moves their median; recurring bursts are most of them), over twice the
    mean count. 1 for Poisson arrivals; 1 when too few minutes to say."""
    first = max(0, done - minutes)
    if done - first < 4:
        return 1.0
    cuts = np.searchsorted(t, np.arange(first, done + 1) * MINUTE_S, side="left")
    counts = np.diff(cuts).astype(np.float64)
    mean = float(counts.mean())
    if mean <= 0:
        return 1.0
    d = np.diff(counts)
    sd = 1.4826 * float(np.median(np.abs(d - np.median(d))))
    got = sd * sd / (2.0 * mean)
    return got if got > _poisson_limit(counts.size) else 1.0


@functools.cache
def _poisson_limit(minutes: int) -> float:
    """What `dispersion` reads on Poisson counts of `minutes` minutes in all but 1 of
    1,000 windows (7.3 for ten; the same at any rate): above it, the counts prove more
    spread than chance (computed once, seeded)."""
    rng = np.random.default_rng(minutes)
    counts = rng.poisson(100.0, size=(20_000, minutes)).astype(np.float64)
    d = np.diff(counts, axis=1)
    sd = 1.4826 * np.median(np.abs(d - np.median(d, axis=1, keepdims=True)), axis=1)
    return float(np.quantile(sd * sd / (2.0 * counts.mean(axis=1)), _PROVED))


def _spread_step(d: float) -> int:
    """The dispersion as a step of `_SPREAD_STEP` at or below it (0: Poisson)."""
    return math.floor(math.log(d) / math.log(_SPREAD_STEP) + 1e-9) if d > 1.0 else 0


def _stretched(minute: Arrivals, k: float) -> Arrivals:
    if k == 1.0:
        return minute
    return Arrivals(
        minute.t_s * k, minute.src, minute.low_priority, minute.input_tokens, minute.output_tokens
    )


def _scaled(
    minute: Arrivals, factor: float, rng: np.random.Generator, spread: float = 1.0
) -> Arrivals:
    """The minute with about `factor` x its arrivals: thinned at random, or joined by
    copies of its own arrivals, each shifted round the minute by its own random offset
    (its bursts keep their shape, elsewhere in the minute; many copies of a sparse
    minute spread toward a steady rate)."""
    n = minute.size
    mean = n * factor
    if spread > 1.0:  # gamma-Poisson: variance spread x mean, as the minutes showed
        mean = float(rng.gamma(mean / (spread - 1.0), spread - 1.0))
    want = max(1, int(rng.poisson(mean)))
    if want <= n:
        pick = np.sort(rng.choice(n, size=want, replace=False))
        t = minute.t_s[pick]
    else:
        copies = math.ceil((want - n) / n)
        shifts = rng.uniform(0.0, MINUTE_S, size=copies)
        t_all = np.concatenate([(minute.t_s + s) % MINUTE_S for s in shifts])
        chosen = rng.choice(t_all.size, size=want - n, replace=False)
        t = np.concatenate([minute.t_s, t_all[chosen]])
        pick = np.concatenate([np.arange(n), chosen % n])
        order = np.argsort(t, kind="stable")
        t, pick = t[order], pick[order]

    def cut(x: np.ndarray | None) -> np.ndarray | None:
        return None if x is None else x[pick]

    return Arrivals(
        t_s=t,
        src=minute.src[pick],
        low_priority=np.zeros(pick.size, dtype=bool),
        input_tokens=cut(minute.input_tokens),
        output_tokens=cut(minute.output_tokens),
    )
