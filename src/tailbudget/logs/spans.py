"""Span tables -> one request per trace, stages by self time, on the engine.

A trace's root span (no parent, or parent "root"/"0...") gives the request's
total and timestamp. Every span contributes its self time - its duration
minus the union of its children's intervals (clipped to the span) - to the
stage named by its operation (or service). The union is computed with a
running max over children ordered by start, so nested and overlapping calls
are never counted twice inside one parent. The top stages by total self
time are kept, the rest are summed into `other`.

With start times, stages default to critical-path time instead
(logs/critical_path.py); `ReadOptions(span_attribution="self")` keeps self
time. Only negligible stages are folded into `other` (logs/span_stages.py).

The spans come here normalised, as the span model's table (`span_model.SPAN_TABLE`): a
span table's columns by `logs.span_table` on the engine, a trace file's spans by the span
model's own `normalise()` (`logs.trace_rows`). One roll-up serves both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import ibis
import ibis.expr.datatypes as dt

from tailbudget.errors import LogError
from tailbudget.logs.canonical import (
    SPAN_REASONS,
    canonicalize,
    epoch_to_timestamp,
    materialize,
)
from tailbudget.logs.columns import engine_columns
from tailbudget.logs.critical_path import critical_times
from tailbudget.logs.engine import arrow_result, capped_memory
from tailbudget.logs.options import ReadOptions
from tailbudget.logs.span_model import ROOT_PARENTS
from tailbudget.logs.span_profile import span_profile
from tailbudget.logs.span_stages import choose_stages
from tailbudget.logs.span_table import SpanColumns, normalise_table, span_columns, strip_replica
from tailbudget.logs.table import LogTable
from tailbudget.logs.trace_rows import ATTR

__all__ = [
    "ROOT_PARENTS",
    "SpanColumns",
    "read_span_rows",
    "read_span_table",
    "span_columns",
    "strip_replica",
]

SPAN_MEMORY_LIMIT = "256MB"
"""DuckDB's memory while spans become requests (the joins of self time and critical path)."""


def read_span_table(
    raw: Any,
    cols: SpanColumns,
    options: ReadOptions,
    backend: Any,
    source: str,
    *,
    fmt: str = "spans",
    notes: tuple[str, ...] = (),
) -> LogTable:
    """Canonical requests from a span table (any engine).

    On DuckDB the roll-up runs under SPAN_MEMORY_LIMIT unless TAILBUDGET_MEMORY_LIMIT is
    set: its joins spill past it, so the peak stays flat whatever the number of spans.
    """
    with capped_memory(backend, SPAN_MEMORY_LIMIT):
        extra_notes = list(notes)
        spans, timed, offset_ms = normalise_table(raw, cols, options, source, extra_notes)
        spans, rejected = _split_untimed(spans, backend, extra_notes)
        spans = spans.mutate(
            is_root=spans.parent.isnull() | spans.parent.lower().isin(ROOT_PARENTS),
        )
        read = _Read(options, backend, source, fmt, timed, offset_ms)
        return _requests(spans, rejected, read, extra_notes)


def read_span_rows(
    spans: Any, offset_ms: float, options: ReadOptions, backend: Any, source: str, *, fmt: str
) -> LogTable:
    """Canonical requests from a span table the span model normalised (a trace file's,
    `logs.trace_rows`): timed, its faults' rows marked `bad`, times in ms from `offset_ms`.
    The roll-up is the one `read_span_table` runs, under the same memory cap."""
    with capped_memory(backend, SPAN_MEMORY_LIMIT):
        notes: list[str] = []
        spans, rejected = _split_untimed(spans, backend, notes)
        read = _Read(options, backend, source, fmt, True, offset_ms)
        return _requests(spans, rejected, read, notes)


@dataclass(frozen=True)
class _Read:
    """What a roll-up of spans into requests is told besides the spans."""

    options: ReadOptions
    backend: Any
    source: str
    fmt: str
    timed: bool
    offset_ms: float
    """The epoch (ms) that the spans' start_ms and end_ms are relative to."""


