"""Which span operations or services become stages, and which are folded into `other`.

A fold must never hide a suspect: the leading stages by total time are kept,
and so is every stage that is not negligible overall or in the slowest traces
(where a fault shows first). Only what is negligible in both is summed into
`other`, and the report says how much that is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ibis

from tailbudget.logs.columns import stage_name
from tailbudget.logs.options import ReadOptions

__all__ = ["MAX_SPAN_STAGES", "NEGLIGIBLE", "SLOW_SHARE", "StageChoice", "choose_stages"]

NEGLIGIBLE = 0.005
"""A stage under this share of the time, overall and in the slowest traces, may be folded."""
SLOW_SHARE = 0.05
"""The slowest traces checked for a stage that matters only in the tail: this share of them."""
MAX_SPAN_STAGES = 64
"""At most this many stages (a table wider than this is unreadable); the report says so."""


@dataclass(frozen=True)
class StageChoice:
    """Raw stage labels kept (by total time, largest first), folded ones, and notes."""

    keep: tuple[str, ...]
    rest: tuple[str, ...]
    notes: tuple[str, ...]


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
    all_t, slow_t = sum(totals) or 1.0, sum(slows) or 1.0
    forced = {k.lower() for k in options.span_keep}
    keep: list[str] = []
    rest: list[str] = []
    for i, name in enumerate(names):
        matters = totals[i] / all_t >= NEGLIGIBLE or slows[i] / slow_t >= NEGLIGIBLE
        if i < options.max_stages or matters or stage_name(name).lower() in forced:
            keep.append(name)
        else:
            rest.append(name)
    notes: list[str] = []
    if len(keep) > MAX_SPAN_STAGES:
        # Fold the least time in the slowest traces first: the tail is what is audited.
        order = sorted(range(len(keep)), key=lambda k: slows[names.index(keep[k])], reverse=True)
        kept = {keep[k] for k in order[:MAX_SPAN_STAGES]}
        over = [n for n in keep if n not in kept]
        notes.append(
            f"{len(keep)} span {options.span_stage}s are not negligible; the {len(over)} with "
            f"the least time in the slowest traces are folded into 'other' too "
            f"(at most {MAX_SPAN_STAGES} stages)"
        )
        keep = [n for n in keep if n in kept]
        rest = over + rest
    if rest:
        folded = {n for n in rest}
        share = sum(t for n, t in zip(names, totals, strict=True) if n in folded) / all_t
        slow_share = sum(s for n, s in zip(names, slows, strict=True) if n in folded) / slow_t
        notes.append(
            f"{len(names)} span {options.span_stage}s: {len(keep)} are stages, the other "
            f"{len(rest)} are summed into stage 'other' ({share:.1%} of the time, "
            f"{slow_share:.1%} in the slowest {SLOW_SHARE:.0%} of traces)"
        )
    return StageChoice(keep=tuple(keep), rest=tuple(rest), notes=tuple(notes))
