"""The OTLP body decoder, the assembler's limits and reasons, and the span log's recovery."""

from __future__ import annotations

import gzip

import orjson
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tailbudget.serve.traces.assembler import Assembler, Limits
from tailbudget.serve.traces.otlp_body import (
    BadTraces,
    SpanRow,
    decode_traces,
    export_response,
)
from tailbudget.serve.traces.span_log import SpanLog

T0 = 1_700_000_000_000_000_000


def _request(spans):
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    attr = rs.resource.attributes.add()
    attr.key, attr.value.string_value = "service.name", "api"
    scope = rs.scope_spans.add()
    for trace, span, parent, start, end in spans:
        s = scope.spans.add()
        s.trace_id, s.span_id, s.parent_span_id = trace, span, parent
        s.name, s.kind = "op", 2
        s.start_time_unix_nano, s.end_time_unix_nano = start, end
    return req.SerializeToString()


def test_protobuf_gzip_and_partial_success():
    body = _request(
        [
            (b"\x01" * 16, b"\x02" * 8, b"", T0, T0 + 5),
            (b"\x01" * 16, b"\x03" * 8, b"\x02" * 8, T0 + 1, 0),  # a child with no end
            (b"", b"\x04" * 8, b"", T0, T0 + 5),  # no trace id
        ]
    )
    decoded = decode_traces(gzip.compress(body), "application/x-protobuf", "gzip")
    assert [s.span for s in decoded.spans] == ["02" * 8]
    assert decoded.spans[0].service == "api" and decoded.spans[0].kind == "2"
    assert decoded.reasons == {"no_end": 1, "no_trace_id": 1}
    content, media = export_response("application/x-protobuf", decoded)
    response = ExportTraceServiceResponse.FromString(content)
    assert media == "application/x-protobuf"
    assert response.partial_success.rejected_spans == 2
    assert "no_end" in response.partial_success.error_message


def test_json_body_uses_the_file_readers_parser():
    doc = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "a"}}]
                },
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                                "name": "op",
                                "kind": 3,
                                "startTimeUnixNano": str(T0),
                                "endTimeUnixNano": str(T0 + 10),
                            }
                        ]
                    }
                ],
            }
        ]
    }
    decoded = decode_traces(orjson.dumps(doc), "application/json", None)
    assert decoded.spans[0] == SpanRow(
        "5b8efff798038103d269b633813fc60c",
        "eee19b7ec3c1b174",
        "",
        "op",
        "a",
        T0,
        T0 + 10,
        False,
        "3",
    )
    assert orjson.loads(export_response("application/json", decoded)[0]) == {}


@pytest.mark.parametrize(
    ("body", "ctype", "enc", "status"),
    [
        (b"x", "text/plain", None, 415),
        (b"x", "application/json", "br", 415),
        (b"\xff\x00", "application/x-protobuf", None, 400),
        (b"not gzip", "application/json", "gzip", 400),
        (b"[1]", "application/json", None, 400),
    ],
)
def test_bad_bodies(body, ctype, enc, status):
    with pytest.raises(BadTraces) as caught:
        decode_traces(body, ctype, enc)
    assert caught.value.status == status


def _row(trace, span, parent="", start=T0, end=T0 + 10):
    return SpanRow(trace, span, parent, "op", "svc", start, end, False, "0")


def test_assembler_counts_what_it_drops_and_gives_up():
    a = Assembler(Limits(grace_s=1, timeout_s=5, max_traces=2, max_spans=2))
    a.add([_row("t1", "r"), _row("t1", "r"), _row("t1", "c", "r"), _row("t1", "d", "r")], 0)
    a.add([_row("t2", "x", "gone")], 0)
    a.add([_row("t3", "r")], 0)  # a third open trace: over max_traces
    assert dict(a.dropped) == {"duplicate": 1, "too_many_spans": 1, "too_many_traces": 1}
    ready, stale = a.take_due(1.0, 100)
    assert [t.root.trace for t in ready] == ["t1"] and stale == []
    a.add([_row("t1", "late", "r")], 2)
    assert a.dropped["late"] == 1
    a.add([_row("t4", "r", end=0)], 2)  # a root that never ended
    _, stale = a.take_due(10.0, 100)
    assert sorted(stale) == ["t2", "t4"]
    assert dict(a.incomplete) == {"no_root": 1, "root_not_ended": 1}


