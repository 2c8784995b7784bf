"""Which span operations or services become stages, from each one's time overall and in
the slowest traces; the live traces' choice made on Arrow (`choose_on_arrow`).

A fold must never hide a suspect: the leading stages by total time are kept,
and so is every stage that is not negligible overall or in the slowest traces
(where a fault shows first). Only what is negligible in both is summed into
`other`, and the report says how much that is. `logs.span_stages` computes the
times of a log's spans on the engine; `serve --traces` computes them here, on each
batch's Arrow columns, with the same ranks and the same order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailbudget.logs.columns import stage_name
from tailbudget.logs.options import ReadOptions

__all__ = [
    "MAX_SPAN_STAGES",
    "NEGLIGIBLE",
    "SLOW_SHARE",
    "StageChoice",
    "choose_on_arrow",
    "decide",
]

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


def choose_on_arrow(paths: pa.Table, options: ReadOptions) -> StageChoice:
    """`span_stages.choose_stages` on a table of `trace`, `is_root`, `dur_ms`, `stage_raw`
    and `self_ms` in memory: the slowest traces by rank (root duration, largest first,
    then trace id), each label's time overall and in them, ordered by time, then label."""
    root_ms = pc.if_else(paths.column("is_root"), paths.column("dur_ms"), 0.0)
    traces = pa.table({"trace": paths.column("trace"), "root_ms": root_ms})
    per_trace = traces.group_by("trace").aggregate([("root_ms", "max")])
    order = pc.sort_indices(
        per_trace, sort_keys=[("root_ms_max", "descending"), ("trace", "ascending")]
    )
    count = per_trace.num_rows
    take = int(np.count_nonzero(np.arange(count) < max(count * SLOW_SHARE, 1)))
    slow = pc.take(per_trace.column("trace"), order[:take])
    in_slow = pc.is_in(paths.column("trace"), value_set=slow.combine_chunks())
    self_ms = paths.column("self_ms")
    frame = (
        pa.table(
            {
                "stage_raw": paths.column("stage_raw"),
                "t": self_ms,
                "s": pc.if_else(in_slow, self_ms, 0.0),
            }
        )
        .group_by("stage_raw")
        .aggregate([("t", "sum"), ("s", "sum")])
    )
    frame = frame.take(
        pc.sort_indices(
            frame,
            sort_keys=[("t_sum", "descending"), ("stage_raw", "ascending", "at_end")],
        )
    )
    names = [str(n) for n in frame.column("stage_raw").to_pylist()]
    totals = [float(x or 0.0) for x in frame.column("t_sum").to_pylist()]
    slows = [float(x or 0.0) for x in frame.column("s_sum").to_pylist()]
    return decide(names, totals, slows, options)


def decide(
    names: list[str], totals: list[float], slows: list[float], options: ReadOptions
) -> StageChoice:
    """The choice from each stage label's time overall and in the slowest traces (the
    labels ordered by time overall, largest first, then by label)."""
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
