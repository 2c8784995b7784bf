"""Which span operations or services become stages, and which are folded into `other`.

A fold must never hide a suspect: the leading stages by total time are kept,
and so is every stage that is not negligible overall or in the slowest traces
(where a fault shows first). Only what is negligible in both is summed into
`other`, and the report says how much that is.
"""

from __future__ import annotations

from typing import Any

import ibis

from tailbudget.logs.options import ReadOptions
from tailbudget.logs.stage_choice import (
    MAX_SPAN_STAGES,
    NEGLIGIBLE,
    SLOW_SHARE,
    StageChoice,
    decide,
)

__all__ = ["MAX_SPAN_STAGES", "NEGLIGIBLE", "SLOW_SHARE", "StageChoice", "choose_stages"]


def choose_stages(selfs: Any, backend: Any, options: ReadOptions) -> StageChoice:
    """Keep the top `max_stages`, every non-negligible stage and `span_keep`; fold the rest."""
    per_trace = selfs.group_by(q_trace=selfs.trace).aggregate(
        q_total=ibis.ifelse(selfs.is_root, selfs.dur_ms, 0.0).max()
    )
    # By rank, not by a quantile cut: a minute of traces ties at its median often.
    rank = ibis.row_number().over(order_by=[ibis.desc(per_trace.q_total), per_trace.q_trace])
    count = per_trace.q_trace.count().over(ibis.window())
    slow = per_trace.filter(rank < ibis.greatest(count * SLOW_SHARE, 1)).select("q_trace")
    tagged = selfs.left_join(slow, selfs.trace == slow.q_trace)
    in_slow = tagged.q_trace.notnull()
    frame = backend.execute(
        tagged.group_by("stage_raw")
        .aggregate(t=tagged.self_ms.sum(), s=ibis.ifelse(in_slow, tagged.self_ms, 0.0).sum())
        .order_by(ibis.desc("t"), "stage_raw")
    )
    names = [str(n) for n in frame["stage_raw"].tolist()]
    totals = [float(x or 0.0) for x in frame["t"].tolist()]
    slows = [float(x or 0.0) for x in frame["s"].tolist()]
    return decide(names, totals, slows, options)
