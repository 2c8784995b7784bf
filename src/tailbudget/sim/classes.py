"""Simulate per class: each drawn request keeps its class from the log, and each listed
class is judged on its own simulated requests by its own objectives (the budget's
`classes:` block, DESIGN.md "Classes").

The class of a simulated request is the class of the logged request it copies
(`WorkSamples.classes`), so class shares follow the log. shed_load drops the arrivals of
the class shed first (the highest priority number), each request by its own class.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from tailbudget.budget.classes import ClassSet
from tailbudget.budget.objectives import Objective, Objectives
from tailbudget.errors import TailbudgetError
from tailbudget.sim.objectives import ObjectiveResult, measure
from tailbudget.sim.records import SimClassRecord
from tailbudget.sim.trace import Arrivals, SimTrace

__all__ = ["ClassResult", "SimClasses", "class_results", "draw_by_class", "shed_by_class"]


@dataclass(frozen=True)
class SimClasses:
    """The budget's classes and each logged request's class (what a drawn request keeps)."""

    classes: ClassSet
    labels: npt.NDArray[np.str_]
    """The class of each logged request (indexed like the model's samples)."""


@dataclass(frozen=True)
class ClassResult:
    """One class's simulated requests, judged by its objectives."""

    name: str
    requests: int
    objectives: list[ObjectiveResult]
    skipped: tuple[str, ...] = ()
    """Class objectives the simulator cannot measure on this model (e.g. ttft without an
    LLM model), said in the record's note."""

    def record(self) -> SimClassRecord:
        """The JSON contract's class block."""
        gated = [o for o in self.objectives if o.objective.gated]
        return SimClassRecord(
            name=self.name,
            requests=self.requests,
            objectives=[o.record() for o in self.objectives],
            breach_minutes=max((o.minutes_in_breach for o in gated), default=0),
            note=(
                f"not simulated on this model: {', '.join(self.skipped)}" if self.skipped else ""
            ),
        )


def shed_by_class(arr: Arrivals, sc: SimClasses) -> Arrivals:
    """The arrivals with shed_load's candidates the requests of the class shed first."""
    first = sc.classes.shed_order()[0]
    return replace(arr, low_priority=sc.labels[arr.src] == first)


def draw_by_class(arr: Arrivals, sc: SimClasses, rng: np.random.Generator) -> Arrivals:
    """With a class per arrival (an arrival trace's class column): each arrival copies a
    logged request of its own class; a class the log has no request of is refused."""
    if arr.classes is None:
        return arr
    src = arr.src.copy()
    for name in sorted(set(arr.classes.tolist())):
        pool = np.flatnonzero(sc.labels == name)
        if not pool.size:
            raise TailbudgetError(
                f"arrivals: class {name!r} has no request in the log to copy (its "
                f"{sc.classes.by} values: {', '.join(sorted(set(sc.labels.tolist()))[:8])})",
                param="arrivals",
            )
        mine = arr.classes == name
        src[mine] = pool[rng.integers(0, pool.size, size=int(mine.sum()))]
    return replace(arr, src=src)


def _subset(trace: SimTrace, keep: npt.NDArray[np.bool_]) -> SimTrace:
    return replace(
        trace,
        arrival_s=trace.arrival_s[keep],
        done_s=trace.done_s[keep],
        ttft_s=None if trace.ttft_s is None else trace.ttft_s[keep],
        src=trace.src[keep],
        shed=trace.shed[keep],
        error=trace.error[keep],
        output_tokens=None if trace.output_tokens is None else trace.output_tokens[keep],
    )


def _measured(
    trace: SimTrace, objs: Objectives, stages: Mapping[str, npt.NDArray[np.float64]]
) -> tuple[list[ObjectiveResult], tuple[str, ...]]:
    out: list[ObjectiveResult] = []
    skipped: list[str] = []
    for o in objs:
        if not _simulable(o):
            skipped.append(o.key)
            continue
        try:
            out += measure(trace, [o], stages)
        except TailbudgetError:  # a metric this model does not produce
            skipped.append(o.key)
    return out, tuple(skipped)


def _simulable(o: Objective) -> bool:
    return o.metric != "itl" and o.output_tokens is None


def class_results(
    trace: SimTrace,
    sc: SimClasses,
    service: Objectives,
    stages: Mapping[str, npt.NDArray[np.float64]],
) -> list[ClassResult]:
    """Each listed class on its own simulated requests (a small class: inconclusive, by
    the one verdict rule; a class with no arrivals: its objectives with no figure)."""
    labels = sc.labels[trace.src]
    out = []
    for name in sc.classes.names():
        keep = labels == name
        sub = _subset(trace, keep)
        objs = sc.classes.objectives_of(name, service)
        if not keep.any():
            empty = [ObjectiveResult(o, None, None, 0, 0) for o in objs if _simulable(o)]
            out.append(ClassResult(name, 0, empty))
            continue
        measured, skipped = _measured(sub, objs, stages)
        out.append(ClassResult(name, int(keep.sum()), measured, skipped))
    return out
