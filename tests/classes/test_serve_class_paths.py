"""Observations carry a class in every serve path: an Arrow body's `class` column and a
root span's `classes.by` attribute in OTLP traces (protobuf and JSON, held or parked in
the span log, and after a crash); the budget's class list bounds the labels."""

from __future__ import annotations

import time

import orjson
import pyarrow as pa
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tailbudget.serve.actions import ActionsConfig
from tailbudget.serve.arrow_body import ARROW_STREAM
from tailbudget.serve.ingest import BadBatch, parse_observations
from tailbudget.serve.runtime import Runtime, RuntimeConfig
from tailbudget.serve.traces.assembler import Limits
from tailbudget.serve.traces.otlp_body import decode_traces
from tailbudget.serve.traces.receiver import TraceOptions, TraceReceiver
from tests.control.runtimes import crash, policy

CLASSES = (("premium", (("p95", 800.0),)), ("batch", (("p99", 6000.0),)))
PB = "application/x-protobuf"
JSON = "application/json"
MS = 1_000_000


def _runtime(tmp_path) -> Runtime:
    config = RuntimeConfig(
        state_dir=tmp_path / "state", actions=ActionsConfig(log=False), classes=CLASSES
    )
    return Runtime(policy("10m"), config)


def _stream(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def test_an_arrow_body_carries_a_class_column(tmp_path) -> None:
    labels = pa.array(["premium", "gold", None, "batch"]).dictionary_encode()
    table = pa.table({"total_ms": [900.0, 50.0, 60.0, 70.0], "class": labels})
    batch = parse_observations(_stream(table), now_s=time.time(), content_type=ARROW_STREAM)
    assert batch.labels == ["premium", "gold", None, "batch"]
    plain = pa.table({"total_ms": [1.0], "class": pa.array(["premium"], pa.large_string())})
    got = parse_observations(_stream(plain), now_s=time.time(), content_type=ARROW_STREAM)
    assert got.labels == ["premium"]
    bad = pa.table({"total_ms": [1.0], "class": [3]})
    with pytest.raises(BadBatch, match="column class must be strings"):
        parse_observations(_stream(bad), now_s=time.time(), content_type=ARROW_STREAM)


def _protobuf(tiers: list[str | None], t0: int, first: int = 1) -> bytes:
    """One trace per tier: a root (carrying `tier` when given) and a child that carries
    another tier (a child's attribute is not the request's class)."""
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    attr = rs.resource.attributes.add()
    attr.key, attr.value.string_value = "service.name", "api"
    scope = rs.scope_spans.add()
    for k, tier in enumerate(tiers, start=first):
        trace = k.to_bytes(16, "big")
        root = scope.spans.add()
        root.trace_id, root.span_id, root.name, root.kind = trace, b"\x01" * 8, "root", 2
        root.start_time_unix_nano, root.end_time_unix_nano = t0, t0 + (900 if tier else 50) * MS
        if tier is not None:
            a = root.attributes.add()
            a.key, a.value.string_value = "tier", tier
        child = scope.spans.add()
        child.trace_id, child.span_id, child.parent_span_id = trace, b"\x02" * 8, b"\x01" * 8
        child.name, child.kind = "db", 3
        child.start_time_unix_nano, child.end_time_unix_nano = t0 + MS, t0 + 40 * MS
        c = child.attributes.add()
        c.key, c.value.string_value = "tier", "batch"
    return req.SerializeToString()


def _json(tiers: list[str | None], t0: int) -> bytes:
    spans = []
    for k, tier in enumerate(tiers, start=1):
        attrs = [] if tier is None else [{"key": "tier", "value": {"stringValue": tier}}]
        spans.append(
            {"traceId": f"{k:032x}", "spanId": "01" * 8, "name": "root", "kind": 2,
             "startTimeUnixNano": str(t0), "endTimeUnixNano": str(t0 + 900 * MS),
             "attributes": attrs}
        )  # fmt: skip
        spans.append(
            {"traceId": f"{k:032x}", "spanId": "02" * 8, "parentSpanId": "01" * 8,
             "name": "db", "startTimeUnixNano": str(t0 + MS),
             "endTimeUnixNano": str(t0 + 40 * MS),
             "attributes": [{"key": "tier", "value": {"stringValue": "batch"}}]}
        )  # fmt: skip
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}
    return orjson.dumps(doc)


