"""The one judgement of acting and judging: do N replicas meet a minute's arrivals?

A minute's arrivals (their times and sizes) run on N replicas held fixed, warm
and empty at the minute's start; the minute is met when no gated objective is in
breach on the minute's own requests, as a run's minute is judged
(`minutes_in_breach`, the one verdict rule `tailbudget._verdict`: a breach the
minute's requests prove, however few). A minute the rule leaves inconclusive (too
few requests to pass, or over the target by less than they prove) is met: nothing
proves it in breach, and demanding a pass would leave every thin minute unmet at
any count; runs count such minutes apart (`minutes_inconclusive`).

The hindsight floor asks it of each minute it knows; the
model policy asks it of the minutes it forecasts, and its margin is a stated
probability: the share of the forecast minutes the count must meet, not a
tighter target (a tighter target multiplies replicas where an objective sits
near the model's asymptote, a TPOT near the decode step floor).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from tailbudget.budget.objectives import Objectives
from tailbudget.sim.capacity import fewest_replicas
from tailbudget.sim.engines import run_once
from tailbudget.sim.minute_verdict import QueueMinute, gated, met, minute_met
from tailbudget.sim.model import ServiceModel
from tailbudget.sim.objectives import ObjectiveResult, measure
from tailbudget.sim.policies import FixedPolicy
from tailbudget.sim.trace import Arrivals

__all__ = ["MINUTE_S", "Draw", "Judge", "Minute", "met", "minute_of", "worst"]

MINUTE_S = 60.0
SEARCH_MAX = 512
"""The most replicas the floor's search tries (the model policy stops at its bounds)."""
_KEEP = 200_000
"""Judgements remembered (by draw key and count) before the memory starts afresh."""
_KEEP_BOUNDS = 64
"""Draws whose bound arrays are kept (a forecast reuses its window's: a few dozen)."""


@dataclass(frozen=True)
class Draw:
    """One minute of arrivals, and a key naming it (the same key, the same arrivals)."""

    key: Hashable
    arrivals: Arrivals


Minute = list[Draw]
"""A minute to meet, as draws of its arrivals (one when it is known)."""


def minute_of(arr: Arrivals, lo: int, hi: int, t0: float) -> Arrivals:
    """Arrivals `lo:hi` as a minute of their own, times from `t0`."""

    def cut(x: np.ndarray | None) -> np.ndarray | None:
        return None if x is None else x[lo:hi]

    return Arrivals(
        t_s=arr.t_s[lo:hi] - t0,
        src=arr.src[lo:hi],
        low_priority=np.zeros(hi - lo, dtype=bool),
        input_tokens=cut(arr.input_tokens),
        output_tokens=cut(arr.output_tokens),
    )


def worst(results: list[ObjectiveResult]) -> float:
    """The largest measured / target over the gated objectives (inf when one has none)."""
    return max(
        (
            math.inf if r.measured_ms is None else r.measured_ms / r.objective.target_ms
            for r in gated(results)
        ),
        default=math.inf,
    )


