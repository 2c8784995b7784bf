"""Live culprits: the audit's ranking over the window, growth against POST /v1/baseline."""

from __future__ import annotations

import time

import numpy as np
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tailbudget.serve.traces.assembler import Limits
from tailbudget.serve.traces.receiver import TraceOptions, TraceReceiver
from tests.control.runtimes import runtime

MS = 1_000_000


def _body(first: int, n: int, db_ms: float, rng: np.random.Generator) -> bytes:
    """n traces: an api root calling a db (service stages: api, db)."""
    req = ExportTraceServiceRequest()
    scopes = {}
    for service in ("api", "db"):
        rs = req.resource_spans.add()
        attr = rs.resource.attributes.add()
        attr.key, attr.value.string_value = "service.name", service
        scopes[service] = rs.scope_spans.add()
    now = time.time_ns() - 30 * 10**9
    for k in range(first, first + n):
        trace = k.to_bytes(16, "big")
        own = float(rng.uniform(5, 15))
        db = db_ms * float(rng.uniform(0.8, 1.2)) * (3.0 if k % 10 == 0 else 1.0)
        root = scopes["api"].spans.add()
        root.trace_id, root.span_id, root.name, root.kind = trace, b"\x00" * 7 + b"\x01", "GET", 2
        root.start_time_unix_nano, root.end_time_unix_nano = now, now + int((own + db) * MS)
        child = scopes["db"].spans.add()
        child.trace_id, child.span_id, child.name, child.kind = trace, b"\x00" * 7 + b"\x02", "q", 2
        child.parent_span_id = root.span_id
        child.start_time_unix_nano = now + int(own * MS)
        child.end_time_unix_nano = root.end_time_unix_nano
    return req.SerializeToString()


def test_culprits_name_the_slow_stage_and_its_growth_against_the_baseline(tmp_path):
    rng = np.random.default_rng(1)
    rt = runtime(tmp_path, window="10m")
    receiver = TraceReceiver(rt, TraceOptions(span_stage="service", limits=Limits(grace_s=0)))
    try:
        receiver.receive(_body(1, 400, 20.0, rng), "application/x-protobuf", None)
        receiver.flush(float("inf"))
        assert receiver.set_baseline() == 400
        receiver.receive(_body(1001, 400, 40.0, rng), "application/x-protobuf", None)
        receiver.flush(float("inf"))
        status = receiver.status()
    finally:
        receiver.close()
        rt.close()
    assert status["traces"]["completed"] == 800 and status["traces"]["baseline_traces"] == 400
    top = status["culprits"][0]
    assert top["stage"] == "db"
    assert "against the baseline" in top["evidence"] and top["figures"]["growth_ms"] > 0
    assert "slow vs fast" in top["evidence"] and top["weak"] is False


def test_a_small_window_is_weak(tmp_path):
    rt = runtime(tmp_path, window="10m")
    receiver = TraceReceiver(rt, TraceOptions(span_stage="service", limits=Limits(grace_s=0)))
    try:
        receiver.receive(
            _body(1, 60, 20.0, np.random.default_rng(2)), "application/x-protobuf", None
        )
        receiver.flush(float("inf"))
        culprits = receiver.status()["culprits"]
    finally:
        receiver.close()
        rt.close()
    assert culprits and all(c["weak"] for c in culprits)
    assert "too few to attribute" in culprits[0]["evidence"]
