"""OTLP JSON and Jaeger JSON traces -> the span model's rows -> requests (see spans.py).

OTLP JSON: `{"resourceSpans": [{"resource": {...}, "scopeSpans": [{"spans":
[...]}]}]}` as the OTLP/HTTP JSON encoding, protobuf's json_format (camelCase
or snake_case field names, ids hex or base64) and the Collector's file
exporter (one such object per line) write it. Jaeger JSON: `{"data": [{
"spans": [...], "processes": {...}}]}` from its query API or UI export.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import orjson
import pyarrow as pa

from tailbudget.errors import LogError
from tailbudget.logs.options import ReadOptions
from tailbudget.logs.otlp_stream import stream_otlp_spans
from tailbudget.logs.span_file import SpanFile
from tailbudget.logs.span_model import SPAN_SCHEMA
from tailbudget.logs.spans import SpanColumns, read_span_table
from tailbudget.logs.table import LogTable

__all__ = [
    "FILE_SCHEMA",
    "SPAN_COLUMNS",
    "SPAN_SCHEMA",
    "jaeger_spans",
    "otlp_spans",
    "read_trace_json",
]

SPAN_COLUMNS = SpanColumns(
    trace="trace_id",
    span="span_id",
    parent="parent_id",
    name="name",
    service="service",
    start="start_ns",
    end="end_ns",
    duration=None,
    status="error",
    kind="kind",
    ref_type="ref_type",
)
"""The roles of the span model's fields (and a Jaeger file's `ref_type`) in a file's table."""
FILE_SCHEMA = pa.schema(
    [*(f for f in SPAN_SCHEMA if f.name != "label"), pa.field("ref_type", pa.string())]
)
"""A trace file's span table: the span model's row (but `label`: a file's classes are its
spans' attributes, beside these columns) and how a Jaeger span refers to its parent."""


CHUNK_ROWS = 10_000
"""Span rows turned into one Arrow batch (and Parquet row group) at a time."""

LINE_LIMIT = 8 << 20
"""Bytes of one Collector line parsed whole; a longer line (a minified document) streams."""


def read_trace_json(
    files: Sequence[str], fmt: str, options: ReadOptions, backend: Any, label: str
) -> LogTable:
    """Read OTLP or Jaeger JSON trace files into requests.

    OTLP is streamed: a Collector file (one object a line) a line at a time, a single
    document (pretty-printed or minified, of any size) token by token. Span rows go to
    a temporary Parquet file a chunk at a time, and the engine computes every trace's
    stages from that file, so memory holds one chunk of spans whatever the file's
    size. A Jaeger document is parsed whole.
    """
    keys = (*options.shape, *options.cohorts)
    schema = FILE_SCHEMA
    for key in options.shape:
        schema = schema.append(pa.field(key, pa.float64()))
    for key in options.cohorts:
        schema = schema.append(pa.field(key, pa.string()))
    with SpanFile(schema, CHUNK_ROWS) as sink:
        for path in files:
            for row in _otlp_file(path, keys) if fmt == "otlp" else _jaeger_file(path, keys):
                sink.add(_typed(row, options))
        if not sink.rows:
            raise LogError(f"{label}: the {fmt} file holds no spans")
        table = sink.table(backend)
        # Inside the block: the requests are computed on the engine before the file goes.
        return read_span_table(table, SPAN_COLUMNS, options, backend, label, fmt=fmt)


def otlp_spans(doc: Any, path: str, keys: Sequence[str] = ()) -> Iterator[dict[str, Any]]:
    """Span rows (the span model's fields by name) from one OTLP JSON TracesData object."""
    if not isinstance(doc, dict):
        raise LogError(f"{path}: OTLP JSON must be an object with 'resourceSpans'")
    for resource_spans in _list(doc, "resourceSpans", "resource_spans"):
        resource = _get(resource_spans, "resource") or {}
        service = _service(resource)
        scopes = _list(resource_spans, "scopeSpans", "scope_spans") or _list(
            resource_spans, "instrumentationLibrarySpans", "instrumentation_library_spans"
        )
        for scope in scopes:
            for span in _list(scope, "spans"):
                yield _otlp_row(span, resource, service, keys)


