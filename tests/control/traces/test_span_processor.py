"""BudgetSpanProcessor inside a real OpenTelemetry SDK TracerProvider."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

from tailbudget import Recorder
from tailbudget.otel import BudgetSpanProcessor

MS = 1_000_000


def test_records_each_local_trace_with_its_critical_path(tmp_path):
    import pyarrow.parquet as pq

    rec = Recorder(sink=str(tmp_path / "r.parquet"))
    provider = TracerProvider(resource=Resource.create({"service.name": "api"}))
    processor = BudgetSpanProcessor(rec, grace_s=0.0, flush_every_s=0.05)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    t0 = 1_700_000_000_000_000_000
    for k in range(3):
        base = t0 + k * 1000 * MS
        root = tracer.start_span("handle", kind=SpanKind.SERVER, start_time=base)
        ctx = trace.set_span_in_context(root)
        a = tracer.start_span("embed", ctx, start_time=base + 10 * MS)
        a.end(end_time=base + 30 * MS)
        b = tracer.start_span("search", ctx, start_time=base + 30 * MS)
        b.end(end_time=base + 90 * MS)
        # a queue consumer off the path: never waited for
        c = tracer.start_span("audit", ctx, kind=SpanKind.CONSUMER, start_time=base + 40 * MS)
        c.end(end_time=base + 500 * MS)
        root.end(end_time=base + 100 * MS)
    assert processor.force_flush()
    provider.shutdown()
    rec.close()
    assert processor.traces_recorded == 3
    df = pq.read_table(tmp_path / "r.parquet").to_pandas()
    assert len(df) == 3
    assert df["total_ms"].tolist() == pytest.approx([100.0] * 3)
    assert df["embed_ms"].tolist() == pytest.approx([20.0] * 3)
    assert df["search_ms"].tolist() == pytest.approx([60.0] * 3)
    assert df["handle_ms"].tolist() == pytest.approx([20.0] * 3)
    assert "audit_ms" not in df.columns or df["audit_ms"].fillna(0).sum() == 0
