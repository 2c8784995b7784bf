"""OTLP/HTTP trace bodies -> span rows, as the Collector's `otlphttp` exporter and the SDKs
send them: `application/x-protobuf` or `application/json`, gzip or not.

JSON goes through `otlp_json.json_spans` (the file reader's fields, each type checked),
protobuf through opentelemetry-proto's generated classes; both give the span model's
`SpanRow` (`logs.span_model`), as the trace-file readers do. A span
without a trace id, a span id or a start time, or (unless it is a root) an end, is
rejected and counted: the response says so as OTLP's partial success. So is a span whose
times do not fit int64 (protobuf's fixed64 allows them; attribution could not take
them) and a root that starts further ahead of the server clock than an observation's
`ts` may be (one root in the year 2200 would take the window past every real trace).
Operation and service names are stage names: one that fails the observations' stage
name check (over 100 characters, a control character) becomes `other`, counted. A root
span's attribute named by `class_key` (the budget's `classes.by`) is its trace's class.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from sys import intern
from typing import Any

import orjson

from tailbudget.errors import TailbudgetError
from tailbudget.logs.span_model import SpanRow
from tailbudget.serve.batch import MAX_FUTURE_S, stage_name_problem
from tailbudget.serve.limits import BodyLimits, TooLarge, decompress
from tailbudget.serve.traces.otlp_json import WrongType, json_spans

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
INT64_MAX = 2**63 - 1
"""A span time past this cannot be an Arrow int64 (nor a time before the year 2262)."""
FOLDED = "other"
"""What a span name that cannot be a stage name becomes (the audit's fold)."""


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
    decoding it again at `received_ns` gives the same spans (`protobuf_spans`)."""
    received_ns: int = 0
    """The server clock the spans were checked against (a root's start ahead of it)."""
    folded: dict[str, int] = field(default_factory=dict)
    """Span or service names folded into `other`, by reason (too_long, control_character)."""
    detail: str | None = None
    """The first rejected span's field and what was wrong with it (for the response)."""

    def reject(self, reason: str, detail: str | None = None) -> None:
        self.rejected += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1
        if detail and self.detail is None:
            self.detail = detail

    def fold(self, reason: str, spans: int = 1) -> None:
        self.folded[reason] = self.folded.get(reason, 0) + spans

    @property
    def ahead_ns(self) -> int:
        """A root starting after this is refused (`MAX_FUTURE_S` past `received_ns`)."""
        return self.received_ns + int(MAX_FUTURE_S * 1e9)


def decode_traces(
    body: bytes,
    content_type: str | None,
    encoding: str | None,
    limits: BodyLimits | None = None,
    *,
    rows: bool = True,
    now_ns: int | None = None,
    class_key: str | None = None,
) -> Decoded:
    """The span rows of one POST /v1/traces body (decoded within `limits`).

    `rows=False`: a protobuf body's spans are checked and counted, not made rows (its
    `protobuf` gives them later, for about a third of the cost now). `now_ns`: the
    server clock (epoch ns) roots are checked against (default: now). `class_key`: the
    root span attribute holding the request's class."""
    kind = (content_type or _PROTOBUF).split(";")[0].strip().lower()
    if kind not in (_PROTOBUF, _JSON):
        raise BadTraces(
            f"content type {kind!r}: send application/x-protobuf or application/json", 415
        )
    data = _inflate(body, encoding or "identity", limits or BodyLimits())
    out = Decoded(received_ns=time.time_ns() if now_ns is None else now_ns)
    if kind == _JSON:
        _json_rows(data, out, class_key)
    else:
        _proto_rows(data, out, rows=rows, class_key=class_key)
        out.protobuf = data
    if rows or kind == _JSON:
        out.accepted = len(out.spans)
    return out


def protobuf_spans(
    data: bytes,
    received_ns: int,
    folded: dict[str, int] | None = None,
    class_key: str | None = None,
) -> list[SpanRow]:
    """The spans `decode_traces` accepted from this ExportTraceServiceRequest when it
    was received at `received_ns` (the same clock: the same spans); the names folded
    into `other` are added to `folded`."""
    out = Decoded(received_ns=received_ns)
    _proto_rows(data, out, class_key=class_key)
    if folded is not None:
        for reason, n in out.folded.items():
            folded[reason] = folded.get(reason, 0) + n
    return out.spans


def _inflate(body: bytes, encoding: str, limits: BodyLimits) -> bytes:
    """Serve's own decoding (serve/limits.py): gzip, deflate or zstd, bounded."""
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
    elif row.start_ns > INT64_MAX or row.end_ns > INT64_MAX:
        out.reject("time_past_int64")
    elif not row.parent and row.start_ns > out.ahead_ns:
        out.reject("start_ahead_of_clock")
    else:
        name, service = stage_name(row.name, out), stage_name(row.service, out)
        out.spans.append(row._replace(name=name, service=service))


def stage_name(name: str, out: Decoded, spans: int = 1) -> str:
    """`name`, or `other` (counted) when it fails the observations' stage-name check."""
    problem = stage_name_problem(name)
    if problem is None:
        return name
    out.fold(problem, spans)
    return FOLDED


def _proto_rows(
    data: bytes, out: Decoded, *, rows: bool = True, class_key: str | None = None
) -> None:
    # A start-up guard: google, opentelemetry load on first use, not with this module.
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
                service = attr.value.string_value or "unknown"
        if rows and stage_name_problem(service) is not None:  # folds counted with rows
            spans = sum(len(scope.spans) for scope in resource_spans.scope_spans)
            service = stage_name(service, out, spans)
        service = intern(service)
        for scope in resource_spans.scope_spans:
            if rows:
                _proto_spans(scope.spans, service, out, class_key)
            else:
                _proto_check(scope.spans, out)


def _missing(span_id: bytes) -> bool:
    """Empty or all zero bytes (a random id's first byte is seldom zero: few strips)."""
    return not span_id or (span_id[0] == 0 and not span_id.strip(b"\0"))


def _out_of_range(span: Any, ahead: int, out: Decoded) -> bool:
    """Rejected (and counted) for a time past int64 or a root starting after `ahead`
    (a span's start past int64 is past `ahead` too: `ahead` is far below it)."""
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    if start > INT64_MAX or end > INT64_MAX:
        out.reject("time_past_int64")
        return True
    if start > ahead and _missing(span.parent_span_id):
        out.reject("start_ahead_of_clock")
        return True
    return False  # a child ahead of the clock: its root decides, and it is clipped to it


def _proto_check(spans: Any, out: Decoded) -> None:
    """`_proto_spans`' checks and count, no rows (names are checked, and folds counted,
    when the rows are made: `protobuf_spans`, as the request is read back)."""
    ahead = out.ahead_ns
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
        elif (start > ahead or end > INT64_MAX) and _out_of_range(span, ahead, out):
            pass  # one comparison for the common span; the checks themselves are rare
        else:
            out.accepted += 1


def _proto_label(span: Any, key: str) -> str:
    """A root span's class: its attribute `key` as text ("" when it has none)."""
    for attr in span.attributes:
        if attr.key == key:
            value = attr.value
            which = value.WhichOneof("value")
            if which == "string_value":
                return str(value.string_value)
            if which in ("int_value", "bool_value"):
                return str(getattr(value, which)).lower()
            return ""
    return ""


def _proto_spans(spans: Any, service: str, out: Decoded, class_key: str | None = None) -> None:
    """`_add` for protobuf spans, its checks made on the id bytes (the hot loop)."""
    keep = out.spans.append
    row = tuple.__new__  # SpanRow's own __new__ takes keywords: twice the cost a span
    names: dict[str, str] = {}  # a handful of names, many spans: one string each
    traces: dict[bytes, str] = {}  # and one trace id string for all of a trace's spans
    ahead = out.ahead_ns
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
        elif (start > ahead or end > INT64_MAX) and _out_of_range(span, ahead, out):
            pass
        else:
            name, kind = span.name or "unknown", span.kind
            # A name that is not a stage name is never cached: each of its spans counted.
            name = names.get(name) or (
                names.setdefault(name, intern(name))
                if stage_name_problem(name) is None
                else stage_name(name, out)
            )
            keep(
                row(
                    SpanRow,
                    (
                        traces.get(trace) or traces.setdefault(trace, trace.hex()),
                        sid.hex(),
                        parent.hex() if has_parent else "",
                        name,
                        service,
                        start,
                        end,
                        span.status.code == 2,
                        _KINDS[kind] if 0 <= kind < len(_KINDS) else str(kind),
                        # Only a root's class is read: one attribute scan per trace.
                        _proto_label(span, class_key) if class_key and not has_parent else "",
                    ),
                )
            )


_KINDS = ("0", "1", "2", "3", "4", "5")


def _json_rows(data: bytes, out: Decoded, class_key: str | None = None) -> None:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise BadTraces(f"not JSON ({exc})") from None
    try:
        for row, wrong in json_spans(doc, class_key):
            if row is None:
                out.reject("wrong_type", wrong)
            else:
                _add(out, row._replace(name=intern(row.name), service=intern(row.service)))
    except WrongType as exc:
        raise BadTraces(str(exc)) from None


def export_response(content_type: str | None, decoded: Decoded) -> tuple[bytes, str]:
    """OTLP's ExportTraceServiceResponse in the request's encoding (partial success when
    spans were rejected), and its media type."""
    message = ""
    if decoded.rejected:
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(decoded.reasons.items()))
        message = f"{decoded.rejected} spans rejected ({why})"
        if decoded.detail:
            message += f"; first: {decoded.detail}"
    kind = (content_type or _PROTOBUF).split(";")[0].strip().lower()
    if kind == _JSON:
        body: dict[str, Any] = {}
        if decoded.rejected:
            body["partialSuccess"] = {"rejectedSpans": decoded.rejected, "errorMessage": message}
        return orjson.dumps(body), _JSON
    # A start-up guard: opentelemetry loads on first use, not with this module.
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    response = ExportTraceServiceResponse()
    if decoded.rejected:
        response.partial_success.rejected_spans = decoded.rejected
        response.partial_success.error_message = message
    return response.SerializeToString(), _PROTOBUF
