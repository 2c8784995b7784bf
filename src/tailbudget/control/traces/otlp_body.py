"""OTLP/HTTP trace bodies -> span rows, as the Collector's `otlphttp` exporter and the SDKs
send them: `application/x-protobuf` or `application/json`, gzip or not.

JSON goes through the file reader's own span parser (`logs.traces.otlp_spans`), protobuf
through opentelemetry-proto's generated classes; both give the same `SpanRow`. A span
without a trace id, a span id or a start time, or (unless it is a root) an end, is
rejected and counted: the response says so as OTLP's partial success.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from sys import intern
from typing import Any, NamedTuple

import orjson

from tailbudget.control.service.limits import BodyLimits, TooLarge, decompress
from tailbudget.errors import TailbudgetError

__all__ = [
    "BadTraces",
    "Decoded",
    "SpanRow",
    "decode_traces",
    "export_response",
    "protobuf_spans",
]

_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"


class SpanRow(NamedTuple):
    """One span as the assembler holds it (ids as lower-case hex; times in ns)."""

    trace: str
    span: str
    parent: str
    name: str
    service: str
    start_ns: int
    end_ns: int
    error: bool
    kind: str


class BadTraces(TailbudgetError):
    """A body that is not an OTLP trace export (400), in an encoding not taken (415), or
    one the receiver has no room for now (503: OTLP exporters retry it)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Decoded:
    """The spans of one request and what was rejected from it."""

    spans: list[SpanRow] = field(default_factory=list)
    accepted: int = 0
    """Spans taken: `len(spans)`, or (a protobuf request decoded without rows) counted."""
    rejected: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    protobuf: bytes | None = None
    """The request's protobuf (decompressed): what the span log keeps of it, since
    decoding it again gives the same spans (`protobuf_spans`)."""

    def reject(self, reason: str) -> None:
        self.rejected += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1


def decode_traces(
    body: bytes,
    content_type: str | None,
    encoding: str | None,
    limits: BodyLimits | None = None,
    *,
    rows: bool = True,
) -> Decoded:
    """The span rows of one POST /v1/traces body (decoded within `limits`).

    `rows=False`: a protobuf body's spans are checked and counted, not made rows (its
    `protobuf` gives them later, for about a third of the cost now)."""
    kind = (content_type or _PROTOBUF).split(";")[0].strip().lower()
    if kind not in (_PROTOBUF, _JSON):
        raise BadTraces(
            f"content type {kind!r}: send application/x-protobuf or application/json", 415
        )
    data = _inflate(body, encoding or "identity", limits or BodyLimits())
    out = Decoded()
    if kind == _JSON:
        _json_rows(data, out)
    else:
        _proto_rows(data, out, rows=rows)
        out.protobuf = data
    if rows or kind == _JSON:
        out.accepted = len(out.spans)
    return out


def protobuf_spans(data: bytes) -> list[SpanRow]:
    """The spans `decode_traces` accepted from this ExportTraceServiceRequest."""
    out = Decoded()
    _proto_rows(data, out)
    return out.spans


def _inflate(body: bytes, encoding: str, limits: BodyLimits) -> bytes:
    """Serve's own decoding (control/service/limits.py): gzip, deflate or zstd, bounded."""
    try:
        return decompress(body, encoding, limits)
    except TooLarge as exc:
        raise BadTraces(str(exc), 413) from None
    except ValueError as exc:
        status = 415 if "is not read" in str(exc) else 400
        raise BadTraces(str(exc), status) from None


def _add(out: Decoded, row: SpanRow) -> None:
    if not row.trace or set(row.trace) == {"0"}:
        out.reject("no_trace_id")
    elif not row.span or set(row.span) == {"0"}:
        out.reject("no_span_id")
    elif row.start_ns <= 0:
        out.reject("no_start")
    elif row.end_ns < row.start_ns and (row.parent or row.end_ns != 0):
        # A root may come without its end (it never ended): held, counted incomplete.
        out.reject("no_end")
    else:
        out.spans.append(row)


def _proto_rows(data: bytes, out: Decoded, *, rows: bool = True) -> None:
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(data)
    except DecodeError as exc:
        raise BadTraces(f"not an OTLP ExportTraceServiceRequest ({exc})") from None
    for resource_spans in request.resource_spans:
        service = "unknown"
        for attr in resource_spans.resource.attributes:
            if attr.key == "service.name":
                service = intern(attr.value.string_value or "unknown")
        for scope in resource_spans.scope_spans:
            if rows:
                _proto_spans(scope.spans, service, out)
            else:
                _proto_check(scope.spans, out)


