"""The hindsight floor: the fewest replicas, minute by minute, meeting every objective.

With the whole arrival sequence known, each minute's own arrivals (their times
and sizes) run on N replicas held fixed, warm and empty at the minute's start;
the floor is the fewest N whose minute breaches no gated objective (no
headroom) as a run's minute is judged (`minutes_in_breach`: the one verdict rule
on the minute's own requests), by `capacity`'s search: `sim.judge`, the judgement the
model policy makes of the minutes it forecasts. A replica takes `provision_delay` to become
ready and is paid from when it is asked for, so the floor's fleet at time t is
the largest count needed between t and t + the delay. Work carried over from
the previous minute is not counted, so the floor is, if anything, low: a
policy's ratio to it is an upper bound on what a perfect forecaster would save.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tailbudget.budget.objectives import Objectives
from tailbudget.sim.judge import MINUTE_S, Judge, minute_of
from tailbudget.sim.model import ServiceModel
from tailbudget.sim.records import FloorRecord
from tailbudget.sim.trace import Arrivals

__all__ = ["METHOD", "Floor", "hindsight_floor"]

METHOD = (
    "fewest replicas with no gated objective in breach on each minute's own arrivals "
    "(the one verdict rule on the minute's requests; no headroom), asked for one "
    "provisioning delay ahead"
)


@dataclass(frozen=True)
class Floor:
    """Replicas each minute needs, and the replica-hours of paying for them in time."""

    per_minute: list[int | None]
    """None: the search's maximum did not meet every gated objective that minute."""
    replica_hours: float
    provision_delay_s: float

    @property
    def unmet_minutes(self) -> int:
        """Minutes no replica count up to the search's maximum meets (the tail is not load)."""
        return sum(n is None for n in self.per_minute)

    @property
    def peak(self) -> int | None:
        """The most replicas a minute needs; None when no minute is met."""
        return max((n for n in self.per_minute if n is not None), default=None)

    def note(self) -> str | None:
        """What the reader must know when the floor itself cannot meet every objective."""
        if not self.unmet_minutes:
            return None
        minutes = len(self.per_minute)
        return (
            f"the floor cannot meet every gated objective in {self.unmet_minutes:,} of "
            f"{minutes:,} minute{'' if minutes == 1 else 's'}: no replica count does there "
            "(the tail is not load); for those minutes it pays what the busiest met minute "
            "needs (at least the minimum)"
        )

    def record(self) -> FloorRecord:
        """The `floor` block of `simulate --format json`."""
        return FloorRecord(
            replica_hours=round(self.replica_hours, 4),
            replicas_per_minute=self.per_minute,
            provision_delay_s=self.provision_delay_s,
            method=METHOD,
        )


def hindsight_floor(
    model: ServiceModel,
    objectives: Objectives,
    arrivals: Arrivals,
    horizon_s: float,
    *,
    minimum: int = 1,
) -> Floor:
    """The floor schedule over `horizon_s` of `arrivals`."""
    minutes = max(1, math.ceil(horizon_s / MINUTE_S))
    cuts = np.searchsorted(arrivals.t_s, np.arange(minutes + 1) * MINUTE_S, side="left")
    judge = Judge(model, objectives)
    need: list[int | None] = []
    for m in range(minutes):
        lo, hi = int(cuts[m]), int(cuts[m + 1]) if m + 1 < minutes else arrivals.size
        if hi <= lo:
            need.append(minimum)
            continue
        n = judge.fewest([minute_of(arrivals, lo, hi, m * MINUTE_S)])
        need.append(None if n is None else max(minimum, n))
    delay = float(model.provision_delay_s.value)
    top = max((n for n in need if n is not None), default=minimum)
    counts = np.asarray([top if n is None else n for n in need], dtype=np.float64)
    # the fleet at second s: the most any minute from s to s + delay needs
    secs = np.arange(math.ceil(min(horizon_s, minutes * MINUTE_S)), dtype=np.int64)
    first = secs // int(MINUTE_S)
    last = np.minimum((secs + round(delay)) // int(MINUTE_S), minutes - 1)
    fleet = counts[first]
    # Bounded by the simulated minutes, not the delay: past the last minute adds nothing.
    for k in range(1, min(math.ceil(delay / MINUTE_S), minutes) + 1):
        fleet = np.maximum(fleet, counts[np.minimum(first + k, last)])
    paid = float(fleet.sum())
    return Floor(need, paid / 3600.0, delay)
