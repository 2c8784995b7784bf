"""Issue 35's hostile spans: a trace can be refused, a batch cannot be lost.

Each case sends good traces beside the hostile one through the receiver (decode, span
log, assembler, attribution, write-ahead log) and checks that every good trace is
attributed, the hostile one refused or folded with a counted reason, and that later
batches and a restart still work.
"""

from __future__ import annotations

import time

import numpy as np
import orjson
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tailbudget.serve.batch import Batch
from tailbudget.serve.ingest import BadBatch
from tailbudget.serve.traces.assembler import Limits
from tailbudget.serve.traces.otlp_body import INT64_MAX, decode_traces, protobuf_spans
from tailbudget.serve.traces.receiver import TraceOptions, TraceReceiver
from tailbudget.serve.traces.span_log import _SPANS, SpanLog, _record
from tailbudget.serve.wal import StageColumn
from tests.control.runtimes import crash, runtime

PB = "application/x-protobuf"
MS = 1_000_000


def _now_ns() -> int:
    return time.time_ns() - 5 * 10**9


def _request(traces, service="api"):
    """traces: [(trace_id_int, [(span, parent, name, start, end), ...]), ...]"""
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    attr = rs.resource.attributes.add()
    attr.key, attr.value.string_value = "service.name", service
    scope = rs.scope_spans.add()
    for trace, spans in traces:
        for span, parent, name, start, end in spans:
            s = scope.spans.add()
            s.trace_id = trace.to_bytes(16, "big")
            s.span_id = span.to_bytes(8, "big")
            s.parent_span_id = parent.to_bytes(8, "big") if parent else b""
            s.name, s.kind = name, 2
            s.start_time_unix_nano, s.end_time_unix_nano = start, end
    return req.SerializeToString()


def _good(first: int, n: int, t0: int | None = None):
    t0 = _now_ns() if t0 is None else t0
    return [
        (k, [(1, 0, "root", t0, t0 + 50 * MS), (2, 1, "db", t0 + 10 * MS, t0 + 40 * MS)])
        for k in range(first, first + n)
    ]


@pytest.fixture
def receiver(tmp_path):
    rt = runtime(tmp_path, window="10m")
    r = TraceReceiver(rt, TraceOptions(limits=Limits(grace_s=0), flush_every_s=3600))
    yield r
    r.close()
    rt.close()


def test_a_span_past_int64_is_refused_at_decode_and_its_batch_is_attributed(receiver):
    t0 = _now_ns()
    poison = (9999, [(1, 0, "root", t0, 2**64 - 1), (2, 1, "db", 2**63 + 5, 2**64 - 2)])
    body = _request([*_good(1, 200), poison])
    receiver.receive(body, PB, None)
    receiver.flush(float("inf"))
    traces = receiver.status()["traces"]
    assert traces["spans"]["rejected"] == {"time_past_int64": 2}
    assert traces["completed"] == 200
    assert receiver.runtime.observations_total == 200


def test_a_trace_that_cannot_be_attributed_is_refused_alone_also_on_recovery(tmp_path):
    # Spans the decode checks never saw (a span log written before them): attribution
    # raises OverflowError on the bad trace; it is refused, the other 200 attributed.
    t0 = _now_ns()
    rows = [
        [f"{k:032x}", "01", "", "root", "api", t0, t0 + 50 * MS, False, "2"] for k in range(200)
    ]
    rows.append(["f" * 32, "01", "", "root", "api", t0, 2**64 - 1, False, "2"])
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / SpanLog.NAME).write_bytes(_record(_SPANS, orjson.dumps(rows)))
    rt = runtime(tmp_path, window="10m")
    receiver = TraceReceiver(rt, TraceOptions(limits=Limits(grace_s=0), flush_every_s=3600))
    receiver.flush(float("inf"))
    traces = receiver.status()["traces"]
    assert traces["completed"] == 200
    assert traces["incomplete"] == {"not_attributable": 1}
    receiver._stop.set()
    receiver.span_log.close()
    crash(rt)
    rt = runtime(tmp_path, window="10m")
    again = TraceReceiver(rt, TraceOptions(limits=Limits(grace_s=0), flush_every_s=3600))
    try:  # every trace was marked done: nothing comes back, nothing is counted twice
        assert again.recovered == 0
        assert rt.observations_total == 200
    finally:
        again.close()
        rt.close()