def _missing(span_id: bytes) -> bool:
    """Empty or all zero bytes (a random id's first byte is seldom zero: few strips)."""
    return not span_id or (span_id[0] == 0 and not span_id.strip(b"\0"))


def _proto_check(spans: Any, out: Decoded) -> None:
    """`_proto_spans`' checks and count, no rows."""
    for span in spans:
        start, end = span.start_time_unix_nano, span.end_time_unix_nano
        if _missing(span.trace_id):
            out.reject("no_trace_id")
        elif _missing(span.span_id):
            out.reject("no_span_id")
        elif start <= 0:
            out.reject("no_start")
        elif end < start and (end != 0 or not _missing(span.parent_span_id)):
            out.reject("no_end")
        else:
            out.accepted += 1


def _proto_spans(spans: Any, service: str, out: Decoded) -> None:
    """`_add` for protobuf spans, its checks made on the id bytes (the hot loop)."""
    keep = out.spans.append
    row = tuple.__new__  # SpanRow's own __new__ takes keywords: twice the cost a span
    names: dict[str, str] = {}  # a handful of names, many spans: one string each
    traces: dict[bytes, str] = {}  # and one trace id string for all of a trace's spans
    for span in spans:
        trace, sid, parent = span.trace_id, span.span_id, span.parent_span_id
        start, end = span.start_time_unix_nano, span.end_time_unix_nano
        # An id is missing when empty or all zero bytes; a random id's first byte is
        # seldom zero, so the full check (a strip) runs for few spans.
        has_parent = bool(parent) and (parent[0] != 0 or bool(parent.strip(b"\0")))
        if not trace or (trace[0] == 0 and not trace.strip(b"\0")):
            out.reject("no_trace_id")
        elif not sid or (sid[0] == 0 and not sid.strip(b"\0")):
            out.reject("no_span_id")
        elif start <= 0:
            out.reject("no_start")
        elif end < start and (has_parent or end != 0):
            out.reject("no_end")  # a root may come without its end: held, counted incomplete
        else:
            name, kind = span.name or "unknown", span.kind
            keep(
                row(
                    SpanRow,
                    (
                        traces.get(trace) or traces.setdefault(trace, trace.hex()),
                        sid.hex(),
                        parent.hex() if has_parent else "",
                        names.get(name) or names.setdefault(name, intern(name)),
                        service,
                        start,
                        end,
                        span.status.code == 2,
                        _KINDS[kind] if 0 <= kind < len(_KINDS) else str(kind),
                    ),
                )
            )


def _json_rows(data: bytes, out: Decoded) -> None:
    from tailbudget.logs.traces import otlp_spans

    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise BadTraces(f"not JSON ({exc})") from None
    try:
        rows = list(otlp_spans(doc, "the body"))
    except TailbudgetError as exc:
        raise BadTraces(str(exc)) from None
    for row in rows:
        _add(out, _json_row(row))


def _json_row(row: dict[str, Any]) -> SpanRow:
    parent = (row.get("parent_id") or "").lower()
    return SpanRow(
        (row.get("trace_id") or "").lower(),
        (row.get("span_id") or "").lower(),
        "" if set(parent) == {"0"} else parent,
        intern(row.get("name") or "unknown"),
        intern(row.get("service") or "unknown"),
        int(row.get("start_ns") or 0),
        int(row.get("end_ns") or 0),
        bool(row.get("error")),
        _kind(row.get("kind")),
    )


_KINDS = ("0", "1", "2", "3", "4", "5")
_KIND_NUMBERS = {
    "span_kind_internal": "1",
    "span_kind_server": "2",
    "span_kind_client": "3",
    "span_kind_producer": "4",
    "span_kind_consumer": "5",
}


def _kind(value: Any) -> str:
    text = "" if value is None else str(value).strip()
    return _KIND_NUMBERS.get(text.lower(), text or "0")


def export_response(content_type: str | None, decoded: Decoded) -> tuple[bytes, str]:
    """OTLP's ExportTraceServiceResponse in the request's encoding (partial success when
    spans were rejected), and its media type."""
    message = ""
    if decoded.rejected:
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(decoded.reasons.items()))
        message = f"{decoded.rejected} spans rejected ({why})"
    kind = (content_type or _PROTOBUF).split(";")[0].strip().lower()
    if kind == _JSON:
        body: dict[str, Any] = {}
        if decoded.rejected:
            body["partialSuccess"] = {"rejectedSpans": decoded.rejected, "errorMessage": message}
        return orjson.dumps(body), _JSON
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    response = ExportTraceServiceResponse()
    if decoded.rejected:
        response.partial_success.rejected_spans = decoded.rejected
        response.partial_success.error_message = message
    return response.SerializeToString(), _PROTOBUF
