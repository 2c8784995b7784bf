"""Bounds on every request's e2e in a fixed, warm FIFO fleet, without the event loop.

The judge asks, for a minute and a count, only whether a gated objective is in
breach: whether the requests over its target prove it (`_verdict`). In the queue
engine under a fixed count that needs each request's e2e, and the exact answer
is a heap operation per request in Python. These bounds take a few NumPy passes;
when the requests over the target under the upper bound cannot prove a breach,
or those under the lower bound already do, the verdict is the exact one without
simulating (monotone: more requests over never un-proves a breach). Only
minutes between the two are simulated.

The queue (`queue_engine.run_fixed`): c slots, all free at the start, at or
before the first arrival; request i arrives at a_i (sorted) with work w_i and
starts at max(a_i, the earliest free slot). Let V(t) be the work the fleet holds
at t (each slot's committed time past t, summed), and U the same for one server
c times as fast fed the same requests (Lindley's recursion; vectorised as
U_i = X_i - min_{k<=i} X_k with X_i = sum_{j<i} w_j - c a_i). Then, with
`top` the sum of the c - 1 largest works and `big` the largest:

- U <= V: the fleet never drains faster than c, the fast server drains at c
  whenever it holds work;
- V <= U + top: since the last moment a slot stood idle the fleet drained at c
  (so V - U did not grow), and at that moment no request waited and at most
  c - 1 ran, each with no more than its own work left;
- the slots' committed times differ by at most `big` (a request goes to the
  earliest slot: it widens the spread to at most its own work), so i's wait, the
  earliest slot's time past a_i, lies between V/c - big and V/c (the least of c
  values is at most their mean and at least their largest minus the spread).

e2e_i = wait_i + w_i, so (max(0, U_i/c - big) + w_i) <= e2e_i <= ((U_i + top)/c
+ w_i), each widened by a rounding margin far above float error.
"""

from __future__ import annotations

import heapq

import numpy as np
import numpy.typing as npt

__all__ = ["FifoBounds", "FifoRun", "e2e_bounds_ms", "fifo_e2e_ms"]

_REL = 1e-12
"""Rounding margin per arrival, relative to the largest time or work summed."""


class FifoBounds:
    """One minute's arrivals and works, bounded at any number of slots (see the module).
    What does not depend on the count is computed once."""

    def __init__(self, arrival_s: npt.NDArray[np.float64], work_s: npt.NDArray[np.float64]):
        self.w = np.asarray(work_s, dtype=np.float64)
        self.t = np.asarray(arrival_s, dtype=np.float64) - float(arrival_s[0])
        self.before = np.concatenate(([0.0], np.cumsum(self.w[:-1])))
        """Work arrived before each request."""
        self.largest = np.concatenate(([0.0], np.cumsum(np.sort(self.w)[::-1])))
        """The sum of the k largest works, at k."""
        self.big = float(self.w.max(initial=0.0))
        self.total = float(self.before[-1] + self.w[-1]) if self.w.size else 0.0

    def e2e_ms(self, slots: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """(lower, upper) bounds on each request's e2e (ms) on `slots` slots."""
        c = float(slots)
        x = self.before - c * self.t
        fast = x - np.minimum.accumulate(x)  # the fast server's work ahead of each arrival
        top = float(self.largest[min(self.w.size, max(0, slots - 1))])
        span = self.total + c * float(self.t[-1]) + 1.0
        margin = _REL * self.w.size * span
        low = np.maximum(fast / c - self.big, 0.0) + self.w - margin
        high = (fast + top) / c + self.w + margin
        return low * 1000.0, high * 1000.0


def e2e_bounds_ms(
    arrival_s: npt.NDArray[np.float64], work_s: npt.NDArray[np.float64], slots: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(lower, upper) bounds on each request's e2e (ms) on `slots` FIFO slots, all free at
    the first arrival (see the module). Requires finite work and sorted arrivals."""
    return FifoBounds(arrival_s, work_s).e2e_ms(slots)


def fifo_e2e_ms(
    arrival_s: npt.NDArray[np.float64], work_s: npt.NDArray[np.float64], slots: int
) -> npt.NDArray[np.float64]:
    """Each request's e2e (ms) on `slots` FIFO slots free at the first arrival, exactly as
    `queue_engine.run_fixed` computes it (see `FifoRun`)."""
    run = FifoRun(arrival_s, work_s, slots)
    return run.e2e_ms(run.size)


class FifoRun:
    """`queue_engine.run_fixed`'s placement, the same operations on the same floats (a slot
    heap of free times, start at max(free, arrival), done at start + work), without the
    run's bookkeeping, in pieces: what the judge simulates when the bounds leave a minute
    open, stopping once the requests so far prove a breach."""

    def __init__(
        self, arrival_s: npt.NDArray[np.float64], work_s: npt.NDArray[np.float64], slots: int
    ) -> None:
        self.t = arrival_s
        self.arr, self.work = arrival_s.tolist(), work_s.tolist()
        self.size = len(self.arr)
        self.free = [self.arr[0]] * slots if self.arr else []  # free at the first arrival
        self.done = [0.0] * self.size
        self.placed = 0

    def e2e_ms(self, upto: int) -> npt.NDArray[np.float64]:
        """Place the requests up to `upto`; the e2e (ms) of those placed by this call."""
        lo, hi = self.placed, min(upto, self.size)
        arr, work, free, done = self.arr, self.work, self.free, self.done
        replace = heapq.heapreplace
        for i in range(lo, hi):
            a = arr[i]
            f = free[0]
            d = (f if f > a else a) + work[i]
            replace(free, d)
            done[i] = d
        self.placed = max(lo, hi)
        return (np.asarray(done[lo:hi], dtype=np.float64) - self.t[lo:hi]) * 1000.0