def test_a_70000_character_service_name_folds_into_other_and_later_batches_go_on(receiver):
    long = "s" * 70_000
    receiver.receive(_request(_good(1, 10), service=long), PB, None)
    receiver.receive(_request(_good(11, 10)), PB, None)
    receiver.flush(float("inf"))
    receiver.receive(_request(_good(21, 10)), PB, None)
    receiver.flush(float("inf"))
    traces = receiver.status()["traces"]
    assert traces["completed"] == 30
    assert traces["spans"]["names_folded"] == {"too_long": 20}
    assert all(len(name) <= 100 for name in receiver.runtime.stage_observations)


def test_the_write_ahead_log_is_never_handed_a_name_it_cannot_write(tmp_path):
    rt = runtime(tmp_path)
    try:
        one = np.array([time.time()])
        stages = {"x" * 70_000: StageColumn.every_row(np.array([1.0]))}
        with pytest.raises(BadBatch, match="65,535"):
            rt.ingest(Batch(one, np.array([5.0]), np.array([False]), stages))
        good = {"db": StageColumn.every_row(np.array([1.0]))}
        assert rt.ingest(Batch(one, np.array([5.0]), np.array([False]), good)) == 1
    finally:
        rt.close()


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("db\x85x", "control_character"),  # NEL
        ("db\u2028x", "control_character"),
        ("db\u2029x", "control_character"),
        ("db\x9bx", "control_character"),  # C1
        ("db\nx", "control_character"),
        ("d" * 101, "too_long"),
    ],
)
def test_span_names_pass_the_observations_stage_name_check(name, reason):
    t0 = _now_ns()
    body = _request([(1, [(1, 0, name, t0, t0 + MS)])], service=name)
    decoded = decode_traces(body, PB, None)
    assert [(s.name, s.service) for s in decoded.spans] == [("other", "other")]
    assert decoded.folded == {reason: 2}
    checked = decode_traces(body, PB, None, rows=False)  # a request to be parked
    assert checked.folded == {}  # checked as it is read back:
    folded: dict[str, int] = {}
    assert protobuf_spans(body, checked.received_ns, folded) == decoded.spans
    assert folded == {reason: 2}


def _json_span(k: int) -> dict[str, str]:
    t0 = _now_ns()
    return {
        "traceId": f"{k:032x}",
        "spanId": f"{k:016x}",
        "name": "root",
        "startTimeUnixNano": str(t0),
        "endTimeUnixNano": str(t0 + MS),
    }


def test_names_of_parked_requests_are_counted_once_as_they_are_read_back(tmp_path):
    rt = runtime(tmp_path, window="10m")
    limits = Limits(grace_s=0, max_held=1)
    receiver = TraceReceiver(rt, TraceOptions(limits=limits, flush_every_s=3600))
    try:
        for first in (1, 11, 21):  # the first held, the others parked
            receiver.receive(_request(_good(first, 10), service="x" * 101), PB, None)
        doc = {  # a JSON request, parked as rows (folded already): counted as it comes
            "resourceSpans": [
                {
                    "resource": {
                        "attributes": [{"key": "service.name", "value": {"stringValue": "a\n"}}]
                    },
                    "scopeSpans": [{"spans": [_json_span(k) for k in range(31, 36)]}],
                }
            ]
        }
        receiver.receive(orjson.dumps(doc), "application/json", None)
        receiver.flush(float("inf"))
        traces = receiver.status()["traces"]
        assert traces["completed"] == 35
        assert traces["spans"]["names_folded"] == {"too_long": 60, "control_character": 5}
    finally:
        receiver.close()
        rt.close()


def test_a_root_in_the_year_2200_is_refused_and_the_window_keeps_judging(receiver):
    year_2200 = 7_258_118_400 * 10**9
    assert year_2200 < INT64_MAX
    receiver.receive(_request(_good(1, 1, t0=year_2200)), PB, None)
    receiver.receive(_request(_good(2, 30)), PB, None)
    receiver.flush(float("inf"))
    traces = receiver.status()["traces"]
    assert traces["spans"]["rejected"] == {"start_ahead_of_clock": 1}
    assert traces["completed"] == 30
    # The child of the refused root is held without it: given up, never a request.
    assert receiver.runtime.status()["window"]["count"] == 30
    receiver.runtime.evaluate()
    assert receiver.runtime.verdict()["verdict"] != "unknown"


def test_a_parked_request_reads_back_against_the_clock_it_was_checked_on(tmp_path):
    # Checked at 12:00 with a root 10 minutes ahead: refused. Read back from the span log
    # an hour later it must still be refused, or the span counted rejected comes back.
    now = time.time_ns()
    ahead = now + 600 * 10**9
    body = _request([(1, [(1, 0, "root", ahead, ahead + MS)]), *_good(2, 1)])
    checked = decode_traces(body, PB, None, rows=False, now_ns=now)
    assert checked.accepted == 2 and checked.reasons == {"start_ahead_of_clock": 1}
    log = SpanLog(tmp_path)
    ticket, offset = log.write_protobuf_at(checked.protobuf or b"", checked.received_ns)
    log.sync(ticket)
    assert len(log.spans_at(offset)) == 2
    log.close()