@pytest.mark.parametrize("kind", [PB, JSON])
def test_a_root_span_attribute_is_the_trace_class(kind) -> None:
    t0 = time.time_ns()
    body = (_protobuf if kind == PB else _json)(["premium", None], t0)
    spans = decode_traces(body, kind, None, class_key="tier").spans
    assert [(s.name, s.label) for s in spans] == [
        ("root", "premium"),
        ("db", ""),
        ("root", ""),
        ("db", ""),
    ]
    assert all(s.label == "" for s in decode_traces(body, kind, None).spans)  # not asked


def _receiver(rt: Runtime, **limits) -> TraceReceiver:
    options = TraceOptions(limits=Limits(grace_s=0, **limits), flush_every_s=3600, class_by="tier")
    return TraceReceiver(rt, options)


@pytest.mark.parametrize("kind", [PB, JSON])
def test_traces_carry_their_class_to_status_and_through_a_crash(tmp_path, kind) -> None:
    rt = _runtime(tmp_path)
    receiver = _receiver(rt)
    t0 = time.time_ns()
    tiers = ["premium"] * 6 + ["batch"] * 4 + ["gold", "silver", None]
    body = (_protobuf if kind == PB else _json)(tiers, t0)
    receiver.receive(body, kind, None)
    assert receiver.flush(float("inf")) == len(tiers)
    now = t0 / 1e9 + 1
    classes = rt.status(now)["classes"]
    assert {n: c["observations_total"] for n, c in classes.items()} == {
        "premium": 6,
        "batch": 4,
        "other": 2,  # gold and silver fold into other; the classless trace is service only
    }
    assert classes["premium"]["count"] == 6 and classes["premium"]["p50"] > 800
    receiver.close()
    crash(rt)  # kill -9: no final snapshot; the write-ahead log holds the class rows
    again = _runtime(tmp_path)
    assert again.status(now)["classes"] == classes
    again.close()


def test_parked_protobuf_spans_keep_their_class_when_read_back(tmp_path) -> None:
    rt = _runtime(tmp_path)
    receiver = _receiver(rt, max_held=1)
    t0 = time.time_ns()
    receiver.receive(_protobuf(["premium"], t0), PB, None)
    receiver.receive(_protobuf(["batch", "batch"], t0, first=2), PB, None)  # parked: no room
    assert receiver.status()["traces"]["spans"]["parked"] == 4
    while receiver.flush(float("inf")):
        pass
    classes = rt.status(t0 / 1e9 + 1)["classes"]
    assert classes["premium"]["observations_total"] == 1
    assert classes["batch"]["observations_total"] == 2
    receiver.close()
    rt.close()


def test_span_rows_logged_before_classes_read_back_without_one() -> None:
    from tailbudget.serve.traces.span_log import _SPANS, _rows

    old = orjson.dumps([["t", "s", "", "root", "api", 1, 2, False, "2"]])  # nine fields
    (row,) = _rows(_SPANS, old)
    assert row.label == "" and row.kind == "2"


def test_the_in_process_span_processor_records_the_root_span_class() -> None:
    from opentelemetry import trace as otel
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from prometheus_client import CollectorRegistry, generate_latest

    from tailbudget.budget import parse_budget
    from tailbudget.demo.tiers import BUDGET
    from tailbudget.measure import PrometheusSink, Recorder
    from tailbudget.otel import BudgetSpanProcessor

    registry = CollectorRegistry()
    rec = Recorder(sink=PrometheusSink(registry), budget=parse_budget(BUDGET), registry=registry)
    provider = TracerProvider(resource=Resource.create({"service.name": "api"}))
    processor = BudgetSpanProcessor(rec, grace_s=0.0, flush_every_s=0.05)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    t0 = time.time_ns()
    for k, tier in enumerate(["premium", "premium", "gold", None]):
        base = t0 + k * 1000 * MS
        attrs = {"tier": tier} if tier else {}
        root = tracer.start_span("handle", start_time=base, attributes=attrs)
        child = tracer.start_span(
            "llm",
            otel.set_span_in_context(root),
            start_time=base + MS,
            attributes={"tier": "batch"},
        )
        child.end(end_time=base + 50 * MS)
        root.end(end_time=base + 60 * MS)
    assert processor.force_flush()
    provider.shutdown()
    rec.close()
    text = generate_latest(registry).decode()
    count = "tailbudget_request_duration_seconds_count"
    assert f'{count}{{class="premium",route="",service="tiered-rag"}} 2.0' in text
    assert f'{count}{{class="other",route="",service="tiered-rag"}} 1.0' in text  # gold
    assert f'{count}{{class="",route="",service="tiered-rag"}} 1.0' in text  # no class
    assert 'class="batch"' not in text  # a child's attribute is not the request's class
