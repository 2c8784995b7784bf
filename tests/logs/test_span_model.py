"""One span model: a trace file's spans and the live receiver's are the same rows, and
both become the span table through the one normalise()."""

from __future__ import annotations

import json

from tailbudget.logs.span_model import SPAN_TABLE, SpanRow, normalise
from tailbudget.logs.trace_rows import FileClock, FileSpan, SpanFault, chunk_table
from tailbudget.logs.traces import otlp_spans
from tailbudget.serve.traces.otlp_json import json_spans

MS = 1_000_000
T0 = 1_700_000_000_000 * MS


def _doc() -> dict[str, object]:
    def span(sid: str, parent: str, name: str, lo: int, hi: int, kind: int) -> dict[str, object]:
        return {
            "traceId": "ab" * 16,
            "spanId": sid,
            "parentSpanId": parent,
            "name": name,
            "kind": kind,
            "startTimeUnixNano": str(T0 + lo * MS),
            "endTimeUnixNano": str(T0 + hi * MS),
            "status": {"code": 2 if name == "db" else 0},
        }

    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "api"}}]}
    spans = [
        span("01" * 8, "", "request", 0, 100, 2),
        span("02" * 8, "01" * 8, "db", 10, 40, 3),
        span("03" * 8, "01" * 8, "llm", 30, 90, 1),
    ]
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": spans}]}]}


def test_a_file_and_the_receiver_read_one_document_as_the_same_rows() -> None:
    doc = _doc()
    read = [item.row for item in otlp_spans(doc, "t") if isinstance(item, FileSpan)]
    received = [row for row, _ in json_spans(json.loads(json.dumps(doc))) if row is not None]
    assert len(read) == 3
    assert read == received
    assert normalise(read, "operation").equals(normalise(received, "operation"))


def test_a_chunk_is_the_model_table_with_the_faults_as_rejections() -> None:
    rows = [item for item in otlp_spans(_doc(), "t") if isinstance(item, FileSpan)]
    fault = SpanFault("", "span_without_trace_id", T0 - 5 * MS)
    clock = FileClock()
    table = chunk_table([fault, *rows], clock, "service", shape=0, cohorts=0)
    # The clock is the file's first start, the fault's: every time is from it.
    assert clock.epoch_ns == T0 - 5 * MS
    model = normalise([r.row for r in rows], "service", epoch_ns=clock.epoch_ns)
    spans = table.slice(0, 3).drop_columns(["bad"])
    assert (
        spans.select(SPAN_TABLE.names)
        .drop_columns(["follows"])
        .equals(model.drop_columns(["follows"]))
    )
    assert spans.column("follows").to_pylist() == [False, False, False]
    assert spans.column("start_ms").to_pylist() == [5.0, 15.0, 35.0]
    last = table.slice(3).to_pylist()[0]
    assert last["trace"] is None and last["bad"] == "span_without_trace_id"
    assert table.column("bad").null_count == 3


def test_a_root_keeps_its_marker_and_a_span_without_an_id_is_null() -> None:
    rows = [
        SpanRow("t", "a", "0000000000000000", "root", "s", T0, T0 + 9 * MS, False, ""),
        SpanRow("t", "", "a", "kid", "s", T0 + MS, T0 + 2 * MS, False, ""),
    ]
    table = normalise(rows, "operation")
    assert table.column("is_root").to_pylist() == [True, False]
    assert table.column("parent").to_pylist() == ["0000000000000000", "a"]
    assert table.column("span").to_pylist() == ["a", None]
    assert table.schema == SPAN_TABLE
