"""Replicas over time: provisioning delay, cold windows, retirement and replica-hours.

Shared by both engines. A replica is *alive* from the moment it is asked for
(it is paid for while it provisions) until it is retired and idle; it takes
work from `ready_at` on; until `warm_at` its work is multiplied by the cold factor.
Alive spans are kept as intervals, so engines may end a replica at a time they
already know (when its last committed request finishes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["Fleet", "Knobs", "TickView"]

_INF = float("inf")


@dataclass
class Knobs:
    """What a policy sets: replicas wanted, shedding on, logging trimmed."""

    desired: int
    shed: bool = False
    trim: bool = False
    shed_codes: frozenset[int] = frozenset({1})
    """While `shed` is on, the arrivals shed: those whose code (`Arrivals.shed_codes`) is
    in it. 1 = the low-priority draw, or the class shed first; the budget policy's class
    rules shed further classes as replay's shedding order does."""


@dataclass(frozen=True)
class TickView:
    """What a policy sees at one evaluation."""

    now_s: float
    done_ts: npt.NDArray[np.float64]
    done_ms: npt.NDArray[np.float64]
    done_err: npt.NDArray[np.bool_]
    mean_in_system: float
    """Time-averaged requests in the system (queued + in service) since the last tick."""
    mean_busy: float
    """Time-averaged share of the ready replicas' slots in use since the last tick."""
    ready: int
    alive: int
    done_ttft_ms: npt.NDArray[np.float64] | None = None
    """TTFT of the completed requests (LLM engine only)."""
    done_tpot_ms: npt.NDArray[np.float64] | None = None
    """TPOT of the completed requests (LLM engine only): (e2e - ttft) / (tokens - 1)."""
    done_class: npt.NDArray[np.int64] | None = None
    """Each completed request's class code (`Arrivals.class_code`; None without classes):
    each class's rules run on its own requests."""


@dataclass
class Fleet:
    """The replica set of one simulation."""

    provision_delay_s: float
    cold_window_s: float
    on_ready: Callable[[int, float], None] | None = None
    """Called when replica r becomes ready at time t (event-driven engines give it work)."""
    asked_at: list[float] = field(default_factory=list)
    ready_at: list[float] = field(default_factory=list)
    warm_at: list[float] = field(default_factory=list)
    retired: list[bool] = field(default_factory=list)
    end_at: list[float] = field(default_factory=list)
    _pending: list[tuple[float, int]] = field(default_factory=list)

    def start(self, n: int, t: float) -> list[int]:
        """`n` warm replicas, ready at `t` (the run's starting fleet)."""
        return [self._add(t, warm=True) for _ in range(n)]

    def _add(self, t: float, *, warm: bool) -> int:
        r = len(self.ready_at)
        ready = t if warm else t + self.provision_delay_s
        self.asked_at.append(t)
        self.ready_at.append(ready)
        self.warm_at.append(ready if warm else ready + self.cold_window_s)
        self.retired.append(False)
        self.end_at.append(_INF)
        if not warm:
            self._pending.append((ready, r))
        return r

    def next_ready(self) -> float:
        """Time the next provisioning replica becomes ready (inf when none)."""
        return self._pending[0][0] if self._pending else _INF

    def ready_due(self, t: float) -> None:
        """Hand every replica due by `t` to the engine's `on_ready`."""
        while self._pending and self._pending[0][0] <= t:
            ready, r = self._pending.pop(0)
            if self.on_ready is not None and not self.retired[r]:
                self.on_ready(r, ready)

    def alive(self, t: float) -> int:
        """Replicas paid for at `t` (provisioning, ready or draining)."""
        return sum(1 for r, a in enumerate(self.asked_at) if a <= t < self.end_at[r])

    def ready_count(self, t: float) -> int:
        """Replicas taking work at `t`."""
        return sum(1 for r, x in enumerate(self.ready_at) if not self.retired[r] and x <= t)

    def wanted(self) -> int:
        """Replicas not retired (ready or provisioning)."""
        return self.retired.count(False)

    def reconcile(self, desired: int, t: float) -> tuple[list[int], list[int]]:
        """Ask for replicas or retire some (provisioning first, then the newest).

        Returns (added, retired); the engine ends a retired replica once it is idle.
        """
        have = self.wanted()
        added = [self._add(t, warm=False) for _ in range(desired - have)]
        if desired >= have:
            return added, []
        order = sorted(
            (r for r in range(len(self.ready_at)) if not self.retired[r]),
            key=lambda r: (self.ready_at[r] <= t, -self.ready_at[r]),
        )
        gone = order[: have - desired]
        for r in gone:
            self.retired[r] = True
        self._pending = [(x, r) for x, r in self._pending if not self.retired[r]]
        return added, gone

    def end(self, r: int, t: float) -> None:
        """Replica r stops being paid for at `t`."""
        if self.end_at[r] == _INF:
            self.end_at[r] = max(t, self.asked_at[r])

    def replica_seconds(self, horizon: float) -> float:
        """Paid replica time up to `horizon`."""
        return sum(
            max(0.0, min(e, horizon) - min(a, horizon))
            for a, e in zip(self.asked_at, self.end_at, strict=True)
        )
