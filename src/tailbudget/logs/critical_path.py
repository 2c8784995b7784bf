"""Critical-path attribution of span trees, on the engine.

Each trace's critical path is the chain of spans that determines when its root
ends (Jaeger's critical-path view, Uber's CRISP): walk back from the end of a
span, take the child that finished last, continue from that child's start. A
child is on its parent's chain when no sibling that finishes later was already
running when it finished; this one window function per parent is the walk-back
for sequential calls, fan-outs and overlapping siblings. (Jaeger's walk also
re-admits a child hidden by a sibling that is itself off the chain; that
second-order case is the one place the two differ.) Children are clipped to
their parent, so the path of a trace adds up to its root's duration: every
millisecond is counted once.

Asynchronous children are off their parent's path, as Jaeger defines it: a
child referenced by `FOLLOWS_FROM` (Jaeger), a CONSUMER span (OTLP's messaging
kind: the producer never waits for it), and a child that starts after its
parent ended (nothing of it is left once clipped). Their own subtrees are off
the path with them, and they hide no sibling from the walk-back.

A span is on the path when its whole chain of ancestors is; that is one join
per tree level (a handful), never a loop over spans. A client span's time on
the path that its callee's server span does not cover - connection, queueing,
the network - is attributed to the callee, as its network/queue edge. A span is
a client span when its kind says so, else when it is not a root and every child
runs on another service (a parent on another service makes a span a server span).
"""

from __future__ import annotations

import uuid
from typing import Any

import ibis
import ibis.expr.datatypes as dt

from tailbudget.logs.canonical import materialize

__all__ = ["MAX_DEPTH", "critical_times"]

MAX_DEPTH = 256
"""Tree levels walked; deeper spans (or parent cycles) stay off the path."""

_CLIENT_KINDS = ("3", "client", "span_kind_client", "spankind.client")
_UNSPECIFIED = ("", "0", "span_kind_unspecified", "unspecified")
_CONSUMER_KINDS = ("5", "consumer", "span_kind_consumer", "spankind.consumer")


def critical_times(spans: Any, backend: Any, attrs: tuple[str, ...]) -> tuple[Any, list[str]]:
    """Spans with `self_ms` = their time on the critical path, `stage_raw` re-attributed.

    `spans` holds trace, span, parent, stage_raw, service, kind (text or null),
    follows (true for a FOLLOWS_FROM child), start_ms, end_ms, dur_ms, err, is_root
    and the `attrs` columns. Returns the
    same spans (off-path ones with 0 ms) and notes for the report.
    """
    parents = spans.select(
        p_trace=spans.trace,
        p_span=spans.span,
        p_start=spans.start_ms,
        p_end=spans.end_ms,
        p_service=spans.service,
    )
    # A span whose parent id reads as "root" is a root, never also a child.
    consumer = spans.kind.lower().strip().isin(_CONSUMER_KINDS).fill_null(False)
    kids = spans.filter(
        spans.parent.notnull() & ~spans.is_root & ~spans.follows.fill_null(False) & ~consumer
    )
    j = kids.join(parents, (kids.trace == parents.p_trace) & (kids.parent == parents.p_span))
    clipped = j.select(
        trace=j.trace,
        span=j.span,
        parent=j.parent,
        stage_raw=j.stage_raw,
        remote=(j.service != j.p_service).fill_null(False),
        c_start=ibis.greatest(j.start_ms, j.p_start),
        c_end=ibis.least(j.end_ms, j.p_end),
    )
    clipped = clipped.filter(clipped.c_end > clipped.c_start)
    # Walk back from the parent's end: the children finishing later, seen first,
    # push the cursor back to the earliest of their starts.
    later = ibis.window(
        group_by=[clipped.trace, clipped.parent],
        order_by=[ibis.desc(clipped.c_end), ibis.desc(clipped.c_start), clipped.span],
        rows=(None, -1),
    )
    cursor = clipped.c_start.min().over(later)
    chain = clipped.mutate(on_chain=cursor.isnull() | (clipped.c_end <= cursor))
    chain = materialize(backend, chain.filter(chain.on_chain).drop("on_chain"))
    path, depth = _on_path(spans, chain, backend)
    below = path.group_by(k_trace=path.o_trace, k_parent=path.o_parent).aggregate(
        covered=(path.o_hi - path.o_lo).sum(),
        n_kids=path.count(),
        n_remote=path.o_remote.cast(dt.int64).sum(),
        callee=path.o_stage.argmax(path.o_hi),
        remote_callee=ibis.ifelse(path.o_remote, path.o_stage, ibis.null(dt.string)).argmax(
            ibis.ifelse(path.o_remote, path.o_hi, ibis.null(dt.float64))
        ),
    )
    out = spans.left_join(path, (spans.trace == path.o_trace) & (spans.span == path.o_span))
    out = out.left_join(below, (out.trace == below.k_trace) & (out.span == below.k_parent))
    time_ms = ibis.greatest(out.o_hi - out.o_lo - out.covered.fill_null(0.0), 0.0)
    kind = out.kind.lower().strip()
    said_client = kind.isin(_CLIENT_KINDS).fill_null(False)
    unknown = kind.isnull() | kind.isin(_UNSPECIFIED)
    # A root receives the request: without a kind it is a server span, never an edge.
    inferred = unknown & ~out.is_root & (out.n_kids > 0) & (out.n_remote == out.n_kids)
    edge = (said_client & (out.n_kids > 0)) | inferred.fill_null(False)
    target = ibis.coalesce(out.remote_callee, out.callee)
    result = out.select(
        "trace",
        "span",
        "parent",
        "start_ms",
        "dur_ms",
        "err",
        "is_root",
        *attrs,
        stage_raw=ibis.ifelse(edge, target, out.stage_raw),
        self_ms=ibis.ifelse(out.o_span.notnull(), time_ms, 0.0),
    )
    notes = [
        "stages = time on each trace's critical path (the chain of spans that determines when "
        "the root ends; each ms counted once, so stages add up to the total); a client span's "
        "time its callee does not cover (network, queueing) is the callee's"
    ]
    if depth >= MAX_DEPTH:
        notes.append(f"spans deeper than {MAX_DEPTH} levels are left off the critical path")
    return result, notes


