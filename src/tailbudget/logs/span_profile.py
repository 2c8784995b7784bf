"""Per-operation samples of a span table, for culprits that hold on CPU contention.

CPU contention in one service shows as a little more time in many of its spans
(their self time: the service's own work) and in the gaps of its own outgoing
calls (a starved caller is slow to send and to take the answer), not as one slow
call. A latency view attributes those gaps to the callee, so a contended caller's
time lands on the services it calls. This profile keeps, per owner (the stage a
span belongs to) and key (an operation's self time, or one of its call edges'
gaps), a bounded sample of values, which `audit/contention.py` compares with the
baseline's by rank: each operation is normalised by its own spread.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ibis
import ibis.expr.datatypes as dt
import numpy as np
import numpy.typing as npt

__all__ = ["SAMPLES", "span_profile"]

SAMPLES = 256
"""At most this many values kept per (owner, key): memory bounded whatever the log."""

_CLIENT = ("3", "client", "span_kind_client", "spankind.client")


def span_profile(spans: Any, backend: Any) -> Mapping[tuple[str, str], npt.NDArray[np.float64]]:
    """{(owner stage, key): sample of ms}; `spans` as critical_times takes them, with `op_name`."""
    parents = spans.select(
        p_trace=spans.trace,
        p_span=spans.span,
        p_start=spans.start_ms,
        p_end=spans.end_ms,
        p_stage=spans.stage_raw,
        p_service=spans.service,
        p_op=spans.op_name,
        p_root=spans.is_root,
        p_kind=spans.kind,
    )
    kids = spans.filter(spans.parent.notnull() & ~spans.is_root)
    j = kids.join(parents, (kids.trace == parents.p_trace) & (kids.parent == parents.p_span))
    remote = (j.service != j.p_service).fill_null(False)
    lo = ibis.greatest(j.start_ms, j.p_start)
    hi = ibis.least(j.end_ms, j.p_end)
    per_parent = j.group_by(k_trace=j.trace, k_span=j.parent).aggregate(
        n_kids=j.count(),
        n_remote=remote.cast(dt.int64).sum(),
        covered=ibis.greatest(hi - lo, 0.0).sum(),
    )
    # A client span (by kind, or every child on another service) is an edge, not work.
    gaps = j.filter(remote).select(
        owner=j.p_stage,
        key=ibis.literal("call ") + j.stage_raw + ibis.literal(" from ") + j.p_op,
        ms=ibis.greatest((j.p_end - j.p_start) - (j.end_ms - j.start_ms), 0.0),
        h=(j.trace + j.span).hash(),
    )
    s = spans.left_join(
        per_parent, (spans.trace == per_parent.k_trace) & (spans.span == per_parent.k_span)
    )
    n_kids = s.n_kids.fill_null(0)
    edge = (s.kind.lower().strip().isin(_CLIENT).fill_null(False) & (n_kids > 0)) | (
        ~s.is_root & (n_kids > 0) & (s.n_remote.fill_null(0) == n_kids)
    )
    work = s.filter(~edge).select(
        owner=s.stage_raw,
        key=ibis.literal("self ") + s.op_name,
        # overlapping children may cover more than the span: never below zero
        ms=ibis.greatest(s.dur_ms - s.covered.fill_null(0.0), 0.0),
        h=(s.trace + s.span).hash(),
    )
    both = ibis.union(work, gaps, distinct=False)
    rank = ibis.row_number().over(group_by=[both.owner, both.key], order_by=both.h)
    kept = both.mutate(r=rank).filter(lambda t: t.r < SAMPLES)
    frame = backend.to_pyarrow(kept.select("owner", "key", "ms"))
    out: dict[tuple[str, str], list[float]] = {}
    for owner, key, ms in zip(
        frame.column("owner").to_pylist(),
        frame.column("key").to_pylist(),
        frame.column("ms").to_pylist(),
        strict=True,
    ):
        if owner is not None and key is not None and ms is not None:
            out.setdefault((owner, key), []).append(float(ms))
    return {k: np.array(v, dtype=np.float64) for k, v in out.items()}
