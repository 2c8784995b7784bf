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

from tailbudget.errors import LogError
from tailbudget.logs.jaeger import jaeger_file
from tailbudget.logs.json_fields import attribute, get, int_or_none, items, parse, text
from tailbudget.logs.options import ReadOptions
from tailbudget.logs.otlp_stream import stream_otlp_spans
from tailbudget.logs.span_file import SpanFile
from tailbudget.logs.spans import read_span_rows
from tailbudget.logs.table import LogTable
from tailbudget.logs.trace_rows import (
    FileClock,
    FileItem,
    chunk_table,
    file_item,
    own_fields,
    table_schema,
)

__all__ = ["otlp_spans", "read_trace_json"]

CHUNK_ROWS = 10_000
"""Spans normalised into one Arrow table (and Parquet row group) at a time."""

LINE_LIMIT = 8 << 20
"""Bytes of one Collector line parsed whole; a longer line (a minified document) streams."""


def read_trace_json(
    files: Sequence[str], fmt: str, options: ReadOptions, backend: Any, label: str
) -> LogTable:
    """Read OTLP or Jaeger JSON trace files into requests.

    OTLP is streamed: a Collector file (one object a line) a line at a time, a single
    document (pretty-printed or minified, of any size) token by token. The spans are
    normalised by the span model a chunk at a time, on the file's one clock, into a
    temporary Parquet file, and the engine computes every trace's stages from that
    file, so memory holds one chunk of spans whatever the file's size. A Jaeger
    document is parsed whole.
    """
    keys = (*options.shape, *options.cohorts)
    shape, cohorts = len(options.shape), len(options.cohorts)
    clock = FileClock()
    with SpanFile(table_schema(shape, cohorts)) as sink:
        chunk: list[FileItem] = []
        for path in files:
            for item in _otlp_file(path, keys) if fmt == "otlp" else jaeger_file(path, keys):
                chunk.append(item)
                if len(chunk) >= CHUNK_ROWS:
                    sink.write(chunk_table(chunk, clock, options.span_stage, shape, cohorts))
                    chunk = []
        if chunk:
            sink.write(chunk_table(chunk, clock, options.span_stage, shape, cohorts))
        if not sink.rows:
            raise LogError(f"{label}: the {fmt} file holds no spans")
        table = sink.table(backend)
        # Inside the block: the requests are computed on the engine before the file goes.
        return read_span_rows(table, clock.offset_ms, options, backend, label, fmt=fmt)


def otlp_spans(doc: Any, path: str, keys: Sequence[str] = ()) -> Iterator[FileItem]:
    """The span model's rows (or faults) of one OTLP JSON TracesData object."""
    if not isinstance(doc, dict):
        raise LogError(f"{path}: OTLP JSON must be an object with 'resourceSpans'")
    for resource_spans in items(doc, "resourceSpans", "resource_spans"):
        resource = get(resource_spans, "resource") or {}
        service = _service(resource)
        scopes = items(resource_spans, "scopeSpans", "scope_spans") or items(
            resource_spans, "instrumentationLibrarySpans", "instrumentation_library_spans"
        )
        for scope in scopes:
            for span in items(scope, "spans"):
                yield _otlp_item(span, resource, service, keys)


def _otlp_item(span: Any, resource: Any, service: str, keys: Sequence[str]) -> FileItem:
    status = get(span, "status") or {}
    code = get(status, "code") if isinstance(status, dict) else None
    fields = (
        text(get(span, "spanId", "span_id")) or "",
        text(get(span, "parentSpanId", "parent_span_id")) or "",
        text(get(span, "name")) or "unknown",
        service,
        code in (2, "2", "STATUS_CODE_ERROR", "ERROR"),
        text(get(span, "kind")) or "",
    )
    trace = text(get(span, "traceId", "trace_id"))
    start = int_or_none(get(span, "startTimeUnixNano", "start_time_unix_nano"))
    end = int_or_none(get(span, "endTimeUnixNano", "end_time_unix_nano"))
    attrs: tuple[str | None, ...] = ()
    if keys:
        attrs = tuple(attribute(span, k) or attribute(resource, k) for k in keys)
        attrs = own_fields(keys, attrs, trace, start, end, fields, None)
    return file_item(trace, start, end, fields, False, attrs)


def _service(resource: Any) -> str:
    return attribute(resource, "service.name") or "unknown"


def _otlp_file(path: str, keys: Sequence[str]) -> Iterator[FileItem]:
    """The spans of one OTLP file: Collector lines parsed one at a time while they are
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
                doc = parse(line) if whole else None
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


def _streamed(fh: Any, path: str, keys: Sequence[str]) -> Iterator[FileItem]:
    last: Any = _streamed  # no resource yet: a sentinel no resource can be
    service = "unknown"
    for span, resource in stream_otlp_spans(fh, path):
        if resource is not last:  # one service lookup per resource, not per span
            last, service = resource, _service(resource or {})
        yield _otlp_item(span, resource or {}, service, keys)
