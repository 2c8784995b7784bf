"""Recorder() with no sink keeps rolling sketches of total and stage latency."""

from __future__ import annotations

import numpy as np
import pytest

from tailbudget import Recorder, TailbudgetError
from tailbudget.measure.record import Clock, Record
from tailbudget.measure.sinks.base import Batch
from tailbudget.measure.sinks.sketch import SketchSink


def test_recorder_without_sink_keeps_sketches(registry):
    rec = Recorder(registry=registry)
    for i in range(200):
        with rec.request() as req, req.stage("llm"):
            if i % 50 == 0:
                req.fail("x")
    snap = rec.snapshot()
    assert snap["count"] == 200 and snap["errors"] == 4
    assert snap["p50"] <= snap["p95"] <= snap["p99"]
    assert rec.sketches.window("llm").count == 200
    rec.close()


def _batch(ts_s: list[float], totals_ms: list[float]) -> Batch:
    # Records whose perf stamps are epoch ns, so Clock(0, 0) maps them to themselves.
    records = [
        Record(i, int(t * 1e9), int(t * 1e9 + ms * 1e6), (), None, {}, None)
        for i, (t, ms) in enumerate(zip(ts_s, totals_ms, strict=True))
    ]
    return Batch(records, Clock(0, 0), "p-", set())


def test_window_quantiles_and_ageing():
    now = [1000.0]
    sink = SketchSink(window_s=60, slots=6, clock=lambda: now[0])
    rng = np.random.default_rng(1)
    old = rng.lognormal(3, 0.5, 500)
    new = rng.lognormal(5, 0.5, 500)
    sink.write(_batch([900.0] * 500, list(old)))  # older than the window at t=1000
    sink.write(_batch([990.0] * 500, list(new)))
    snap = sink.snapshot()
    assert snap["count"] == 500
    assert snap["p99"] == pytest.approx(np.percentile(new, 99), rel=0.03)
    now[0] = 1200.0
    assert sink.snapshot()["count"] == 0


def test_snapshot_needs_the_sketch_mode(tmp_path, registry):
    rec = Recorder(sink=tmp_path / "r.jsonl", registry=registry)
    with pytest.raises(TailbudgetError, match="no sink"):
        rec.snapshot()
    rec.close()