def test_assembler_counts_orphans():
    a = Assembler(Limits(grace_s=0))
    a.add([_row("t", "r"), _row("t", "o", "missing")], 0)
    ready, _ = a.take_due(0.0, 10)
    assert len(ready) == 1 and a.incomplete["orphan_spans"] == 1


def test_span_log_replays_open_traces_and_cuts_a_torn_tail(tmp_path):
    log = SpanLog(tmp_path)
    log.append_spans([_row("a", "1"), _row("b", "1")])
    log.mark_done(["a"])
    log.append_spans([_row("c", "1")])
    log.close()
    with open(tmp_path / SpanLog.NAME, "ab") as fh:
        fh.write(b"TBS1\x01\xff\xff")  # a record cut short by a crash
    again = SpanLog(tmp_path)
    assert sorted(r.trace for r in again.open_spans()) == ["b", "c"]
    assert again.torn_bytes == 7
    again.rewrite([_row("c", "1")])
    again.append_spans([_row("d", "1")])
    again.close()
    last = SpanLog(tmp_path)
    assert sorted(r.trace for r in last.open_spans()) == ["c", "d"]
    last.close()


def test_span_log_keeps_a_protobuf_request_and_reads_back_its_accepted_spans(tmp_path):
    body = _request(
        [
            (b"\x01" * 16, b"\x02" * 8, b"", T0, T0 + 5),
            (b"\x01" * 16, b"\x03" * 8, b"\x02" * 8, T0 + 1, 0),  # rejected: no end
            (b"\x05" * 16, b"\x06" * 8, b"", T0, T0 + 5),
        ]
    )
    decoded = decode_traces(body, "application/x-protobuf", None)
    assert decoded.protobuf == body and decoded.accepted == 2
    checked = decode_traces(body, "application/x-protobuf", None, rows=False)
    assert checked.spans == [] and checked.accepted == 2  # to be parked: counted only
    assert checked.reasons == decoded.reasons == {"no_end": 1}
    log = SpanLog(tmp_path)
    ticket, offset = log.write_protobuf_at(body, checked.received_ns)
    log.sync(ticket)
    assert log.spans_at(offset) == decoded.spans  # the same rows, the rejected not again
    log.mark_done(["01" * 16])
    log.close()
    again = SpanLog(tmp_path)  # a restart rewrites the open traces' spans as rows
    assert again.open_spans() == [decoded.spans[1]]
    again.close()


def test_span_log_group_commit_shares_one_fsync(tmp_path):
    log = SpanLog(tmp_path)
    first = log.write_spans([_row("a", "1")])
    second = log.write_spans([_row("b", "1")])
    log.sync(second)  # the fsync for the later record covers the earlier one
    log.sync(first)
    assert log.fsyncs == 1
    third = log.write_spans([_row("c", "1")])
    log.rewrite([_row("b", "1"), _row("c", "1")])  # fsyncs what it keeps
    log.sync(third)
    assert log.fsyncs == 1
    log.sync(log.write_spans([_row("d", "1")]))
    assert log.fsyncs == 2
    log.close()
    again = SpanLog(tmp_path)
    assert sorted(r.trace for r in again.open_spans()) == ["b", "c", "d"]
    again.close()


def test_protobuf_ids_all_zero_are_rejected_or_no_parent():
    body = _request(
        [
            (b"\x00" * 16, b"\x02" * 8, b"", T0, T0 + 5),
            (b"\x01" * 16, b"\x00" * 8, b"", T0, T0 + 5),
            (b"\x01" * 16, b"\x03" * 8, b"\x00" * 8, T0, T0 + 5),  # a root
            (b"\x01" * 16, b"\x04" * 8, b"", 0, T0 + 5),
            (b"\x01" * 16, b"\x05" * 8, b"", T0, 0),  # a root that never ended: held
        ]
    )
    decoded = decode_traces(body, "application/x-protobuf", None)
    assert [(s.span, s.parent) for s in decoded.spans] == [("03" * 8, ""), ("05" * 8, "")]
    assert decoded.reasons == {"no_trace_id": 1, "no_span_id": 1, "no_start": 1}


