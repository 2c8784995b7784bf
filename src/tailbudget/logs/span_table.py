"""A span table's columns, found by role (trace id, span id, parent, name, service, times,
status, kind, reference), made the span table `logs.spans` rolls up, on the engine.

A table from CSV, Parquet or an engine names and types its columns as it likes: epoch
columns in any unit, durations in the unit their name says, status as a code, a word or a
flag. This reads them in SQL, where the table is (a span table on a remote engine never
comes to memory); it gives the columns the span model's `normalise()` gives a decoder's
rows (`span_model.SPAN_TABLE`, the root flag set by the roll-up), and `bad` for a span
that cannot be timed or placed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import ibis
import ibis.expr.datatypes as dt

from tailbudget.errors import LogError
from tailbudget.logs.options import ReadOptions
from tailbudget.logs.span_model import epoch_ms_per_unit
from tailbudget.logs.trace_rows import ATTR

__all__ = ["SpanColumns", "normalise_table", "span_columns", "strip_replica"]

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


def normalise_table(
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
    offset_ms = base * epoch_ms_per_unit(abs(base)) if base is not None else 0.0
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
        factor = epoch_ms_per_unit(abs(base))
        return (column - ibis.literal(base, dt.int64)).cast(dt.float64) * factor
    value = column.cast(dt.float64) if typ.is_numeric() else column.try_cast(dt.float64)
    return ibis.cases(
        (value.abs() > 1e17, value / 1e6),
        (value.abs() > 1e14, value / 1e3),
        (value.abs() > 1e11, value),
        else_=value * 1e3,
    )


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
