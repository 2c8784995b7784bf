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

_POD_SUFFIX = r"(-[a-z0-9]{6,10}-[a-z0-9]{5}|-[a-z0-9]{5}|-[0-9]+)$"
_ROLES: dict[str, tuple[str, ...]] = {
    "trace": ("traceid",),
    "span": ("spanid",),
    "parent": ("parentid", "parentspanid", "parent"),
    "name": ("operationname", "spanname", "name", "operation"),
    "service": ("servicename", "service", "podname", "pod", "process"),
    "start": ("starttimeunixnano", "starttime", "startns", "starttimens", "start", "timestamp"),
    "end": ("endtimeunixnano", "endtime", "endns", "endtimens", "end"),
    "duration": (
        "durationns",
        "durationnano",
        "durationus",
        "durationms",
        "durations",
        "duration",
    ),
    "status": ("statuscode", "status", "error", "iserror"),
    "kind": ("spankind", "kind"),
    "ref_type": ("reftype", "referencetype", "parentreftype"),
}


@dataclass(frozen=True)
class SpanColumns:
    """Which columns of a span table hold what (None = absent)."""

    trace: str
    span: str
    parent: str
    name: str | None
    service: str | None
    start: str | None
    end: str | None
    duration: str | None
    status: str | None
    kind: str | None = None
    ref_type: str | None = None
    """FOLLOWS_FROM (an asynchronous child, off its parent's critical path) or CHILD_OF."""


def span_columns(columns: list[str]) -> SpanColumns | None:
    """The span-table roles of `columns`, or None when it is not a span table."""
    norm = {re.sub(r"[^0-9a-z]", "", c.lower()): c for c in columns}
    found = {
        role: next((norm[n] for n in names if n in norm), None) for role, names in _ROLES.items()
    }
    if not (found["trace"] and found["span"] and found["parent"]):
        return None
    if not (found["duration"] or (found["start"] and found["end"])):
        return None
    return SpanColumns(**found)  # type: ignore[arg-type]


def strip_replica(pod: Any) -> Any:
    """Kubernetes pod name -> workload name (drops the ReplicaSet/StatefulSet suffix)."""
    return pod.re_replace(_POD_SUFFIX, "")


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
        spans, timed, offset_ms = _normalise(raw, cols, options, source, extra_notes)
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


def _normalise(
    raw: Any, cols: SpanColumns, options: ReadOptions, source: str, notes: list[str]
) -> tuple[Any, bool, float]:
    """(trace, span, parent, stage_raw, start_ms, end_ms, dur_ms, err), whether timed,
    and the epoch (ms) that start_ms/end_ms are relative to."""
    service = None
    if cols.service is not None:
        service = raw[cols.service].cast(dt.string)
        if re.sub(r"[^0-9a-z]", "", cols.service.lower()) in ("podname", "pod"):
            service = strip_replica(service)
            if options.span_stage == "service":
                notes.append(f"service = {cols.service!r} without the replica suffix")
    if options.span_stage == "service":
        if service is None:
            raise LogError(
                f"{source}: span_stage 'service' needs a service or pod column; "
                f"columns are: {', '.join(raw.columns)}"
            )
        label = service
    elif cols.name is not None:
        label = raw[cols.name].cast(dt.string)
    else:
        raise LogError(f"{source}: the span table has no operation name column (name)")

    base = _epoch_base(raw, cols)
    start = _time_ms(raw[cols.start], base) if cols.start else None
    end = _time_ms(raw[cols.end], base) if cols.end else None
    duration = _duration_ms(raw, cols, options, start, notes) if cols.duration else None
    if start is not None and end is None and duration is not None:
        end = start + duration
    timed = start is not None and end is not None
    if start is not None and end is not None:
        dur = end - start
    elif duration is not None:
        dur = duration
    else:
        raise LogError(f"{source}: spans need start and end times or a duration column")
    if cols.status:
        err = _status(raw[cols.status])
    else:
        err = ibis.literal(False)
        notes.append(
            "the span table has no status column: failed calls (exceptions, error returns) "
            "cannot be told from good ones, only their latency shows"
        )
    parent = raw[cols.parent].cast(dt.string).strip()
    trace = raw[cols.trace].cast(dt.string).strip()
    no_trace = trace.isnull() | trace.re_search(r"^0*$")
    spans = raw.select(
        trace=ibis.ifelse(no_trace, ibis.null(dt.string), trace),
        bad=_untimed(no_trace, start, end if end is not None else duration),
        span=raw[cols.span].cast(dt.string),
        parent=parent.nullif(""),
        stage_raw=label.fill_null("unknown"),
        start_ms=start if start is not None else ibis.null(dt.float64),
        end_ms=end if end is not None else ibis.null(dt.float64),
        dur_ms=ibis.greatest(dur, 0.0),
        err=err,
        service=service if service is not None else ibis.null(dt.string),
        kind=raw[cols.kind].cast(dt.string) if cols.kind else ibis.null(dt.string),
        follows=_follows(raw, cols),
        op_name=raw[cols.name].cast(dt.string).fill_null("unknown") if cols.name else label,
        **_attributes(raw, options, source),
    )
    offset_ms = base * _unit_factor(abs(base)) if base is not None else 0.0
    return spans, timed, offset_ms