def _requests(spans: Any, rejected: Any, read: _Read, extra_notes: list[str]) -> LogTable:
    """One request per trace of `spans` (normalised, `is_root` set), the traces in
    `rejected` (None: none) as rejected rows with their reason."""
    options, backend, source, timed = read.options, read.backend, read.source, read.timed
    selfs, what = _stage_times(spans, timed, options, backend, extra_notes)
    choice = choose_stages(selfs, backend, options)
    if not choice.keep and rejected is not None:
        said = next(n for n in extra_notes if n.startswith("spans that cannot be timed"))
        raise LogError(f"{source}: no trace has spans that can all be timed; {said}")
    if not choice.keep:
        raise LogError(f"{source}: the span table has no spans")
    keep, rest = list(choice.keep), list(choice.rest)
    # Each stage keeps its span's name; its column on the engine is a safe identifier.
    names = engine_columns(keep, ["other_ms", "total_ms", "n_roots", "n_spans", "error"])
    extra_notes.extend(choice.notes)

    aggs = _trace_aggregates(selfs, names, keep, bool(rest), timed, options)
    per_trace = selfs.group_by(request_id=selfs.trace).aggregate(**aggs)
    if timed:
        start = per_trace.start_ms + ibis.literal(read.offset_ms, dt.float64)
        per_trace = per_trace.mutate(ts=epoch_to_timestamp(start)).drop("start_ms")
    reasons: tuple[tuple[str, Any], ...] = ()
    if rejected is not None:
        per_trace = _with_rejected(per_trace, rejected)
        reasons = tuple((r, per_trace.span_reason == r) for r in SPAN_REASONS)
    stage_map = dict(names)
    if rest:
        lower = {n.lower() for n in names}
        stage_map["other" if "other" not in lower else "other spans"] = "other_ms"
    opts = ReadOptions(
        total="total_ms",
        stages=stage_map,
        timestamp="ts" if timed else None,
        request_id="request_id",
        error="error",
        shape=tuple(_column_name(n) for n in options.shape),
        cohorts=tuple(_column_name(n) for n in options.cohorts),
    )
    extra_notes.append(
        f"one request per trace: total = root span duration, stages = {options.span_stage} "
        f"{what}; traces without a root span are rejected as missing_total"
    )
    table = canonicalize(
        per_trace,
        opts,
        backend=backend,
        source=source,
        fmt=read.fmt,
        notes=tuple(extra_notes),
        extras=("n_spans", "n_roots"),
        cache=True,
        reasons=reasons,
    )
    profile = None
    if timed and options.span_profile:
        profile = span_profile(spans, backend)
    return replace(
        table,
        attribution="critical_path" if what.startswith("critical") else "self",
        span_profile=profile,
    )


def _stage_times(
    spans: Any, timed: bool, options: ReadOptions, backend: Any, notes: list[str]
) -> tuple[Any, str]:
    """Each span's time that counts for its stage (critical path, else self time), stored on
    the engine, and what that time is, in words."""
    attrs = tuple(c for c in spans.columns if c.startswith(ATTR))
    if timed and options.span_attribution == "critical_path":
        # Stored on the engine by critical_times: the stage ranking and the pivot read it.
        selfs, cp_notes = critical_times(spans, backend, attrs)
        notes.extend(cp_notes)
        return selfs, "critical-path time"
    # Computed once: both the stage ranking and the per-trace pivot read it.
    selfs = materialize(backend, _self_times(spans, timed))
    if options.span_attribution == "critical_path":
        notes.append("spans have no start times: no critical path, stages are self time")
    if not timed:
        notes.append(
            "spans have no start times: a span's self time is its duration minus the sum "
            "of its children's durations"
        )
    return selfs, "self time (span minus the union of its children)"


def _trace_aggregates(
    selfs: Any,
    names: dict[str, str],
    keep: list[str],
    rest: bool,
    timed: bool,
    options: ReadOptions,
) -> dict[str, Any]:
    """One row per trace: each kept stage's ms, the rest, the root's total, error and start."""
    zero = ibis.literal(0.0)
    aggs: dict[str, Any] = {}
    for raw_name, column in names.items():
        aggs[column] = ibis.ifelse(selfs.stage_raw == raw_name, selfs.self_ms, zero).sum()
    if rest:
        aggs["other_ms"] = ibis.ifelse(selfs.stage_raw.isin(keep), zero, selfs.self_ms).sum()
    aggs["total_ms"] = ibis.ifelse(selfs.is_root, selfs.dur_ms, ibis.null(dt.float64)).max()
    aggs["n_roots"] = selfs.is_root.cast(dt.int64).sum()
    aggs["n_spans"] = selfs.count()
    aggs["error"] = ibis.ifelse(selfs.is_root & selfs.err, 1, 0).max()
    if timed:
        aggs["start_ms"] = ibis.ifelse(selfs.is_root, selfs.start_ms, ibis.null(dt.float64)).min()
    for i, name in enumerate((*options.shape, *options.cohorts)):
        # A request's attribute: the root span's value, else any span's.
        value = selfs[f"{ATTR}{i}"]
        aggs[_column_name(name)] = ibis.coalesce(
            ibis.ifelse(selfs.is_root, value, ibis.null(value.type())).max(), value.max()
        )
    return aggs


