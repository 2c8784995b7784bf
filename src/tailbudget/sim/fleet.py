"""Replicas over time: provisioning delay, cold windows, retirement and replica-hours.

Shared by both engines. A replica is *alive* from the moment it is asked for
(it is paid for while it provisions) until it is retired and idle; it takes
work from `ready_at` on; until `warm_at` its work is multiplied by the cold factor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Fleet", "Knobs", "TickView"]


@dataclass
class Knobs:
    """What a policy sets: replicas wanted, shedding on, logging trimmed."""

    desired: int
    shed: bool = False
    trim: bool = False


@dataclass(frozen=True)
class TickView:
    """What a policy sees at one evaluation."""

    now_s: float
    done_ts: list[float]
    done_ms: list[float]
    done_err: list[bool]
    mean_in_system: float
    """Time-averaged requests in the system (queued + in service) since the last tick."""
    mean_busy: float
    """Time-averaged share of the ready replicas' slots in use since the last tick."""
    ready: int
    alive: int


@dataclass
class Fleet:
    """The replica set of one simulation."""

    provision_delay_s: float
    cold_window_s: float
    on_ready: Callable[[int, float], None]
    """Called when replica r becomes ready at time t (the engine gives it work)."""
    ready_at: list[float] = field(default_factory=list)
    warm_at: list[float] = field(default_factory=list)
    retired: list[bool] = field(default_factory=list)
    ended: list[bool] = field(default_factory=list)
    busy: list[int] = field(default_factory=list)
    replica_s: float = 0.0
    _alive: int = 0
    _last_t: float = 0.0
    _pending: list[tuple[float, int]] = field(default_factory=list)

    def start(self, n: int, t: float) -> None:
        """`n` warm replicas, ready at `t` (the run's starting fleet)."""
        self._last_t = t
        for _ in range(n):
            self._add(t, warm=True)

    def _account(self, t: float) -> None:
        self.replica_s += self._alive * (t - self._last_t)
        self._last_t = t

    def _add(self, t: float, *, warm: bool) -> int:
        self._account(t)
        r = len(self.ready_at)
        ready = t if warm else t + self.provision_delay_s
        self.ready_at.append(ready)
        self.warm_at.append(ready if warm else ready + self.cold_window_s)
        self.retired.append(False)
        self.ended.append(False)
        self.busy.append(0)
        self._alive += 1
        if not warm:
            self._pending.append((ready, r))
        return r

    def next_ready(self) -> float:
        """Time the next provisioning replica becomes ready (inf when none)."""
        return self._pending[0][0] if self._pending else float("inf")

    def ready_due(self, t: float) -> None:
        """Make every replica due by `t` ready and hand it to the engine."""
        while self._pending and self._pending[0][0] <= t:
            ready, r = self._pending.pop(0)
            if not self.retired[r]:
                self.on_ready(r, ready)

    @property
    def alive(self) -> int:
        """Replicas paid for (provisioning, ready or draining)."""
        return self._alive

    def ready_count(self, t: float) -> int:
        """Replicas taking work at `t`."""
        return sum(
            1
            for r in range(len(self.ready_at))
            if not self.retired[r] and self.ready_at[r] <= t
        )

    def wanted(self) -> int:
        """Replicas not retired (ready or provisioning)."""
        return sum(1 for r in range(len(self.ready_at)) if not self.retired[r])

    def reconcile(self, desired: int, t: float) -> None:
        """Ask for replicas or retire them (provisioning first, then the newest)."""
        have = self.wanted()
        for _ in range(desired - have):
            self._add(t, warm=False)
        if desired >= have:
            return
        order = sorted(
            (r for r in range(len(self.ready_at)) if not self.retired[r]),
            key=lambda r: (self.ready_at[r] <= t, -self.ready_at[r]),
        )
        for r in order[: have - desired]:
            self.retired[r] = True
            if self.busy[r] == 0 or self.ready_at[r] > t:
                self.end(r, t)
        self._pending = [(x, r) for x, r in self._pending if not self.retired[r]]

    def end(self, r: int, t: float) -> None:
        """Replica r stops being paid for at `t` (retired and idle)."""
        if not self.ended[r]:
            self._account(t)
            self.ended[r] = True
            self._alive -= 1

    def finish(self, t: float) -> float:
        """Replica-seconds up to `t`."""
        self._account(t)
        return self.replica_s