def _untimed(no_trace: Any, start: Any, end: Any) -> Any:
    """Why a span cannot be timed or placed (a SPAN_REASONS name), else null.

    A span with no end (or an end past int64) would read as 0 ms and pass; spans
    with no trace id would be merged into one request."""
    cases = [(no_trace, "span_without_trace_id")]
    if start is not None:
        cases.append((start.isnull(), "span_without_start"))
    if end is not None:
        cases.append((end.isnull(), "span_without_end"))
    return ibis.cases(*cases, else_=ibis.null(dt.string))


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


def _follows(raw: Any, cols: SpanColumns) -> Any:
    """True for a child that only follows from its parent (Jaeger's FOLLOWS_FROM)."""
    if cols.ref_type is None:
        return ibis.literal(False)
    text = raw[cols.ref_type].cast(dt.string).upper().strip()
    return text.isin(("FOLLOWS_FROM", "FOLLOWSFROM", "FOLLOWS")).fill_null(False)


def _attributes(raw: Any, options: ReadOptions, source: str) -> dict[str, Any]:
    """Span columns named as shape covariates or cohorts, to carry per request."""
    out: dict[str, Any] = {}
    for i, name in enumerate((*options.shape, *options.cohorts)):
        if name not in raw.columns:
            param = "shape" if i < len(options.shape) else "cohorts"
            raise LogError(
                f"{param}: span attribute or column {name!r} not found in {source}; "
                f"columns are: {', '.join(c for c in raw.columns if not c.startswith(ATTR))}",
                param=param,
            )
        column = raw[name]
        if i < len(options.shape):
            typ = column.type()
            out[f"{ATTR}{i}"] = column if typ.is_numeric() else column.try_cast(dt.float64)
        else:
            out[f"{ATTR}{i}"] = column.cast(dt.string)
    return out


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


def _epoch_base(raw: Any, cols: SpanColumns) -> int | None:
    """An integer epoch near the data, subtracted before going to float.

    Nanosecond epochs (~1.7e18) do not fit a float64 exactly; subtracting
    the first start keeps span durations exact to the nanosecond.
    """
    if cols.start is None or not raw[cols.start].type().is_integer():
        return None
    column = raw[cols.start]
    first = raw.filter(column.notnull()).select(column).limit(1).execute()[cols.start].tolist()
    return int(first[0]) if first and first[0] == first[0] else None


def _time_ms(column: Any, base: int | None) -> Any:
    """Milliseconds from a timestamp column or a numeric epoch of any unit.

    With `base`, integer epochs are taken relative to it (see _epoch_base);
    the caller adds `base` back (in ms) for timestamps.
    """
    typ = column.type()
    if typ.is_timestamp():
        return column.epoch_seconds().cast(dt.float64) * 1000.0 + column.millisecond().cast(
            dt.float64
        )
    if base is not None and typ.is_integer():
        factor = _unit_factor(abs(base))
        return (column - ibis.literal(base, dt.int64)).cast(dt.float64) * factor
    value = column.cast(dt.float64) if typ.is_numeric() else column.try_cast(dt.float64)
    return ibis.cases(
        (value.abs() > 1e17, value / 1e6),
        (value.abs() > 1e14, value / 1e3),
        (value.abs() > 1e11, value),
        else_=value * 1e3,
    )


def _unit_factor(magnitude: float) -> float:
    """ms per unit of an epoch of this magnitude (ns, us, ms or s)."""
    if magnitude > 1e17:
        return 1e-6
    if magnitude > 1e14:
        return 1e-3
    if magnitude > 1e11:
        return 1.0
    return 1e3


def _duration_ms(
    raw: Any, cols: SpanColumns, options: ReadOptions, start: Any, notes: list[str]
) -> Any:
    name = re.sub(r"[^0-9a-z]", "", (cols.duration or "").lower())
    column = raw[cols.duration]
    value = column.cast(dt.float64) if column.type().is_numeric() else column.try_cast(dt.float64)
    if name.endswith(("ns", "nano")):
        unit = "ns"
    elif name.endswith("us"):
        unit = "us"
    elif name.endswith("ms"):
        unit = "ms"
    elif name.endswith("durations"):
        unit = "s"
    elif options.unit is not None:
        unit = options.unit
    elif cols.start is not None and raw[cols.start].type().is_timestamp():
        unit = "ns"  # the OpenTelemetry Collector's ClickHouse otel_traces layout
    else:
        unit = "us"
        if not (cols.start and cols.end):
            notes.append(f"span column {cols.duration!r} assumed in microseconds (set unit if not)")
    factor = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[unit]
    return value * factor


def _status(column: Any) -> Any:
    typ = column.type()
    if typ.is_boolean():
        return column.fill_null(False)
    if typ.is_numeric():
        return (column == 2).fill_null(False)  # OTLP STATUS_CODE_ERROR
    text = column.cast(dt.string).lower()
    return (text.contains("error") | text.isin(("true", "1"))).fill_null(False)
