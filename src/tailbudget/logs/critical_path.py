"""Critical-path attribution of span trees: one implementation, on Arrow columns.

Each trace's critical path is the chain of spans that determines when its root
ends (Jaeger's critical-path view, Uber's CRISP): walk back from the end of a
span, take the child that finished last, continue from that child's start. A
child is on its parent's chain when no sibling that finishes later was already
running when it finished; this one running minimum per parent is the walk-back
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

A span is on the path when its whole chain of ancestors is; that is one
vectorised pass per tree level (a handful), never a loop over spans. A client
span's time on the path that its callee's server span does not cover -
connection, queueing, the network - is attributed to the callee, as its
network/queue edge. A span is a client span when its kind says so, else when it
is not a root and every child runs on another service (a parent on another
service makes a span a server span).

`path_times` computes this with NumPy over a batch of whole traces (the live
receiver's batches); `critical_times` feeds it a span table on any engine, a
bucket of whole traces at a time, so the audit and `serve --traces` share it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tailbudget.logs.canonical import materialize
from tailbudget.logs.engine import arrow_table, engine_name

__all__ = ["MAX_DEPTH", "PATH_INPUTS", "PathTimes", "critical_times", "path_times"]

MAX_DEPTH = 256
"""Tree levels walked; deeper spans (or parent cycles) stay off the path."""

BUCKET_SPANS = 200_000
"""Spans brought from the engine at once (whole traces, by a hash of the trace id)."""

PATH_INPUTS = (
    "trace",
    "span",
    "parent",
    "stage_raw",
    "service",
    "kind",
    "follows",
    "start_ms",
    "end_ms",
    "is_root",
)
"""The columns `path_times` reads."""

_CLIENT_KINDS = ("3", "client", "span_kind_client", "spankind.client")
_UNSPECIFIED = ("", "0", "span_kind_unspecified", "unspecified")
_CONSUMER_KINDS = ("5", "consumer", "span_kind_consumer", "spankind.consumer")

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class PathTimes:
    """Per span (in the table's order): ms on the critical path (0 off it), the stage it
    counts for (a client span's is its callee's), and the tree levels walked."""

    self_ms: Floats
    stage_raw: pa.Array
    depth: int


@dataclass(frozen=True)
class _Chain:
    """The children on their parent's chain: row, parent row, clipped window, remote."""

    row: Ints
    parent: Ints
    lo: Floats
    hi: Floats
    remote: Bools


@dataclass(frozen=True)
class _Path:
    """Spans on the path reached through a parent (not roots), and every span's window."""

    row: Ints
    parent: Ints
    lo: Floats
    hi: Floats
    remote: Bools
    on: Bools
    o_lo: Floats
    o_hi: Floats
    depth: int


def path_times(spans: pa.Table) -> PathTimes:
    """The critical path of every trace in `spans` (whole traces; PATH_INPUTS columns:
    kind text or null, follows true for a FOLLOWS_FROM child, times in ms)."""
    n = spans.num_rows
    start = _floats(spans.column("start_ms"))
    end = _floats(spans.column("end_ms"))
    is_root = _bools(spans.column("is_root"))
    span_code, parent_code, span_rank = _ids(spans)
    trace = _codes(spans.column("trace"))
    width = np.int64(len(span_rank) + 1)
    parent = _parent_rows(trace * width + span_code, trace * width + parent_code, parent_code)
    client, unknown, consumer = _kinds(spans.column("kind"))
    service = _codes(spans.column("service"))
    follows = _bools(spans.column("follows"))
    kid = (parent >= 0) & ~is_root & ~follows & ~consumer
    chain = _chain(np.flatnonzero(kid), parent, start, end, service, span_rank[span_code])
    path = _walk(chain, is_root, start, end, n)
    covered = np.bincount(path.parent, weights=path.hi - path.lo, minlength=n)
    n_kids = np.bincount(path.parent, minlength=n)
    n_remote = np.bincount(path.parent, weights=path.remote.astype(np.float64), minlength=n)
    time_ms = np.maximum(path.o_hi - path.o_lo - covered, 0.0)
    self_ms = np.where(path.on, time_ms, 0.0)
    has_kids = n_kids > 0
    inferred = unknown & ~is_root & has_kids & (n_remote == n_kids)
    edge = (client & has_kids) | inferred
    target = _last_by_end(path, path.remote, n)
    target = np.where(target >= 0, target, _last_by_end(path, np.ones_like(path.remote), n))
    take = np.where(edge, target, np.arange(n, dtype=np.int64))
    stage = spans.column("stage_raw").combine_chunks().take(pa.array(take))
    return PathTimes(self_ms=self_ms.astype(np.float64), stage_raw=stage, depth=path.depth)


def _chain(
    kids: Ints, parent: Ints, start: Floats, end: Floats, service: Ints, rank: Ints
) -> _Chain:
    """Children clipped to their parent, and which are on its chain: walking back from
    the parent's end (later ends first, then later starts, then span id), a child is on
    it when it ends no later than the earliest start of the siblings seen before it."""
    par = parent[kids]
    lo = np.maximum(start[kids], start[par])
    hi = np.minimum(end[kids], end[par])
    keep = hi > lo
    kids, par, lo, hi = kids[keep], par[keep], lo[keep], hi[keep]
    remote = (service[kids] >= 0) & (service[par] >= 0) & (service[kids] != service[par])
    order = np.lexsort((rank[kids], -lo, -hi, par))
    kids, par, lo, hi, remote = kids[order], par[order], lo[order], hi[order], remote[order]
    # Starts and ends as exact ranks: a running minimum per parent is then one
    # accumulate over integers, each parent's run offset below the one before it.
    _, ranks = np.unique(np.concatenate([lo, hi]), return_inverse=True)
    lo_rank, hi_rank = ranks[: len(lo)].astype(np.int64), ranks[len(lo) :].astype(np.int64)
    first = np.ones(len(par), dtype=np.bool_)
    first[1:] = par[1:] != par[:-1]
    run = np.cumsum(first) - 1
    span = np.int64(2 * len(lo) + 1)
    lowest = np.minimum.accumulate(lo_rank - run * span) + run * span
    before = np.empty_like(lowest)
    before[1:] = lowest[:-1]
    on = first.copy()
    on[1:] |= hi_rank[1:] <= before[1:]
    return _Chain(kids[on], par[on], lo[on], hi[on], remote[on])


def _walk(chain: _Chain, is_root: Bools, start: Floats, end: Floats, n: int) -> _Path:
    """Roots, then chain children level by level, each clipped to its parent's window
    (async children that outlive an ancestor count only while it runs)."""
    on = is_root.copy()
    o_lo = np.where(on, start, np.nan)
    o_hi = np.where(on, end, np.nan)
    frontier = on.copy()
    parts: list[tuple[Ints, Ints, Floats, Floats, Bools]] = []
    depth = 0
    while depth < MAX_DEPTH:
        sel = frontier[chain.parent]
        par = chain.parent[sel]
        lo = np.maximum(chain.lo[sel], o_lo[par])
        hi = np.minimum(chain.hi[sel], o_hi[par])
        ok = hi > lo
        if not ok.any():
            break
        row = chain.row[sel][ok]
        parts.append((row, par[ok], lo[ok], hi[ok], chain.remote[sel][ok]))
        on[row], o_lo[row], o_hi[row] = True, lo[ok], hi[ok]
        frontier = np.zeros(n, dtype=np.bool_)
        frontier[row] = True
        depth += 1
    cols = list(zip(*parts, strict=True)) if parts else None
    return _Path(
        row=np.concatenate(cols[0]) if cols else np.zeros(0, np.int64),
        parent=np.concatenate(cols[1]) if cols else np.zeros(0, np.int64),
        lo=np.concatenate(cols[2]) if cols else np.zeros(0, np.float64),
        hi=np.concatenate(cols[3]) if cols else np.zeros(0, np.float64),
        remote=np.concatenate(cols[4]) if cols else np.zeros(0, np.bool_),
        on=on,
        o_lo=o_lo,
        o_hi=o_hi,
        depth=depth,
    )


def _last_by_end(path: _Path, among: Bools, n: int) -> Ints:
    """Per span, the row of its path child (of those in `among`) that ends last; -1."""
    out = np.full(n, -1, dtype=np.int64)
    row, par, hi = path.row[among], path.parent[among], path.hi[among]
    if len(row):
        order = np.lexsort((hi, par))
        last = np.ones(len(order), dtype=np.bool_)
        last[:-1] = par[order][1:] != par[order][:-1]
        out[par[order][last]] = row[order][last]
    return out


def _parent_rows(key: Ints, parent_key: Ints, parent_code: Ints) -> Ints:
    """Each span's parent row in the same trace (the first span with that id), or -1."""
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    if not len(ordered):
        return np.full(len(key), -1, dtype=np.int64)
    at = np.minimum(np.searchsorted(ordered, parent_key), len(ordered) - 1)
    found = (parent_code >= 0) & (ordered[at] == parent_key)
    return np.where(found, order[at], -1).astype(np.int64)


def _ids(spans: pa.Table) -> tuple[Ints, Ints, Ints]:
    """Span and parent ids as codes of one dictionary (-1 for none), and each code's rank
    in the ids' text order (the walk-back's last tie-break, as a sort by span id)."""
    n = spans.num_rows
    both = pa.concat_arrays(
        [
            spans.column("span").combine_chunks().cast(pa.string()),
            spans.column("parent").combine_chunks().cast(pa.string()),
        ]
    )
    encoded = both.dictionary_encode()
    codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    order = pc.sort_indices(encoded.dictionary).to_numpy(zero_copy_only=False)
    rank = np.empty(len(order) + 1, dtype=np.int64)
    rank[order] = np.arange(len(order))
    rank[-1] = -1  # a span without an id (code -1)
    return codes[:n], codes[n:], rank


def _codes(column: pa.ChunkedArray) -> Ints:
    """Text as integer codes (equal text, equal code; null is -1)."""
    encoded = column.combine_chunks().cast(pa.string()).dictionary_encode()
    codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
    return np.asarray(codes, dtype=np.int64)


def _kinds(column: pa.ChunkedArray) -> tuple[Bools, Bools, Bools]:
    """(said client, kind unknown, consumer) per span, decided once per distinct kind."""
    encoded = column.combine_chunks().cast(pa.string()).dictionary_encode()
    text = pc.utf8_trim_whitespace(pc.utf8_lower(encoded.dictionary))
    codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)

    def per_span(values: tuple[str, ...], null: bool) -> Bools:
        flags = pc.is_in(text, value_set=pa.array(values)).to_numpy(zero_copy_only=False)
        out: Bools = np.append(flags.astype(np.bool_), null)[codes]
        return out

    return (
        per_span(_CLIENT_KINDS, False),
        per_span(_UNSPECIFIED, True),
        per_span(_CONSUMER_KINDS, False),
    )