class Judge:
    """Whether N replicas meet a minute, and the fewest that meet minutes with a probability."""

    def __init__(self, model: ServiceModel, objectives: Objectives) -> None:
        self.model, self.objectives = model, objectives
        self.simulations = 0
        """Minutes simulated (run on the engine)."""
        self.bounded = 0
        """Minutes whose verdict the queue bounds settled without simulating."""
        self._runs: dict[tuple[Hashable, int], list[ObjectiveResult]] = {}
        self._met: dict[tuple[Hashable, int], bool] = {}
        self._bounds: dict[Hashable, QueueMinute] = {}
        """Each draw's count-free part of the queue bounds (by its key)."""
        self._last: tuple[Arrivals, QueueMinute] | None = None
        """The same for the last minute asked about without a key (the floor's search)."""

    def run(self, minute: Arrivals | Draw, n: int) -> list[ObjectiveResult]:
        """The objectives of `minute` on `n` replicas held fixed, warm and empty (a draw's
        judgement is remembered by its key)."""
        if isinstance(minute, Draw):
            key = (minute.key, n)
            if key not in self._runs:
                if len(self._runs) >= _KEEP:
                    self._runs.clear()
                self._runs[key] = self.run(minute.arrivals, n)
            return self._runs[key]
        self.simulations += 1
        trace = run_once(self.model, minute, FixedPolicy(n), replicas=n, end_s=MINUTE_S)
        return measure(trace, self.objectives, self.model.samples.stages)

    def meets(self, minute: Arrivals | Draw, n: int) -> bool:
        """Do `n` replicas meet every gated objective in `minute`? (`met(self.run(...))`,
        without the figures only the verdict needs: remembered by a draw's key.)"""
        if not isinstance(minute, Draw):
            return self._meets(minute, n)
        key = (minute.key, n)
        got = self._met.get(key)
        if got is None:
            full = self._runs.get(key)
            got = met(full) if full is not None else self._meets(minute.arrivals, n, minute.key)
            if len(self._met) >= _KEEP:
                self._met.clear()
            self._met[key] = got
        return got

    def _meets(self, minute: Arrivals, n: int, key: Hashable | None = None) -> bool:
        queue = self._bounded(minute, key)
        if queue.covered and n >= 1:
            quick = queue.settle(n)
            if quick is not None:
                self.bounded += 1
                return quick
            self.simulations += 1
            return queue.simulate(n)
        self.simulations += 1
        trace = run_once(self.model, minute, FixedPolicy(n), replicas=n, end_s=MINUTE_S)
        return minute_met(trace, self.objectives, self.model.samples.stages)

    def _bounded(self, minute: Arrivals, key: Hashable | None) -> QueueMinute:
        """The minute's queue bounds, made once per draw (or per minute searched)."""
        if key is None:
            if self._last is None or self._last[0] is not minute:
                self._last = (minute, QueueMinute(self.model, self.objectives, minute))
            return self._last[1]
        got = self._bounds.get(key)
        if got is None:
            if len(self._bounds) >= _KEEP_BOUNDS:
                self._bounds.clear()
            got = self._bounds[key] = QueueMinute(self.model, self.objectives, minute)
        return got

    def fewest(
        self,
        minutes: Sequence[Arrivals | Draw],
        probability: float = 1.0,
        most: int = SEARCH_MAX,
    ) -> int | None:
        """The fewest replicas meeting at least `probability` of `minutes` (None when `most`
        does not): `capacity`'s search (double, then bisect) from one replica, so every
        caller asking about the same minutes gets the same count."""
        need = math.ceil(probability * len(minutes) - 1e-9)

        def ok(n: int) -> bool:
            # The answer is a count against `need`, so the order the minutes are asked in
            # cannot change it. The judgements already made go first; a minute is simulated
            # only when they leave the count undecided, the newest first (a forecast that
            # moves on by a minute brings new draws last and drops the oldest: what is
            # judged of the newest is what the next evaluations can still reuse).
            seen = [
                isinstance(m, Draw) and ((m.key, n) in self._met or (m.key, n) in self._runs)
                for m in minutes
            ]
            order = [m for m, s in zip(minutes, seen, strict=True) if s]
            order += [m for m, s in zip(minutes[::-1], seen[::-1], strict=True) if not s]
            hits, left = 0, len(minutes)
            for m in order:
                hits += self.meets(m, n)
                left -= 1
                if hits >= need or hits + left < need:
                    break
            return hits >= need

        return fewest_replicas(ok, 1, most)

    def knee(self, minutes: Sequence[Arrivals | Draw], least: int, most: int) -> int:
        """When no count meets the minutes: the fewest winning 90% of what `most` replicas
        would on the mean worst gated objective (capacity's knee; the rest of the tail is
        not load)."""

        def score(n: int) -> float:
            return float(np.mean([min(worst(self.run(m, n)), 1e9) for m in minutes]))

        first, best = score(least), score(most)
        if first <= best:
            return least
        goal = best + 0.1 * (first - best)
        lo, hi = least, most
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if score(mid) <= goal else (mid, hi)
        return hi