def test_assembler_is_full_at_max_held_until_traces_are_taken():
    a = Assembler(Limits(grace_s=0, max_held=3))
    a.add([_row("t1", "r"), _row("t1", "c", "r"), _row("t2", "r")], 0)
    assert a.full and a.spans_held == 3
    ready, _ = a.take_due(0.0, 100)
    assert len(ready) == 2 and not a.full and a.spans_held == 0


def test_receiver_parks_past_max_held_and_answers_503_past_max_parked(tmp_path):
    # Acknowledging never waits for attribution: past max_held the spans stay in the
    # span log only; past max_parked the exporter is told to retry.
    from tailbudget.serve.traces.receiver import TraceOptions, TraceReceiver
    from tests.control.runtimes import runtime

    rt = runtime(tmp_path)
    limits = Limits(grace_s=60, max_held=1, max_parked=1)
    receiver = TraceReceiver(rt, TraceOptions(limits=limits, flush_every_s=60))
    try:
        body = _request([(b"\x01" * 16, b"\x02" * 8, b"", T0, T0 + 5)])
        receiver.receive(body, "application/x-protobuf", None)
        receiver.receive(body, "application/x-protobuf", None)
        assert receiver.status()["traces"]["spans"]["parked"] == 1
        with pytest.raises(BadTraces) as caught:
            receiver.receive(body, "application/x-protobuf", None)
        assert caught.value.status == 503
        assert receiver.status()["traces"]["busy_responses"] == 1
    finally:
        receiver.close()
        rt.close()


def _trace_request(k):
    trace = bytes([k + 1]) * 16
    return _request(
        [
            (trace, b"\x02" * 8, b"", T0, T0 + 100 * 1_000_000),
            (trace, b"\x03" * 8, b"\x02" * 8, T0 + 10 * 1_000_000, T0 + 90 * 1_000_000),
        ]
    )


def test_parked_spans_are_attributed_in_order_and_survive_a_restart(tmp_path, monkeypatch):
    from tailbudget.serve.traces import span_log
    from tailbudget.serve.traces.receiver import TraceOptions, TraceReceiver
    from tests.control.runtimes import crash, runtime

    limits = Limits(grace_s=0, max_held=2)
    rt = runtime(tmp_path)
    receiver = TraceReceiver(rt, TraceOptions(limits=limits, flush_every_s=60))
    for k in range(5):
        receiver.receive(_trace_request(k), "application/x-protobuf", None)
    spans = receiver.status()["traces"]["spans"]
    assert (spans["held"], spans["parked"]) == (2, 8)
    receiver.flush(float("inf"))  # reads the parked spans back as traces complete
    traces = receiver.status()["traces"]
    assert traces["completed"] == 5 and traces["spans"]["parked"] == 0
    assert traces["spans"]["dropped"] == {} and traces["incomplete"] == {}
    # Parked, then killed before attribution: the restart holds them again.
    for k in range(5, 8):
        receiver.receive(_trace_request(k), "application/x-protobuf", None)
    assert receiver.status()["traces"]["spans"]["parked"] == 4
    receiver._stop.set()
    receiver.span_log.close()
    crash(rt)
    # The restart rewrites the log to the open spans, a record of 2 here: the first
    # record is held, the others parked, as past max_held before the crash.
    monkeypatch.setattr(span_log, "_RECORD_ROWS", 2)
    rt = runtime(tmp_path)
    again = TraceReceiver(rt, TraceOptions(limits=limits, flush_every_s=60))
    try:
        assert again.recovered == 6
        spans = again.status()["traces"]["spans"]
        assert (spans["held"], spans["parked"]) == (2, 4)
        again.flush(float("inf"))
        assert again.status()["traces"]["completed"] == 8  # 5 before the crash, carried
    finally:
        again.close()
        rt.close()