def _three_spans(k: int, t0: int):
    return (
        k,
        [
            (1, 0, "root", t0, t0 + 50 * MS),
            (2, 1, "db", t0 + 10 * MS, t0 + 40 * MS),
            (3, 1, "cache", t0 + MS, t0 + 5 * MS),
        ],
    )


def test_a_burst_is_parked_and_read_back_only_as_fast_as_traces_complete(tmp_path):
    # The burst at a hundredth of the limits: 600 three-span traces against 50
    # open traces and 100 held spans. Reading parked spans back up to twice max_held
    # (200 spans: 66 traces) dropped the traces past 50 as too_many_traces.
    rt = runtime(tmp_path, window="10m")
    limits = Limits(grace_s=5, max_traces=50, max_held=100)
    receiver = TraceReceiver(rt, TraceOptions(limits=limits, flush_every_s=3600))
    try:
        t0 = _now_ns()
        for first in range(1, 601, 20):
            body = _request([_three_spans(k, t0) for k in range(first, first + 20)])
            receiver.receive(body, PB, None)
        assert receiver.status()["traces"]["spans"]["parked"] > 0
        for _ in range(100):
            if not receiver.flush(float("inf")):
                break
        traces = receiver.status()["traces"]
        assert traces["spans"]["dropped"] == {} and traces["incomplete"] == {}
        assert traces["completed"] == 600 and rt.observations_total == 600
    finally:
        receiver.close()
        rt.close()


def test_the_receiver_never_holds_a_request_that_could_pass_the_trace_limit(tmp_path):
    rt = runtime(tmp_path, window="10m")
    limits = Limits(grace_s=60, max_traces=10)
    receiver = TraceReceiver(rt, TraceOptions(limits=limits, flush_every_s=3600))
    try:
        t0 = _now_ns()
        receiver.receive(_request([_three_spans(k, t0) for k in range(1, 4)]), PB, None)
        receiver.receive(_request([_three_spans(k, t0) for k in range(4, 8)]), PB, None)
        spans = receiver.status()["traces"]["spans"]
        assert (spans["held"], spans["parked"], spans["dropped"]) == (9, 12, {})
    finally:
        receiver.close()
        rt.close()


def _slow_db(k: int, t0: int):
    """A trace whose db call takes 150 ms more in one trace of ten (the culprit)."""
    db = 30 + (150 if k % 10 == 3 else 0) + (k % 7)
    return (
        k,
        [
            (1, 0, "root", t0, t0 + (db + 20) * MS),
            (2, 1, "db", t0 + 10 * MS, t0 + (db + 10) * MS),
            (3, 1, "cache", t0 + MS, t0 + 5 * MS),
        ],
    )


def test_counts_and_the_culprits_evidence_survive_a_crash(tmp_path):
    # Issue 36: after kill -9, `completed: 0` and `culprits: []` while the stage figures
    # came back. The counts and the window's rows ride in the span log's done records.
    rt = runtime(tmp_path, window="10m")
    options = TraceOptions(limits=Limits(grace_s=0), flush_every_s=3600)
    receiver = TraceReceiver(rt, options)
    t0 = _now_ns()
    receiver.receive(_request([(999, [(1, 0, "root", t0, 2**64 - 1)])]), PB, None)
    for first in range(1, 401, 100):
        body = _request([_slow_db(k, t0) for k in range(first, first + 100)])
        receiver.receive(body, PB, None)
        receiver.flush(float("inf"))
    # Counted at receive time, carried with the next traces done (within a flush).
    before = receiver.status()
    assert before["traces"]["completed"] == 400 and before["culprits"][0]["stage"] == "db"
    rt.evaluate()
    verdict = rt.verdict()["verdict"]
    receiver._stop.set()
    receiver.span_log.close()
    crash(rt)
    rt = runtime(tmp_path, window="10m")
    again = TraceReceiver(rt, options)
    try:
        after = again.status()
        for key in ("completed", "received", "in_window", "incomplete"):
            assert after["traces"][key] == before["traces"][key], key
        assert after["traces"]["spans"]["rejected"] == {"time_past_int64": 1}
        assert after["culprits"] == before["culprits"]
        assert rt.verdict()["verdict"] == verdict
        rt.evaluate()
        assert rt.verdict()["verdict"] == verdict
    finally:
        again.close()
        rt.close()