def _on_path(spans: Any, chain: Any, backend: Any) -> tuple[Any, int]:
    """Every span on the path with its window [o_lo, o_hi]: roots, then chain children
    level by level, each clipped to its parent's window (async children that outlive an
    ancestor count only while it runs)."""
    roots = spans.filter(spans.is_root)
    frontier = _level(
        backend,
        roots.select(
            o_trace=roots.trace,
            o_span=roots.span,
            o_parent=roots.parent,
            o_stage=roots.stage_raw,
            o_remote=ibis.literal(False),
            o_lo=roots.start_ms,
            o_hi=roots.end_ms,
        ),
    )
    levels = [frontier]
    depth = 0
    while depth < MAX_DEPTH:
        j = chain.join(
            frontier, (chain.trace == frontier.o_trace) & (chain.parent == frontier.o_span)
        )
        step = j.select(
            o_trace=j.trace,
            o_span=j.span,
            o_parent=j.parent,
            o_stage=j.stage_raw,
            o_remote=j.remote,
            o_lo=ibis.greatest(j.c_start, j.o_lo),
            o_hi=ibis.least(j.c_end, j.o_hi),
        )
        nxt = _level(backend, step.filter(step.o_hi > step.o_lo))
        if int(backend.execute(nxt.count())) == 0:
            break
        levels.append(nxt)
        frontier = nxt
        depth += 1
    if len(levels) == 1:
        return levels[0], depth
    path = materialize(backend, ibis.union(*levels, distinct=False))
    _drop(backend, levels)
    return path, depth


def _drop(backend: Any, tables: list[Any]) -> None:
    """Free the per-level copies on DuckDB once the path holds them (memory, or spill)."""
    if getattr(backend, "name", "") != "duckdb":
        return
    for table in tables:
        try:
            backend.drop_table(table.get_name(), force=True)
        except Exception:  # a level that stayed a lazy expression has no table to drop
            continue


def _level(backend: Any, expr: Any) -> Any:
    """One level of the path computed once; on Spark with its lineage cut.

    Each level is built from the one before: Spark would otherwise carry (and print into
    every cache name) the whole chain of plans, which grows with the depth of the tree."""
    if getattr(backend, "name", "") != "pyspark":
        return materialize(backend, expr)
    try:
        backend._run_pre_execute_hooks(expr)
        frame = backend._session.sql(backend.compile(expr)).localCheckpoint()
    except AttributeError:  # private attributes moved in another ibis version
        return materialize(backend, expr)
    name = f"_tailbudget_path_{uuid.uuid4().hex[:12]}"
    frame.createOrReplaceTempView(name)
    return backend.table(name)
