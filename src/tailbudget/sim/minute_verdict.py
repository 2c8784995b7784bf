"""Is a minute met? The judge's verdict alone, without the figures a report needs.

`judge.met(measure(trace, ...))` asks, of each gated objective (every objective
when none is gated), whether the minute's requests prove a breach: `measure`
groups the requests by minute of arrival and applies the one verdict rule
(`_verdict`) to each group. A judged minute is one group, so the verdict is
whether the requests over the target prove a breach among the requests served
(`proves_breach`): the figure, its order statistic and the other objectives
are not needed. A minute whose arrivals span more than one group is left to
`measure` itself.

`QueueMinute` answers the same question for the queue engine under a fixed
count: without simulating when the e2e bounds of `queue_bounds` settle it, else
by the engine's own loop without the run's bookkeeping.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from tailbudget._units import quantile_of
from tailbudget._verdict import proves_breach
from tailbudget.budget.objectives import Objective, Objectives
from tailbudget.sim.model import ServiceModel
from tailbudget.sim.objectives import ObjectiveResult, measure, metric_values
from tailbudget.sim.queue_bounds import FifoBounds, FifoRun
from tailbudget.sim.queue_engine import work_columns
from tailbudget.sim.trace import Arrivals, SimTrace

__all__ = ["QueueMinute", "gated", "met", "minute_met"]

_MINUTE_S = 60.0
"""`measure`'s grouping of requests by minute of arrival."""
_PIECE = 1024
"""Requests simulated between looks at whether those so far prove a breach."""


def gated(results: list[ObjectiveResult]) -> list[ObjectiveResult]:
    """The gated objectives' results, else all of them (what a minute is judged on)."""
    return [r for r in results if r.objective.gated] or results


def met(results: list[ObjectiveResult]) -> bool:
    """No gated objective is in breach in the minute, as a run's minute is judged (the one
    verdict rule on its own requests, `minutes_in_breach`), so the floor and the runs
    agree; a minute with no served request is not met."""
    return all(r.measured_ms is not None and r.minutes_in_breach == 0 for r in gated(results))


def _judged(objectives: Objectives) -> list[Objective]:
    """What `met` reads, before measuring: the gated objectives, else all of them."""
    return [o for o in objectives if o.gated] or list(objectives)


def _one_group(arrival_s: npt.NDArray[np.float64]) -> bool:
    """Every arrival in `measure`'s first minute group (as it computes the groups)."""
    lo = float(arrival_s.min())
    return bool(np.floor((float(arrival_s.max()) - lo) / _MINUTE_S) == 0.0)


def _proved(o: Objective, over: int, n: int) -> bool:
    return _breach(over, n, quantile_of(o.percentile))


def _breach(over: int, n: int, q: float) -> bool:
    """`proves_breach`, without its exact test where its first condition already fails
    (no more over the target than the percentile allows: most judged minutes)."""
    return over > n * (1.0 - q) and proves_breach(over, n, q)


def minute_met(
    trace: SimTrace, objectives: Objectives, stages: Mapping[str, npt.NDArray[np.float64]] | None
) -> bool:
    """`met(measure(trace, objectives, stages))` for a one-minute run."""
    if not trace.arrival_s.size or not _one_group(trace.arrival_s):
        return met(measure(trace, objectives, stages))
    for o in _judged(objectives):
        v = metric_values(trace, o.metric, stages)
        v = v[np.isfinite(v)]
        if not v.size or _proved(o, int((v > o.target_ms).sum()), int(v.size)):
            return False
    return True


def _stage_breach(
    o: Objective, stages: Mapping[str, npt.NDArray[np.float64]], minute: Arrivals
) -> bool:
    """A stage objective's verdict on the minute's copied requests (every one served in a
    fixed warm fleet: `metric_values` keeps them all): breach, or no value to judge."""
    if o.metric == "e2e":
        return False
    v = np.asarray(stages[o.metric], dtype=np.float64)[minute.src]
    v = v[np.isfinite(v)]
    return not v.size or _proved(o, int((v > o.target_ms).sum()), int(v.size))


class QueueMinute:
    """A minute's judgement in the queue engine at any count, when the e2e bounds settle it:
    what does not depend on the count is computed once (`Judge` keeps one per draw)."""

    def __init__(self, model: ServiceModel, objectives: Objectives, minute: Arrivals) -> None:
        self.model = model
        judged = _judged(objectives)
        stages = model.samples.stages
        self.covered = (
            model.kind == "queue"
            and minute.size > 0
            and _one_group(minute.t_s)
            and all(o.metric == "e2e" or o.metric in stages for o in judged)
        )
        if not self.covered:
            return
        self.work, self.per_ready = work_columns(model, minute)
        self.covered = bool(np.isfinite(self.work).all()) and (
            self.per_ready is None or bool(np.isfinite(self.per_ready).all())
        )
        self.t = minute.t_s
        self.fixed = FifoBounds(self.t, self.work) if self.per_ready is None else None
        self.size = minute.size
        self.e2e = [(o.target_ms, quantile_of(o.percentile)) for o in judged if o.metric == "e2e"]
        self.stage_breach = any(_stage_breach(o, stages, minute) for o in judged)
        """A stage's time is the copied request's, whatever the count: judged once."""

    def _work(self, n: int) -> npt.NDArray[np.float64]:
        """Each request's work at `n` replicas (as `run_fixed` adds it)."""
        if self.per_ready is None:
            return self.work
        return self.work + self.per_ready * (1.0 / n)

    def _slots(self, n: int) -> int:
        return n * max(1, int(self.model.concurrency.value))

    def settle(self, n: int) -> bool | None:
        """Whether `n` warm replicas meet every judged objective, when the bounds settle it;
        None when they do not (or the minute is not what they cover)."""
        if not self.covered or n < 1:
            return None
        if self.stage_breach:
            return False
        bounds = self.fixed or FifoBounds(self.t, self._work(n))
        low, high = bounds.e2e_ms(self._slots(n))
        settled = True
        for target, q in self.e2e:
            if _breach(int((low > target).sum()), self.size, q):
                return False  # the requests surely over already prove it
            settled = settled and not _breach(int((high > target).sum()), self.size, q)
        return True if settled else None

    def simulate(self, n: int) -> bool:
        """The same verdict from each request's e2e, simulated (a covered minute only), a
        piece at a time: the requests over a target so far proving a breach settle it
        (more over never un-proves one)."""
        if self.stage_breach:
            return False
        run = FifoRun(self.t, self._work(n), self._slots(n))
        over = [0] * len(self.e2e)
        while run.placed < run.size:
            e2e = run.e2e_ms(run.placed + _PIECE)
            for k, (target, q) in enumerate(self.e2e):
                over[k] += int((e2e > target).sum())
                if _breach(over[k], self.size, q):
                    return False
        return True
