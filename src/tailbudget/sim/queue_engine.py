"""The queueing engine: K slots per replica, one shared FIFO queue, the policy in the loop.

A request holds one slot for its work time (the copied log request's time,
times the cold factor on a young replica, minus the logging overhead while
logging is trimmed). Slots are a heapq of (free at, replica). Under FIFO the
k-th request starts at max(its arrival, the earliest free slot), so requests
are placed in arrival order without a departure event each. The slot set only
changes at policy evaluations, so a request is placed only when it starts by
the next evaluation; later ones wait in the queue until the fleet after that
evaluation is known (a scale-up's new replica serves the queue it finds). This
is the event-driven FIFO M/M/c exactly, at a heap operation per request.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque

import numpy as np
import numpy.typing as npt

from tailbudget.control.decision import Decision
from tailbudget.sim.fit import minute_rates
from tailbudget.sim.fleet import Fleet, Knobs, TickView
from tailbudget.sim.model import ServiceModel
from tailbudget.sim.policies import FixedPolicy
from tailbudget.sim.trace import Arrivals, RunPolicy, SimTrace, TickRecord

__all__ = ["run_queue", "work_columns"]


def work_columns(
    model: ServiceModel, arrivals: Arrivals
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64] | None]:
    """Each arrival's work (s) and, when the model's work rises with load, the part divided
    by the ready replicas (work = base + per_ready / ready); None when it does not."""
    work = model.samples.work_ms[arrivals.src] / 1000.0
    slope, logged = model.load_slope, model.samples.load_rps
    if slope is None or slope.value <= 0 or logged is None or not arrivals.size:
        return work, None
    b = slope.value / 1000.0
    floor = 0.1 * model.samples.work_ms[arrivals.src] / 1000.0
    base = model.samples.work_ms[arrivals.src] / 1000.0 - b * logged[arrivals.src]
    return np.maximum(base, floor), b * minute_rates(arrivals.t_s)


class _QueueSim:
    def __init__(self, model: ServiceModel, arrivals: Arrivals, policy: RunPolicy) -> None:
        self.k = max(1, int(model.concurrency.value))
        self.cold = float(model.cold_factor.value)
        self.overhead = float(model.logging_overhead_ms.value) / 1000.0
        work, per_ready = work_columns(model, arrivals)
        self.work = work.tolist()
        self.per_ready: list[float] | None = None if per_ready is None else per_ready.tolist()
        """Load-dependent work: work = base + per_ready / ready replicas."""
        self.arr_np = arrivals.t_s
        self.arr = arrivals.t_s.tolist()
        self.low = arrivals.shed_codes().tolist()
        self.codes = arrivals.class_code
        n = len(self.arr)
        self.start_t = [math.nan] * n
        self.done = [math.nan] * n
        self.shed = [False] * n
        self.err_np = model.samples.error[arrivals.src]
        self.policy = policy
        self.knobs = Knobs(desired=0)
        self.fleet = Fleet(float(model.provision_delay_s.value), float(model.cold_window_s.value))
        self.slots: list[tuple[float, int]] = []
        self.last_free: list[float] = []
        self.queue: deque[int] = deque()
        self.dead = 0
        """Slots of retired replicas still in the heap."""
        self.pending = np.zeros(0, dtype=np.int64)
        self.ticks: list[TickRecord] = []
        self.decisions: list[Decision] = []

    def _open(self, replicas: list[int]) -> None:
        for r in replicas:
            while len(self.last_free) <= r:
                self.last_free.append(0.0)
            ready = self.fleet.ready_at[r]
            self.last_free[r] = ready
            for _ in range(self.k):
                heapq.heappush(self.slots, (ready, r))

    def _place(self, until: float) -> None:
        """Start queued requests, in order, that start by `until`."""
        q, slots, retired = self.queue, self.slots, self.fleet.retired
        warm_at, work, arr = self.fleet.warm_at, self.work, self.arr
        cold, trim, overhead = self.cold, self.knobs.trim, self.overhead
        start_t, done, last_free = self.start_t, self.done, self.last_free
        replace, pop = heapq.heapreplace, heapq.heappop
        per_ready, inv = self.per_ready, 1.0 / max(1, self.fleet.ready_count(until))
        while q and slots:
            free, r = slots[0]
            if retired[r]:
                pop(slots)
                self.dead -= 1
                continue
            i = q[0]
            s = free if free > arr[i] else arr[i]
            if s > until:
                return
            q.popleft()
            w = work[i] if per_ready is None else work[i] + per_ready[i] * inv
            if s < warm_at[r]:
                w *= cold
            if trim:
                w = w - overhead if w > overhead else 0.0
            d = s + w
            replace(slots, (d, r))
            start_t[i], done[i] = s, d
            if d > last_free[r]:
                last_free[r] = d

    def _admit_plain(self, upto_t: float, nxt: int) -> int:
        """`_admit` without shedding, trimming, retired slots or load-dependent work: the
        common window, kept to the fewest operations per request."""
        arr, q, slots = self.arr, self.queue, self.slots
        end = bisect.bisect_right(arr, upto_t, nxt)
        if q or not slots:
            q.extend(range(nxt, end))
            return end
        warm_at, work, cold = self.fleet.warm_at, self.work, self.cold
        warm_max = max(warm_at)
        start_t, done, last_free = self.start_t, self.done, self.last_free
        replace = heapq.heapreplace
        for i in range(nxt, end):
            a = arr[i]
            free, r = slots[0]
            st = free if free > a else a
            if st > upto_t:  # from here on everyone waits past upto_t
                q.extend(range(i, end))
                return end
            w = work[i]
            if st < warm_max and st < warm_at[r]:
                w *= cold
            d = st + w
            replace(slots, (d, r))
            start_t[i] = st
            done[i] = d
            if d > last_free[r]:
                last_free[r] = d
        return end

    # The simulator's hot loop, kept in one frame: locals, no call per request.
    def _admit(self, upto_t: float, nxt: int) -> int:  # noqa: PLR0915
        """Queue (or shed) every arrival up to `upto_t`; place those that start by then."""
        self._place(upto_t)  # the queue left from before goes first (FIFO)
        if not (self.knobs.shed or self.knobs.trim or self.dead or self.per_ready):
            return self._admit_plain(upto_t, nxt)
        arr, n, q = self.arr, len(self.arr), self.queue
        shed_on, low, shed = self.knobs.shed, self.low, self.shed
        codes = self.knobs.shed_codes
        slots, retired = self.slots, self.fleet.retired
        warm_at, work, cold = self.fleet.warm_at, self.work, self.cold
        trim, overhead = self.knobs.trim, self.overhead
        start_t, done, last_free = self.start_t, self.done, self.last_free
        replace, pop = heapq.heapreplace, heapq.heappop
        per_ready, inv = self.per_ready, 1.0 / max(1, self.fleet.ready_count(upto_t))
        # the hot loop: one heap operation per request while nobody waits past upto_t
        while nxt < n:
            a = arr[nxt]
            if a > upto_t:
                break
            if shed_on and low[nxt] in codes:
                shed[nxt] = True
            elif q:
                q.append(nxt)  # someone waits past upto_t, so this one does too
            else:
                if self.dead:  # slots of retired replicas are dropped as they surface
                    while slots and retired[slots[0][1]]:
                        pop(slots)
                        self.dead -= 1
                if not slots:
                    q.append(nxt)
                    nxt += 1
                    continue
                free, r = slots[0]
                st = free if free > a else a
                if st > upto_t:
                    q.append(nxt)
                else:
                    w = work[nxt] if per_ready is None else work[nxt] + per_ready[nxt] * inv
                    if st < warm_at[r]:
                        w *= cold
                    if trim:
                        w = w - overhead if w > overhead else 0.0
                    d = st + w
                    replace(slots, (d, r))
                    start_t[nxt] = st
                    done[nxt] = d
                    if d > last_free[r]:
                        last_free[r] = d
            nxt += 1
        return nxt

    def run(self, replicas: int, t0: float, end_s: float) -> SimTrace:
        fleet = self.fleet
        self.knobs.desired = replicas
        self._open(fleet.start(replicas, t0))
        every, nxt, prev = self.policy.every_s, 0, t0
        tick = t0 + every
        book = _Book(self)
        while tick <= end_s:
            nxt = self._admit(tick, nxt)
            view = book.view(tick, prev)
            self.decisions.extend(self.policy.tick(view, self.knobs))
            added, gone = fleet.reconcile(max(0, self.knobs.desired), tick)
            self._open(added)
            self.dead += self.k * len(gone)
            for r in gone:  # paid until its last committed request finishes
                busy_until = self.last_free[r] if fleet.ready_at[r] <= tick else tick
                fleet.end(r, max(tick, busy_until))
            self.ticks.append(
                TickRecord(tick, fleet.ready_count(tick), fleet.alive(tick),
                           self.knobs.shed, self.knobs.trim)
            )  # fmt: skip
            prev, tick = tick, tick + every
        nxt = self._admit(math.inf, nxt)
        return self._trace(end_s)

    def run_fixed(self, replicas: int, t0: float, end_s: float) -> SimTrace:
        """`run` under a fixed count, in one pass: warm replicas ready at `t0`, never
        shedding nor trimming, so no request is ever cold and the windows between
        evaluations change nothing (each request still takes the earliest free slot in
        arrival order, the same heap operations); the evaluations only record the fleet."""
        self.knobs.desired = replicas
        self._open(self.fleet.start(replicas, t0))
        arr, work, per_ready, inv = self.arr, self.work, self.per_ready, 1.0 / replicas
        slots, start_t, done, last_free = self.slots, self.start_t, self.done, self.last_free
        replace = heapq.heapreplace
        for i, a in enumerate(arr):
            free, r = slots[0]
            st = free if free > a else a
            d = st + (work[i] if per_ready is None else work[i] + per_ready[i] * inv)
            replace(slots, (d, r))
            start_t[i] = st
            done[i] = d
            if d > last_free[r]:
                last_free[r] = d
        every, tick = self.policy.every_s, t0 + self.policy.every_s
        while tick <= end_s:
            self.ticks.append(TickRecord(tick, replicas, replicas, False, False))
            tick += every
        return self._trace(end_s)

    def _trace(self, end_s: float) -> SimTrace:
        return SimTrace(
            arrival_s=self.arr_np,
            done_s=np.asarray(self.done, dtype=np.float64),
            ttft_s=None,
            src=np.zeros(0, dtype=np.int64),
            shed=np.asarray(self.shed, dtype=bool),
            error=self.err_np,
            output_tokens=None,
            ticks=self.ticks,
            decisions=self.decisions,
            replica_s=self.fleet.replica_seconds(end_s),
            end_s=end_s,
            cold_starts=sum(
                1 for r, w in enumerate(self.fleet.warm_at) if w > self.fleet.ready_at[r]
            ),
        )


class _Book:
    """What the policy sees at each evaluation, computed on arrays of the requests so far."""

    def __init__(self, sim: _QueueSim) -> None:
        self.sim = sim
        self.seen = 0
        self.open: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        """Requests arrived and not yet known to be done by the last evaluation."""

    def view(self, t: float, prev: float) -> TickView:
        sim = self.sim
        lo, hi = self.seen, int(np.searchsorted(sim.arr_np, t, side="right"))
        self.seen = hi
        keep = ~np.asarray(sim.shed[lo:hi], dtype=bool)
        fresh = np.arange(lo, hi, dtype=np.int64)[keep]
        old = self.open.tolist()
        idx = np.concatenate([self.open, fresh])
        done = np.concatenate(
            [np.asarray([sim.done[i] for i in old]), np.asarray(sim.done[lo:hi])[keep]]
        )
        start = np.concatenate(
            [np.asarray([sim.start_t[i] for i in old]), np.asarray(sim.start_t[lo:hi])[keep]]
        )
        done = np.where(np.isnan(done), np.inf, done)
        start = np.where(np.isnan(start), np.inf, start)
        arr = sim.arr_np[idx]
        span = max(t - prev, 1e-9)
        in_sys = np.clip(np.minimum(done, t) - np.maximum(arr, prev), 0.0, None).sum()
        busy = np.clip(np.minimum(done, t) - np.maximum(start, prev), 0.0, None).sum()
        fin = done <= t
        order = np.argsort(done[fin], kind="stable")
        fidx = idx[fin][order]
        fdone = done[fin][order]
        self.open = idx[~fin]
        ready = sim.fleet.ready_count(t)
        return TickView(
            now_s=t,
            done_ts=fdone,
            done_ms=(fdone - sim.arr_np[fidx]) * 1000.0,
            done_err=sim.err_np[fidx],
            mean_in_system=float(in_sys) / span,
            mean_busy=float(busy) / span / max(1, ready * sim.k),
            ready=ready,
            alive=sim.fleet.alive(t),
            done_class=None if sim.codes is None else sim.codes[fidx],
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
    then queued requests drain (replica-hours count up to `end_s`)."""
    t0 = min(float(arrivals.t_s[0]), 0.0) if arrivals.size else 0.0
    sim = _QueueSim(model, arrivals, policy)
    fixed = isinstance(policy, FixedPolicy) and policy.replicas == replicas >= 1
    trace = sim.run_fixed(replicas, t0, end_s) if fixed else sim.run(replicas, t0, end_s)
    return SimTrace(**{**trace.__dict__, "src": arrivals.src})