def _split_untimed(spans: Any, backend: Any, notes: list[str]) -> tuple[Any, Any]:
    """(the spans of traces every span of which can be timed, the other traces with
    the first reason and their span count; None when there are none)."""
    bad = spans.filter(spans.bad.notnull())
    found = materialize(
        backend, bad.group_by(trace=bad.trace).aggregate(reason=bad.bad.min(), n=bad.count())
    )
    tally = arrow_result(found.group_by("reason").aggregate(n=found.n.sum()), backend)
    if not tally.num_rows:
        return spans.drop("bad"), None
    counts = dict(zip(tally["reason"].to_pylist(), tally["n"].to_pylist(), strict=True))
    shown = ", ".join(f"{counts[r]:,} {r}" for r in SPAN_REASONS if r in counts)
    notes.append(
        f"spans that cannot be timed or placed ({shown}): their traces are rejected rows, "
        "never a 0 ms request or one merged trace"
    )
    good = spans.filter(spans.bad.isnull())
    good = good.anti_join(found, good.trace == found.trace).drop("bad")
    return good, found


def _with_rejected(per_trace: Any, rejected: Any) -> Any:
    """`per_trace` with one row per rejected trace (every figure null, its reason set)."""
    fill = {name: ibis.null(typ) for name, typ in per_trace.schema().items()}
    fill["request_id"] = rejected.trace.fill_null("(no trace id)")
    bad = rejected.select(**fill, span_reason=rejected.reason)
    return per_trace.mutate(span_reason=ibis.null(dt.string)).union(bad)


def _column_name(name: str) -> str:
    """Attribute keys such as gen_ai.usage.output_tokens as engine-safe column names."""
    return re.sub(r"[^0-9A-Za-z_]+", "_", name)


def _self_times(spans: Any, timed: bool) -> Any:
    """Spans with self_ms = duration minus the union of children's (clipped) intervals."""
    parents = spans.select(
        p_trace=spans.trace,
        p_span=spans.span,
        p_start=spans.start_ms,
        p_end=spans.end_ms,
        p_dur=spans.dur_ms,
    )
    kids = spans.filter(spans.parent.notnull())
    joined = kids.join(parents, (kids.trace == parents.p_trace) & (kids.parent == parents.p_span))
    if timed:
        clipped = joined.select(
            trace=joined.trace,
            parent=joined.parent,
            c_start=ibis.greatest(joined.start_ms, joined.p_start),
            c_end=ibis.least(joined.end_ms, joined.p_end),
        )
        clipped = clipped.filter(clipped.c_end > clipped.c_start)
        window = ibis.window(
            group_by=[clipped.trace, clipped.parent],
            order_by=[clipped.c_start, clipped.c_end],
            rows=(None, -1),
        )
        reach = clipped.c_end.max().over(window)
        piece = clipped.c_end - ibis.greatest(
            clipped.c_start, ibis.coalesce(reach, clipped.c_start)
        )
        pieces = clipped.mutate(piece=ibis.greatest(piece, 0.0))
        covered = pieces.group_by(c_trace=pieces.trace, c_parent=pieces.parent).aggregate(
            covered=pieces.piece.sum()
        )
    else:
        covered = joined.group_by(c_trace=joined.trace, c_parent=joined.parent).aggregate(
            covered=joined.dur_ms.sum()
        )
    out = spans.left_join(
        covered, (spans.trace == covered.c_trace) & (spans.span == covered.c_parent)
    )
    self_ms = ibis.greatest(out.dur_ms - out.covered.fill_null(0.0), 0.0)
    return out.select(
        "trace",
        "span",
        "parent",
        "stage_raw",
        "start_ms",
        "dur_ms",
        "err",
        "is_root",
        *(c for c in spans.columns if c.startswith(ATTR)),
        self_ms=self_ms,
    )