def _otlp_row(span: Any, resource: Any, service: str, keys: Sequence[str]) -> dict[str, Any]:
    status = _get(span, "status") or {}
    code = _get(status, "code") if isinstance(status, dict) else None
    attrs = {k: _attribute(span, k) or _attribute(resource, k) for k in keys}
    return {
        **attrs,
        "trace_id": _text(_get(span, "traceId", "trace_id")),
        "span_id": _text(_get(span, "spanId", "span_id")),
        "parent_id": _text(_get(span, "parentSpanId", "parent_span_id")),
        "name": _text(_get(span, "name")) or "unknown",
        "service": service,
        "start_ns": _int(_get(span, "startTimeUnixNano", "start_time_unix_nano")),
        "end_ns": _int(_get(span, "endTimeUnixNano", "end_time_unix_nano")),
        "error": code in (2, "2", "STATUS_CODE_ERROR", "ERROR"),
        "kind": _text(_get(span, "kind")),
        "ref_type": None,
    }


def _service(resource: Any) -> str:
    return _attribute(resource, "service.name") or "unknown"


def _otlp_file(path: str, keys: Sequence[str]) -> Iterator[dict[str, Any]]:
    """Span rows of one OTLP file: Collector lines parsed one at a time while they are
    short; from the first line that is not a whole object (a pretty-printed document)
    or is longer than LINE_LIMIT (a minified one), the rest is streamed."""
    try:
        with open(path, "rb") as fh:
            number, parsed = 0, False
            while True:
                offset = fh.tell()
                line = fh.readline(LINE_LIMIT)
                number += 1
                if not line:
                    return
                if not line.strip():
                    continue
                whole = line.endswith(b"\n") or len(line) < LINE_LIMIT
                doc = _parse(line) if whole else None
                if doc is None and whole and parsed:
                    # A Collector file with a broken line: name it.
                    raise LogError(f"{path}: line {number} is not valid JSON")
                if doc is None:
                    fh.seek(offset)
                    yield from _streamed(fh, path, keys)
                    return
                parsed = True
                yield from otlp_spans(doc, path, keys)
    except OSError as exc:
        raise LogError(f"{path}: cannot read ({exc.strerror or exc})") from exc


def _streamed(fh: Any, path: str, keys: Sequence[str]) -> Iterator[dict[str, Any]]:
    last: Any = _streamed  # no resource yet: a sentinel no resource can be
    service = "unknown"
    for span, resource in stream_otlp_spans(fh, path):
        if resource is not last:  # one service lookup per resource, not per span
            last, service = resource, _service(resource or {})
        yield _otlp_row(span, resource or {}, service, keys)


def _jaeger_file(path: str, keys: Sequence[str]) -> Iterator[dict[str, Any]]:
    for doc in _documents(path):
        yield from jaeger_spans(doc, path, keys)


def jaeger_spans(doc: Any, path: str, keys: Sequence[str] = ()) -> Iterator[dict[str, Any]]:
    """Span rows (the span model's fields by name) from one Jaeger JSON document."""
    traces = doc.get("data") if isinstance(doc, dict) else doc
    if isinstance(doc, dict) and traces is None and "spans" in doc:
        traces = [doc]
    if not isinstance(traces, list):
        raise LogError(f"{path}: Jaeger JSON must hold a 'data' list of traces")
    for trace in traces:
        if not isinstance(trace, dict):
            continue
        found = trace.get("processes")
        processes: dict[str, Any] = found if isinstance(found, dict) else {}
        for span in trace.get("spans") or []:
            if not isinstance(span, dict):
                continue
            start_us = _int(span.get("startTime"))
            duration_us = _int(span.get("duration"))
            process = processes.get(str(span.get("processID")), span.get("process")) or {}
            service = process.get("serviceName") if isinstance(process, dict) else None
            tags = {
                t.get("key"): t.get("value") for t in span.get("tags") or [] if isinstance(t, dict)
            }
            parent, ref_type = _jaeger_parent(span)
            yield {
                **{k: _text(tags.get(k)) for k in keys},
                "trace_id": _text(span.get("traceID") or trace.get("traceID")),
                "span_id": _text(span.get("spanID")),
                "parent_id": parent,
                "name": _text(span.get("operationName")) or "unknown",
                "service": _text(service) or "unknown",
                "start_ns": _ns(start_us),
                "end_ns": (
                    None if start_us is None or duration_us is None else _ns(start_us + duration_us)
                ),
                "error": _jaeger_error(span),
                "kind": _text(tags.get("span.kind")),
                "ref_type": ref_type,
            }


