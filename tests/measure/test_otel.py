"""Each request becomes a span tree in the real OpenTelemetry SDK (in-memory exporter)."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from tailbudget import Recorder
from tailbudget.measure.otel import OTelSink


@pytest.fixture
def exporter():
    exp = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exp))
    exp.provider = provider
    yield exp
    provider.shutdown()


def test_request_becomes_a_span_tree_with_genai_attributes(exporter, registry):
    rec = Recorder(sink=OTelSink(exporter.provider), registry=registry, service="rag")

    async def tokens():
        for t in ("a", "b", "c"):
            await asyncio.sleep(0.001)
            yield t

    async def main() -> None:
        async with rec.request(route="chat", seq_len=812) as req:
            with req.stage("retrieval"), req.stage("db"):
                pass
            async with req.stage("llm"):
                async for _ in req.stream(
                    tokens(), model="llama-3-8b", provider="vllm", input_tokens=812
                ):
                    pass

    asyncio.run(main())
    with pytest.raises(RuntimeError), rec.request(route="chat") as req, req.stage("tool"):
        raise RuntimeError("x")
    rec.close()
    spans = exporter.get_finished_spans()
    by_name = {}
    for s in spans:
        by_name.setdefault(s.name, []).append(s)
    root = by_name["chat"][0]
    retrieval, db, llm = by_name["retrieval"][0], by_name["db"][0], by_name["llm"][0]
    trace_id = root.context.trace_id
    assert {retrieval.context.trace_id, db.context.trace_id, llm.context.trace_id} == {trace_id}
    assert root.parent is None
    assert retrieval.parent.span_id == root.context.span_id
    assert db.parent.span_id == retrieval.context.span_id
    assert llm.parent.span_id == root.context.span_id
    assert db.attributes["tailbudget.stage"] == "retrieval/db"
    assert root.attributes["tailbudget.seq_len"] == 812 and root.attributes["http.route"] == "chat"
    assert (
        root.start_time
        <= retrieval.start_time
        <= db.start_time
        <= db.end_time
        <= retrieval.end_time
    )
    assert llm.end_time <= root.end_time
    a = llm.attributes
    assert a["gen_ai.request.model"] == "llama-3-8b"
    assert a["gen_ai.provider.name"] == "vllm"
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.usage.output_tokens"] == 3 and a["gen_ai.usage.input_tokens"] == 812
    assert a["tailbudget.ttft_ms"] > 0
    (event,) = llm.events
    assert event.name == "gen_ai.first_token" and llm.start_time <= event.timestamp <= llm.end_time
    failed_root = by_name["chat"][1]
    assert failed_root.status.status_code is StatusCode.ERROR
    assert failed_root.attributes["error.type"] == "RuntimeError"
    assert by_name["tool"][0].status.status_code is StatusCode.ERROR


def test_stream_outside_a_stage_gets_its_own_client_span(exporter, registry):
    rec = Recorder(sink=OTelSink(exporter.provider), registry=registry)
    with rec.request(route="r") as req:
        list(req.stream(iter(["x", "y"]), model="m"))
    rec.close()
    names = {s.name: s for s in exporter.get_finished_spans()}
    assert names["chat m"].parent.span_id == names["r"].context.span_id
    assert names["chat m"].attributes["gen_ai.usage.output_tokens"] == 2
