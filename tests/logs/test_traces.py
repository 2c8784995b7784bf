"""OTLP JSON from a real opentelemetry-sdk program, Jaeger JSON, span tables."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tailbudget.errors import LogError
from tailbudget.logs import ReadOptions, read_log

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.exporter.otlp.proto.common")

MS = 1_000_000  # nanoseconds


def _otlp_json(requests: int) -> tuple[str, list[dict[str, float]]]:
    """Run a real SDK tracer, export in memory, encode as OTLP JSON (protobuf json_format)."""
    from google.protobuf import json_format
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import Status, StatusCode, set_span_in_context

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-chat"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    expected = []
    t0 = 1_700_000_000_000 * MS
    for i in range(requests):
        base = t0 + i * 1000 * MS
        slow = 7 * i  # ms added to the llm stage, so the requests differ
        root = tracer.start_span("request", start_time=base)
        ctx = set_span_in_context(root)
        retrieval = tracer.start_span("retrieval", context=ctx, start_time=base + 10 * MS)
        db = tracer.start_span(
            "db", context=set_span_in_context(retrieval), start_time=base + 15 * MS
        )
        db.end(end_time=base + 35 * MS)
        retrieval.end(end_time=base + 40 * MS)
        # llm overlaps retrieval (30..40): the parent's self time counts the union once.
        llm = tracer.start_span("llm", context=ctx, start_time=base + 30 * MS)
        llm.end(end_time=base + (90 + slow) * MS)
        root.set_attribute("gen_ai.usage.output_tokens", 100 + i)
        root.set_attribute("route", "chat" if i % 2 else "search")
        if i == 0:
            root.set_status(Status(StatusCode.ERROR))
        root.end(end_time=base + (100 + slow) * MS)
        expected.append(
            {"total": 100 + slow, "request": 20, "retrieval": 10, "db": 20, "llm": 60 + slow}
        )
    spans = exporter.get_finished_spans()
    assert len(spans) == 4 * requests
    return json_format.MessageToJson(encode_spans(spans)), expected


def test_otlp_json_from_real_sdk(tmp_path):
    text, expected = _otlp_json(5)
    assert '"resourceSpans"' in text
    path = tmp_path / "traces.json"
    path.write_text(text)
    log = read_log(str(path), ReadOptions(span_attribution="self"))
    assert log.format == "otlp"
    assert set(log.stages) == {"request", "retrieval", "db", "llm"}
    assert log.rows.total == 5 and log.rows.used == 5
    df = log.table.order_by("ts").execute()
    for row, exp in zip(df.to_dict("records"), expected, strict=True):
        assert row["total_ms"] == pytest.approx(exp["total"], abs=1e-6)
        for stage in ("request", "retrieval", "db", "llm"):
            assert row[log.stage_column(stage)] == pytest.approx(exp[stage], abs=1e-6)
    assert df["error"].tolist() == [True, False, False, False, False]
    assert str(df["ts"].iloc[0]) == "2023-11-14 22:13:20"
    # The default, critical path: the request waited for llm, not for retrieval (it
    # finished inside llm's run), so retrieval and db are off the path.
    cp = read_log(str(path)).table.order_by("ts").execute()
    for row, exp in zip(cp.to_dict("records"), expected, strict=True):
        assert row["llm_ms"] == pytest.approx(exp["llm"], abs=1e-6)
        assert row["retrieval_ms"] == row["db_ms"] == 0
        assert row["request_ms"] == pytest.approx(exp["total"] - exp["llm"], abs=1e-6)
    with_attrs = read_log(
        str(path), ReadOptions(shape=("gen_ai.usage.output_tokens",), cohorts=("route",))
    )
    assert with_attrs.shape == ("gen_ai_usage_output_tokens",) and with_attrs.cohorts == ("route",)
    attrs = with_attrs.table.order_by("ts").execute()
    assert attrs.gen_ai_usage_output_tokens.tolist() == [100.0, 101.0, 102.0, 103.0, 104.0]
    assert attrs.route.tolist() == ["search", "chat", "search", "chat", "search"]
    by_service = read_log(str(path), ReadOptions(span_stage="service"))
    assert by_service.stages == ("rag-chat",)  # the service keeps its name
    # One service: its critical-path time is the whole of every request.
    assert by_service.table[by_service.stage_column("rag-chat")].sum().execute() == pytest.approx(
        sum(e["total"] for e in expected)
    )


def test_otlp_collector_file_lines(tmp_path):
    # The Collector's file exporter writes one TracesData object per line.
    first, exp1 = _otlp_json(3)
    second, exp2 = _otlp_json(2)
    lines = [json.dumps(json.loads(t)) for t in (first, second)]
    (tmp_path / "traces.jsonl").write_text("\n".join(lines) + "\n")
    log = read_log(str(tmp_path / "traces.jsonl"))
    assert log.format == "otlp"
    assert log.rows.used == 5
    total = log.table.total_ms.sum().execute()
    assert total == pytest.approx(sum(e["total"] for e in exp1 + exp2))
    assert log.table.n_roots.max().execute() == 1


def test_jaeger_json(tmp_path):
    def span(sid, parent, op, start, dur, error=False):
        refs = [{"refType": "CHILD_OF", "traceID": "t1", "spanID": parent}] if parent else []
        tags = [{"key": "error", "type": "bool", "value": True}] if error else []
        return {
            "traceID": "t1",
            "spanID": sid,
            "operationName": op,
            "references": refs,
            "startTime": start,
            "duration": dur,
            "tags": tags,
            "processID": "p1",
        }

    doc = {
        "data": [
            {
                "traceID": "t1",
                "spans": [
                    span("a", None, "GET /chat", 1_700_000_000_000_000, 50_000, error=True),
                    span("b", "a", "embed", 1_700_000_000_005_000, 10_000),
                    span("c", "a", "search", 1_700_000_000_020_000, 25_000),
                ],
                "processes": {"p1": {"serviceName": "api", "tags": []}},
            }
        ]
    }
    path = tmp_path / "jaeger.json"
    path.write_text(json.dumps(doc))
    log = read_log(str(path))
    assert log.format == "jaeger"
    df = log.table.execute()
    assert df.total_ms.item() == pytest.approx(50.0)
    assert df.GET_chat_ms.item() == pytest.approx(15.0)
    assert df.embed_ms.item() == pytest.approx(10.0)
    assert bool(df.error.item())


def test_span_table_parquet_duration_only_and_orphan_trace(tmp_path):
    rows = [
        # trace 1: root 100 us, one child of 30 us (no start times: duration only)
        {"trace_id": "1", "span_id": "r", "parent_span_id": "", "name": "root", "duration_us": 100},
        {"trace_id": "1", "span_id": "c", "parent_span_id": "r", "name": "db", "duration_us": 30},
        # trace 2 has no root span: rejected as missing_total
        {"trace_id": "2", "span_id": "x", "parent_span_id": "gone", "name": "db", "duration_us": 5},
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "spans.parquet")
    log = read_log(str(tmp_path / "spans.parquet"))
    assert log.format == "spans"
    assert log.rows.total == 2 and log.rows.rejected_reasons == {"missing_total": 1}
    df = log.table.execute()
    assert df.total_ms.item() == pytest.approx(0.1)
    assert df.root_ms.item() == pytest.approx(0.07)
    assert df.db_ms.item() == pytest.approx(0.03)
    assert not log.has_timestamp


def test_collector_file_is_read_a_line_and_a_chunk_at_a_time(tmp_path, monkeypatch):
    # Spans go to Arrow in chunks: a chunk smaller than one line's spans must give the
    # same requests as one big chunk (the reader never holds every span as a dict).
    from tailbudget.logs import traces

    first, _ = _otlp_json(3)
    second, _ = _otlp_json(2)
    path = tmp_path / "traces.jsonl"
    path.write_text("\n".join(json.dumps(json.loads(t)) for t in (first, second)) + "\n\n")
    whole = read_log(str(path)).table.order_by("request_id").execute()
    monkeypatch.setattr(traces, "CHUNK_ROWS", 3)
    chunked = read_log(str(path)).table.order_by("request_id").execute()
    assert chunked.equals(whole)


def test_collector_file_with_a_bad_line_names_it(tmp_path):
    first, _ = _otlp_json(2)
    path = tmp_path / "traces.jsonl"
    path.write_text(json.dumps(json.loads(first)) + "\n{not json\n")
    with pytest.raises(LogError, match="line 2 is not valid JSON"):
        read_log(str(path))


def _rows(doc, keys=()):
    from tailbudget.logs.traces import otlp_spans

    return list(otlp_spans(doc, "t", keys))


def _streamed_rows(data, keys=()):
    import io

    from tailbudget.logs.traces import _streamed

    return list(_streamed(io.BytesIO(data), "t", keys))


def test_pretty_printed_document_is_streamed_with_the_same_requests(tmp_path, monkeypatch):
    # json_format writes one indented document: it is read token by token, and a
    # minified document longer than LINE_LIMIT too; both give the line reader's figures.
    from tailbudget.logs import traces

    text, _ = _otlp_json(4)
    pretty, line = tmp_path / "pretty.json", tmp_path / "line.json"
    pretty.write_text(text)
    line.write_text(json.dumps(json.loads(text)))
    opts = ReadOptions(shape=("gen_ai.usage.output_tokens",), cohorts=("route",))
    expected = read_log(str(line), opts).table.order_by("request_id").execute()
    for path in (pretty, line):
        monkeypatch.setattr(traces, "LINE_LIMIT", 64)
        got = read_log(str(path), opts)
        assert got.rows.used == 4
        assert got.table.order_by("request_id").execute().equals(expected)


def test_streamed_document_waits_for_a_resource_written_after_its_spans():
    span = {
        "traceId": "t1",
        "spanId": "a",
        "name": "root",
        "startTimeUnixNano": "1",
        "endTimeUnixNano": "9",
    }
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "api"}}]}
    late = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}], "resource": resource}]}
    legacy = {
        "resource_spans": [
            {"resource": resource, "instrumentation_library_spans": [{"spans": [span]}]}
        ]
    }
    for doc in (late, legacy):
        rows = _streamed_rows(json.dumps(doc, indent=1).encode())
        assert rows == _rows(doc)
        assert rows[0].row.service == "api"
    # Documents one after another (a Collector file) are read in turn.
    assert len(_streamed_rows(json.dumps(late).encode() + b"\n" + json.dumps(legacy).encode())) == 2


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'[{"resourceSpans": []}]', "must be an object with 'resourceSpans'"),
        (b'[\n {"resourceSpans": []}\n]', "must be an object with 'resourceSpans'"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "x"', "not valid JSON"),
        (b'{"resourceSpans": [\n  {"scopeSpans": \xff]}', "not valid JSON"),
    ],
)
def test_streamed_document_that_is_not_otlp_is_refused_in_one_line(tmp_path, data, message):
    path = tmp_path / "bad.json"
    path.write_bytes(data)
    with pytest.raises(LogError, match=message) as info:
        read_log(str(path), ReadOptions(format="otlp"))
    assert "\n" not in str(info.value)
