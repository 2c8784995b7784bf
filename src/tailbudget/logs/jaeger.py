"""Jaeger JSON traces -> the span model's rows: `{"data": [{"spans": [...], "processes":
{...}}]}` from its query API or UI export, one document or one a line."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from tailbudget.errors import LogError
from tailbudget.logs.json_fields import int_or_none, parse, text
from tailbudget.logs.trace_rows import FileItem, file_item, own_fields

__all__ = ["jaeger_file", "jaeger_spans"]


def jaeger_file(path: str, keys: Sequence[str]) -> Iterator[FileItem]:
    """The spans of every Jaeger document in the file at `path`."""
    for doc in _documents(path):
        yield from jaeger_spans(doc, path, keys)


def jaeger_spans(doc: Any, path: str, keys: Sequence[str] = ()) -> Iterator[FileItem]:
    """The span model's rows (or faults) of one Jaeger JSON document."""
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
            if isinstance(span, dict):
                yield _item(span, trace, processes, keys)


def _item(
    span: dict[str, Any], trace: dict[str, Any], processes: dict[str, Any], keys: Sequence[str]
) -> FileItem:
    start_us = int_or_none(span.get("startTime"))
    duration_us = int_or_none(span.get("duration"))
    process = processes.get(str(span.get("processID")), span.get("process")) or {}
    service = process.get("serviceName") if isinstance(process, dict) else None
    tags = {t.get("key"): t.get("value") for t in span.get("tags") or [] if isinstance(t, dict)}
    parent, ref_type = _parent(span)
    fields = (
        text(span.get("spanID")) or "",
        parent or "",
        text(span.get("operationName")) or "unknown",
        text(service) or "unknown",
        _error(span),
        text(tags.get("span.kind")) or "",
    )
    trace_id = text(span.get("traceID") or trace.get("traceID"))
    start = _ns(start_us)
    end = None if start_us is None or duration_us is None else _ns(start_us + duration_us)
    attrs: tuple[str | None, ...] = ()
    if keys:
        attrs = tuple(text(tags.get(k)) for k in keys)
        attrs = own_fields(keys, attrs, trace_id, start, end, fields, ref_type)
    return file_item(trace_id, start, end, fields, ref_type == "FOLLOWS_FROM", attrs)


def _ns(us: int | None) -> int | None:
    """Microseconds as int64 nanoseconds; None past int64 (the span is then untimed)."""
    if us is None:
        return None
    ns = us * 1000
    return ns if -(2**63) <= ns < 2**63 else None


def _parent(span: dict[str, Any]) -> tuple[str | None, str | None]:
    """The parent's span id and how the span refers to it (a CHILD_OF reference first)."""
    refs = [r for r in span.get("references") or [] if isinstance(r, dict)]
    for kind in ("CHILD_OF", "FOLLOWS_FROM"):
        for ref in refs:
            if ref.get("refType") == kind and ref.get("spanID"):
                return text(ref["spanID"]), kind
    return text(span.get("parentSpanID")), None


def _error(span: dict[str, Any]) -> bool:
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
            head = parse(first)
            if head is None:
                # Not a whole document on its first line: one (pretty-printed) document.
                fh.seek(0)
                whole = parse(fh.read())
                if whole is None:
                    raise LogError(f"{path}: not valid JSON (OTLP or Jaeger traces expected)")
                yield whole
                return
            yield head
            for number, line in enumerate(fh, 2):
                if not line.strip():
                    continue
                doc = parse(line)
                if doc is None:
                    raise LogError(f"{path}: line {number} is not valid JSON")
                yield doc
    except OSError as exc:
        raise LogError(f"{path}: cannot read ({exc.strerror or exc})") from exc
