"""The queueing engine: K slots per replica, one shared FIFO queue, the policy in the loop.

A request holds one slot for its work time (the copied log request's time,
times the cold factor on a young replica, minus the logging overhead while
logging is trimmed). Events are a heapq of departures; arrivals are a sorted
array merged in; policy evaluations happen on a fixed grid.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np

from tailbudget.control.decision import Decision
from tailbudget.sim.fleet import Fleet, Knobs, TickView
from tailbudget.sim.model import ServiceModel
from tailbudget.sim.trace import Arrivals, RunPolicy, SimTrace, TickRecord

__all__ = ["run_queue"]

_INF = float("inf")


class _QueueSim:
    def __init__(
        self, model: ServiceModel, arrivals: Arrivals, policy: RunPolicy, replicas: int
    ) -> None:
        self.k = max(1, int(model.concurrency.value))
        self.cold = float(model.cold_factor.value)
        self.overhead = float(model.logging_overhead_ms.value) / 1000.0
        self.work = (model.samples.work_ms[arrivals.src] / 1000.0).tolist()
        self.arr = arrivals.t_s.tolist()
        self.low = arrivals.low_priority.tolist()
        n = len(self.arr)
        self.done = [math.nan] * n
        self.shed = [False] * n
        self.policy = policy
        self.knobs = Knobs(desired=replicas)
        self.fleet = Fleet(
            float(model.provision_delay_s.value), float(model.cold_window_s.value), self._ready
        )
        self.free: deque[int] = deque()
        self.queue: deque[int] = deque()
        self.heap: list[tuple[float, int, int]] = []
        self.in_sys = 0
        self.busy_total = 0
        self.area_sys = self.area_busy = 0.0
        self.last_t = 0.0
        self.comp_t: list[float] = []
        self.comp_ms: list[float] = []
        self.comp_err: list[bool] = []
        self.err = model.samples.error[arrivals.src].tolist()
        self.ticks: list[TickRecord] = []
        self.decisions: list[Decision] = []
        self.cold_starts = 0

    # ---- replicas ------------------------------------------------------------------

    def _ready(self, r: int, t: float) -> None:
        self._advance(t)
        if self.fleet.warm_at[r] > self.fleet.ready_at[r]:
            self.cold_starts += 1
        for _ in range(self.k):
            self._give(r, t)

    def _give(self, r: int, t: float) -> None:
        """A free slot on replica r: start the next queued request or keep it free."""
        if self.queue:
            self._start(self.queue.popleft(), r, t)
        else:
            self.free.append(r)

    def _start(self, i: int, r: int, t: float) -> None:
        w = self.work[i]
        if t < self.fleet.warm_at[r]:
            w *= self.cold
        if self.knobs.trim:
            w = max(0.0, w - self.overhead)
        self.fleet.busy[r] += 1
        self.busy_total += 1
        heapq.heappush(self.heap, (t + w, i, r))

    def _advance(self, t: float) -> None:
        dt = t - self.last_t
        self.area_sys += self.in_sys * dt
        self.area_busy += self.busy_total * dt
        self.last_t = t

    # ---- events --------------------------------------------------------------------

    def _arrive(self, i: int, t: float) -> None:
        if self.knobs.shed and self.low[i]:
            self.shed[i] = True
            return
        self._advance(t)
        self.in_sys += 1
        fleet = self.fleet
        while self.free:
            r = self.free.popleft()
            if not fleet.retired[r]:  # a retired replica's free slot is dropped when met
                self._start(i, r, t)
                return
        self.queue.append(i)

    def _depart(self, t: float, i: int, r: int) -> None:
        self._advance(t)
        self.in_sys -= 1
        self.busy_total -= 1
        fleet = self.fleet
        fleet.busy[r] -= 1
        self.done[i] = t
        self.comp_t.append(t)
        self.comp_ms.append((t - self.arr[i]) * 1000.0)
        self.comp_err.append(self.err[i])
        if fleet.retired[r]:
            if fleet.busy[r] == 0:
                fleet.end(r, t)
        else:
            self._give(r, t)

    def _tick(self, t: float, upto: int) -> int:
        self._advance(t)
        span = max(self.policy.every_s, 1e-9)
        ready = self.fleet.ready_count(t)
        view = TickView(
            now_s=t,
            done_ts=self.comp_t[upto:],
            done_ms=self.comp_ms[upto:],
            done_err=self.comp_err[upto:],
            mean_in_system=self.area_sys / span,
            mean_busy=self.area_busy / span / max(1, ready * self.k),
            ready=ready,
            alive=self.fleet.alive,
        )
        self.area_sys = self.area_busy = 0.0
        self.decisions.extend(self.policy.tick(view, self.knobs))
        self.fleet.reconcile(max(0, self.knobs.desired), t)
        self.ticks.append(
            TickRecord(t, self.fleet.ready_count(t), self.fleet.alive, self.knobs.shed, self.knobs.trim)
        )
        return len(self.comp_t)

    def run(self, replicas: int, t0: float, end_s: float) -> SimTrace:
        self.last_t = t0
        self.fleet.start(replicas, t0)
        for r in range(replicas):
            self._ready(r, t0)
        arr, heap, n = self.arr, self.heap, len(self.arr)
        nxt, every = 0, self.policy.every_s
        tick = t0 + every
        upto = 0
        pop = heapq.heappop
        replica_s = -1.0
        while True:
            ta = arr[nxt] if nxt < n else _INF
            te = heap[0][0] if heap else _INF
            tr = self.fleet.next_ready()
            t = min(ta, te, tr)
            if tick <= t and tick <= end_s:
                upto = self._tick(tick, upto)
                tick += every
                continue
            if t > end_s and replica_s < 0:
                replica_s = self.fleet.finish(end_s)  # paid time stops at the end; work drains
            if t == _INF:
                break
            if tr <= te and tr <= ta:
                self.fleet.ready_due(tr)
            elif te <= ta:
                _, i, r = pop(heap)
                self._depart(te, i, r)
            else:
                self._arrive(nxt, ta)
                nxt += 1
        return self._trace(end_s, replica_s if replica_s >= 0 else self.fleet.finish(end_s))

    def _trace(self, end_s: float, replica_s: float) -> SimTrace:
        return SimTrace(
            arrival_s=np.asarray(self.arr, dtype=np.float64),
            done_s=np.asarray(self.done, dtype=np.float64),
            ttft_s=None,
            src=np.zeros(0, dtype=np.int64),
            shed=np.asarray(self.shed, dtype=bool),
            error=np.asarray(self.err, dtype=bool),
            output_tokens=None,
            ticks=self.ticks,
            decisions=self.decisions,
            replica_s=replica_s,
            end_s=end_s,
            cold_starts=self.cold_starts,
        )


def run_queue(
    model: ServiceModel,
    arrivals: Arrivals,
    policy: RunPolicy,
    *,
    replicas: int,
    end_s: float,
) -> SimTrace:
    """Simulate `arrivals` on `replicas` starting replicas; the policy acts until `end_s`,
    then requests in flight drain (replica-hours count up to `end_s`)."""
    t0 = float(arrivals.t_s[0]) if arrivals.size else 0.0
    sim = _QueueSim(model, arrivals, policy, replicas)
    trace = sim.run(replicas, min(t0, 0.0), end_s)
    return SimTrace(**{**trace.__dict__, "src": arrivals.src})