def _ns(us: int | None) -> int | None:
    """Microseconds as int64 nanoseconds; None past int64 (the span is then untimed)."""
    if us is None:
        return None
    ns = us * 1000
    return ns if -(2**63) <= ns < 2**63 else None


def _typed(row: dict[str, Any], options: ReadOptions) -> dict[str, Any]:
    """Shape attributes as floats (None when not a number), cohorts as text."""
    for key in options.shape:
        try:
            row[key] = float(row[key]) if row.get(key) is not None else None
        except (TypeError, ValueError, OverflowError):
            row[key] = None
    return row


def _jaeger_parent(span: dict[str, Any]) -> tuple[str | None, str | None]:
    """The parent's span id and how the span refers to it (a CHILD_OF reference first)."""
    refs = [r for r in span.get("references") or [] if isinstance(r, dict)]
    for kind in ("CHILD_OF", "FOLLOWS_FROM"):
        for ref in refs:
            if ref.get("refType") == kind and ref.get("spanID"):
                return _text(ref["spanID"]), kind
    return _text(span.get("parentSpanID")), None


def _jaeger_error(span: dict[str, Any]) -> bool:
    for tag in span.get("tags") or []:
        if isinstance(tag, dict) and tag.get("key") == "error":
            return tag.get("value") in (True, "true", "True", 1)
        if isinstance(tag, dict) and tag.get("key") == "otel.status_code":
            return str(tag.get("value")).upper() == "ERROR"
    return False


def _documents(path: str) -> Iterator[Any]:
    """One JSON document (parsed whole), or one per line, parsed a line at a time."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline()
            while first and not first.strip():
                first = fh.readline()
            head = _parse(first)
            if head is None:
                # Not a whole document on its first line: one (pretty-printed) document.
                fh.seek(0)
                whole = _parse(fh.read())
                if whole is None:
                    raise LogError(f"{path}: not valid JSON (OTLP or Jaeger traces expected)")
                yield whole
                return
            yield head
            for number, line in enumerate(fh, 2):
                if not line.strip():
                    continue
                doc = _parse(line)
                if doc is None:
                    raise LogError(f"{path}: line {number} is not valid JSON")
                yield doc
    except OSError as exc:
        raise LogError(f"{path}: cannot read ({exc.strerror or exc})") from exc


def _parse(data: bytes) -> Any:
    """The JSON value in `data`, or None when it is not one (bad syntax, not UTF-8 text)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def _attribute(holder: Any, key: str) -> str | None:
    for attr in _list(holder, "attributes"):
        if isinstance(attr, dict) and attr.get("key") == key:
            value = attr.get("value")
            if isinstance(value, dict):
                for v in value.values():
                    return _text(v)
            return _text(value)
    return None


def _get(obj: Any, *keys: str) -> Any:
    if not isinstance(obj, dict):
        return None
    for key in keys:
        if key in obj:
            return obj[key]
    return None


def _list(obj: Any, *keys: str) -> list[Any]:
    value = _get(obj, *keys)
    return value if isinstance(value, list) else []


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, dict | list):
        return None
    text = str(value).strip()
    return text or None


def _int(value: Any) -> int | None:
    """An integer (nanoseconds, microseconds) from a JSON number or decimal string."""
    if isinstance(value, bool):
        return None
    try:
        number = int(value) if isinstance(value, int | str) else int(float(value))
    except (TypeError, ValueError, OverflowError):
        return None
    return number if -(2**62) < number < 2**62 else None