def _floats(column: pa.ChunkedArray) -> Floats:
    return np.asarray(column.to_numpy(), dtype=np.float64)


def _bools(column: pa.ChunkedArray) -> Bools:
    filled = pc.fill_null(column.cast(pa.bool_()), False)
    return np.asarray(filled.to_numpy(), dtype=np.bool_)


def critical_times(spans: Any, backend: Any, attrs: tuple[str, ...]) -> tuple[Any, list[str]]:
    """Spans with `self_ms` = their time on the critical path, `stage_raw` re-attributed.

    `spans` (an engine table) holds PATH_INPUTS and dur_ms, err and the `attrs` columns.
    Returns the same spans (off-path ones with 0 ms) as a table on the engine, and notes
    for the report. Whole traces go through `path_times` a bucket at a time, so memory
    holds at most about BUCKET_SPANS spans whatever the size of the table."""

    kept = ("trace", "span", "parent", "start_ms", "dur_ms", "err", "is_root", *attrs)
    wanted = list(dict.fromkeys((*PATH_INPUTS, *kept)))
    total = int(backend.execute(spans.count()))
    buckets = max(1, -(-total // BUCKET_SPANS))
    if buckets > 1:
        spans = materialize(backend, spans)
    name = f"_tailbudget_path_{uuid.uuid4().hex[:12]}"
    depth, table = 0, None
    for bucket in range(buckets):
        part = (
            spans if buckets == 1 else spans.filter((spans.trace.hash() % buckets).abs() == bucket)
        )
        batch = backend.to_pyarrow(part.select(*wanted))
        found = path_times(batch)
        depth = max(depth, found.depth)
        out = batch.select(list(kept))
        out = out.append_column("stage_raw", found.stage_raw.cast(pa.string()))
        out = out.append_column("self_ms", pa.array(found.self_ms, pa.float64()))
        table = _store(backend, name, out, table)
    notes = [
        "stages = time on each trace's critical path (the chain of spans that determines when "
        "the root ends; each ms counted once, so stages add up to the total); a client span's "
        "time its callee does not cover (network, queueing) is the callee's"
    ]
    if depth >= MAX_DEPTH:
        notes.append(f"spans deeper than {MAX_DEPTH} levels are left off the critical path")
    return table, notes


def _store(backend: Any, name: str, batch: pa.Table, table: Any) -> Any:
    """The bucket's spans added to the result table on the engine (created by the first);
    on DuckDB a temporary table it may spill, elsewhere the engine's own copy."""

    if engine_name(backend) != "duckdb":
        part = arrow_table(backend, batch)
        return materialize(backend, part if table is None else table.union(part, distinct=False))
    con = backend.con
    view = f"{name}_in"
    con.register(view, batch)
    try:
        if table is None:
            con.execute(f'CREATE TEMP TABLE "{name}" AS SELECT * FROM "{view}"')
        else:
            con.execute(f'INSERT INTO temp.main."{name}" SELECT * FROM "{view}"')
    finally:
        con.unregister(view)
    return backend.table(name) if table is None else table
