"""Breach sizing: how many replicas a latency breach asks for, and when one fewer holds.

The LLM default (`Policy.sizing == "breach"`) reads a percentile that replicas
lower only in part: a decode step or a prefill has a floor that no count beats,
and only the part above it is shared by the replicas. Each rule learns that line
from the windows it judges, v = floor + slope x load per replica (load: the
window's observations per second; per replica: over the replicas that served
the window), by least squares with exponential forgetting (half-life
`HALF_LIFE_S`). The floor is the line's intercept, clamped to [0, the lowest
value seen]; until the windows span two replica counts it is 0 (the percentile
taken as wholly shared: proportional sizing, the HPA's target tracking, which
sizes low and never scales down early).

- Scale-up asks for `served x (v - floor) / (threshold - floor)` replicas: the
  count whose shared part fits under the threshold, at least one more than served
  the window.
- Scale-down steps to n - 1 only while the value predicted there stays within
  the rule's hysteresis share (clear / trigger threshold) of what the threshold
  leaves above the floor. Where n - 1 served whole windows after start-up (one
  count asked for over the window, the ring full), the prediction is what it
  measured there (`measured`: their mean, moved along the line's slope to the
  load it would carry now), never better than the value at n. Elsewhere it is
  the shared part scaled by (n / (n - 1))^2. The square: queueing and batch
  interference grow faster than the load per replica (M/M/1's wait grows as
  rho / (1 - rho)), so the line, fitted where the service ran, flatters a count
  it has not run at; a linear guess stepped down into breaches on the suite.
  Where the count ran, the square is the wrong way round: a percentile whose
  window noise outweighs its load (TPOT p99 at a few requests per second) was
  predicted 55-65 ms at a count that measured 46-52, and a noise step up never
  came back. A clear threshold as a plain share of the target sits below the
  floor when the target is near it (a TPOT objective near the decode step
  floor) and never clears; this one cannot.
- The trigger of a tpot, itl or e2e scale-up rule (the LLM default states them
  at 90% of the target) is 90% of the room above the floor
  (`LoadLine.trigger`): 90% of a target near the floor sits on the floor, where
  window noise fires the rule at any count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["HALF_LIFE_S", "LoadLine"]

HALF_LIFE_S = 3600.0
"""Older windows weigh half after this long: the line follows a service whose request
mix drifts over hours, and keeps the spread of replica counts an hour shows."""


@dataclass
class LoadLine:
    """One rule's percentile against load per replica, fitted on the windows judged."""

    w: float = 0.0
    sx: float = 0.0
    sy: float = 0.0
    sxx: float = 0.0
    sxy: float = 0.0
    counts: frozenset[int] = frozenset()
    last_s: float | None = None
    lowest: float | None = None
    at: dict[int, tuple[float, float, float]] = field(default_factory=dict)
    """Count -> (weight, weighted load per replica, weighted value) of the windows that
    count served whole (one count asked for over the window, the ring full): what the
    service measured there, forgotten as the line is."""

    def add(
        self, now_s: float, per_replica: float, value: float, served: int, whole: bool = False
    ) -> None:
        """One window: its observations per second per serving replica and its value;
        `whole` when `served` replicas served all of it after start-up."""
        if not (math.isfinite(per_replica) and math.isfinite(value)):
            return
        if self.last_s is not None and now_s > self.last_s:
            keep = 0.5 ** ((now_s - self.last_s) / HALF_LIFE_S)
            self.w, self.sx, self.sy = self.w * keep, self.sx * keep, self.sy * keep
            self.sxx, self.sxy = self.sxx * keep, self.sxy * keep
            self.at = {n: (w * keep, x * keep, y * keep) for n, (w, x, y) in self.at.items()}
        self.last_s = now_s
        if whole:
            w, x, y = self.at.get(served, (0.0, 0.0, 0.0))
            self.at[served] = (w + 1.0, x + per_replica, y + value)
        self.w += 1.0
        self.sx += per_replica
        self.sy += value
        self.sxx += per_replica * per_replica
        self.sxy += per_replica * value
        self.counts = self.counts | {served}
        self.lowest = value if self.lowest is None else min(self.lowest, value)

    def slope(self) -> float:
        """The value's rise per unit of load per replica (0 until the windows span two
        counts, or when more load per replica did not raise it: nothing learned)."""
        if len(self.counts) < 2 or self.w <= 0 or self.lowest is None:
            return 0.0
        var = self.sxx / self.w - (self.sx / self.w) ** 2
        if var <= 1e-12 * max(1.0, (self.sx / self.w) ** 2):
            return 0.0
        return max(0.0, (self.sxy / self.w - (self.sx / self.w) * (self.sy / self.w)) / var)

    def floor(self) -> float:
        """The part no replica count lowers (0 until the windows span two counts)."""
        slope = self.slope()
        if slope <= 0 or self.lowest is None:
            return 0.0
        intercept = self.sy / self.w - slope * self.sx / self.w
        return min(max(0.0, intercept), self.lowest)

    def measured(self, n: int, per_replica: float, min_weight: float) -> float | None:
        """The value at n replicas as the windows n served whole measured it, moved along
        the line's slope to `per_replica` (None: fewer than `min_weight` such windows)."""
        w, x, y = self.at.get(n, (0.0, 0.0, 0.0))
        if w < min_weight or w <= 0:
            return None
        return y / w + self.slope() * (per_replica - x / w)

    def trigger(self, threshold: float, share: float) -> float:
        """The trigger threshold on the room above the floor: a rule stated at `share` of
        its target T (threshold = share x T) fires above floor + share x (T - floor),
        the threshold itself until a floor is learned."""
        return threshold + (1.0 - share) * self.floor()

    def wanted(self, served: int, value: float, threshold: float) -> int:
        """Replicas whose shared part of `value` fits under `threshold`."""
        floor = min(self.floor(), value)
        room = threshold - floor
        if room <= 0:
            return served + 1
        return max(served + 1, math.ceil(served * (value - floor) / room - 1e-9))

    def clear_line(self, n: int, threshold: float, share: float, measured: bool = False) -> float:
        """The value `one_fewer_holds` lets through at n replicas (n > 1) when it is above
        the floor: floor + share of the room, scaled to n - 1 of n (the value at n - 1 when
        that count was `measured`)."""
        floor = self.floor()
        scale = 1.0 if measured else ((n - 1) / n) ** 2
        return floor + share * (threshold - floor) * scale

    def one_fewer_holds(
        self, n: int, value: float, threshold: float, share: float, there: float | None = None
    ) -> bool:
        """At n - 1 replicas the shared part stays within `share` of the room: as `there`
        (what n - 1 measured, `measured`) says, never better than `value` at n, or else
        the value at n scaled by (n / (n - 1))^2."""
        floor = min(self.floor(), value)
        if there is not None:
            return max(there, value) - floor <= share * (threshold - floor)
        return (value - floor) * (n / (n - 1)) ** 2 <= share * (threshold - floor)

    def to_state(self) -> dict[str, object]:
        """JSON-able state (restart keeps what was learned)."""
        return {
            "w": self.w, "sx": self.sx, "sy": self.sy, "sxx": self.sxx, "sxy": self.sxy,
            "counts": sorted(self.counts), "last_s": self.last_s, "lowest": self.lowest,
            "at": {str(n): list(v) for n, v in sorted(self.at.items())},
        }  # fmt: skip

    @classmethod
    def from_state(cls, raw: dict[str, object]) -> LoadLine:
        """The line `to_state` wrote."""

        def num(key: str, default: float | None = 0.0) -> float | None:
            v = raw.get(key, default)
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise ValueError(f"sizing state {key}: not a number: {v!r}")
            return float(v)

        counts = raw.get("counts", [])
        if not isinstance(counts, list):
            raise ValueError(f"sizing state counts: not a list: {counts!r}")
        at = raw.get("at", {})  # absent in state written before counts were measured
        if not isinstance(at, dict):
            raise ValueError(f"sizing state at: not an object: {at!r}")
        w, sx, sy, sxx, sxy = (num(k) or 0.0 for k in ("w", "sx", "sy", "sxx", "sxy"))
        return cls(
            w=w, sx=sx, sy=sy, sxx=sxx, sxy=sxy, counts=frozenset(int(c) for c in counts),
            last_s=num("last_s", None), lowest=num("lowest", None),
            at={int(n): _triple(v) for n, v in at.items()},
        )  # fmt: skip


def _triple(v: object) -> tuple[float, float, float]:
    if not isinstance(v, list) or len(v) != 3:
        raise ValueError(f"sizing state at: not [weight, load, value]: {v!r}")
    w, x, y = (float(e) for e in v)
    return w, x, y
