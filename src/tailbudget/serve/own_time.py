"""A caller's own time from an observation's stage times (a budget's `calls:`).

A budget that nests calls under a stage gives that stage its own time as its slice; a
client reports the caller's stage as it measures it, its calls inside. serve judges the
caller on its own time, as `init --from`, `plan` and the log readers do
(`logs.canonical.own_times`): the caller's time less its calls', a parallel group the
slowest of its branches, never below 0. A call is the time reported for it (a nested
caller's holds its own calls). Trace-derived batches need none of this: their stage
times are already each stage's own time on the critical path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from tailbudget.control.columns import StageColumn
from tailbudget.serve.batch import Batch

__all__ = ["Calls", "own_times"]

Calls = Mapping[str, Sequence[Sequence[str]]]
"""{caller: its direct calls, each the stages whose slowest is its time} (Budget.callers)."""


def _dense(col: StageColumn, n: int) -> np.ndarray:
    """The column over every row of the batch, 0 where a row does not carry the stage."""
    out = np.zeros(n, dtype=np.float64)
    out[col.index] = col.ms
    return out


def own_times(batch: Batch, calls: Calls) -> Batch:
    """`batch` with each caller's stage time made its own time (see the module)."""
    if not calls or not batch.stages:
        return batch
    n, stages = len(batch), dict(batch.stages)
    for caller, terms in calls.items():
        col = batch.stages.get(caller)
        if col is None:
            continue
        inside = [
            np.max([_dense(batch.stages[s], n) for s in present], axis=0)
            for term in terms
            if (present := [s for s in term if s in batch.stages])
        ]
        if not inside:
            continue
        spent = np.sum(inside, axis=0)[col.index]
        stages[caller] = StageColumn(col.index, np.maximum(col.ms - spent, 0.0), col.dense)
    return replace(batch, stages=stages)
