"""Prometheus histograms in seconds with budget thresholds as bucket bounds."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tailbudget import Recorder, parse_budget
from tailbudget.measure import PrometheusSink, budget_buckets

BUDGET = """
service: rag
slo: {p50: 1300, p95: 2800, p99: 5200}
pipeline:
  - stage: retrieval
    budget: {p50: 200, p95: 400, p99: 800}
  - stage: llm
    llm: {ttft_ms: 850, tokens_per_s: 22, output_tokens: 300, tail_ms: 300}
"""


def _families(registry):
    return {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}


def test_histograms_counts_and_budget_buckets(tmp_path, registry):
    budget = parse_budget(BUDGET)
    rec = Recorder(sink=PrometheusSink(registry), budget=budget, registry=registry)
    n = 25
    for i in range(n):
        try:
            with rec.request(route="chat") as req:
                with req.stage("retrieval"):
                    pass
                with req.stage("llm"):
                    pass
                with req.stage("llm"):  # repeated: one observation of the sum
                    if i < 5:
                        raise ValueError
        except ValueError:
            pass
    rec.close()
    fams = _families(registry)
    stage = fams["tailbudget_stage_duration_seconds"]
    counts = {
        s.labels["stage"]: s.value
        for s in stage.samples
        if s.name.endswith("_count") and s.labels["service"] == "rag"
    }
    assert counts == {"retrieval": n, "llm": n}
    bounds = {
        float(s.labels["le"])
        for s in stage.samples
        if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"
    }
    for ms in (1300, 2800, 5200, 200, 400, 800, 850):
        assert ms / 1000 in bounds
    req_total = {
        s.labels["outcome"]: s.value
        for s in fams["tailbudget_requests"].samples
        if s.name == "tailbudget_requests_total"
    }
    assert req_total == {"ok": n - 5, "error": 5}
    duration = fams["tailbudget_request_duration_seconds"]
    (count,) = [s.value for s in duration.samples if s.name.endswith("_count")]
    assert count == n
    (inf,) = [
        s.value
        for s in stage.samples
        if s.name.endswith("_bucket") and s.labels["le"] == "+Inf" and s.labels["stage"] == "llm"
    ]
    assert inf == n


def test_budget_buckets_are_sorted_seconds():
    b = budget_buckets(parse_budget(BUDGET))
    assert b == sorted(set(b)) and 0.2 in b and 5.2 in b and 0.001 in b


def test_dropped_counter_is_exposed(registry):
    rec = Recorder(sink=PrometheusSink(registry), registry=registry)
    rec.close()
    with rec.request():
        pass
    fams = _families(registry)
    (sample,) = [s for s in fams["tailbudget_dropped_records"].samples if s.name.endswith("_total")]
    assert sample.value == 1 and sample.labels == {"sink": "prometheus"}


def test_two_recorders_share_one_registry(registry):
    a = Recorder(sink=PrometheusSink(registry), registry=registry)
    b = Recorder(sink=PrometheusSink(registry), registry=registry)
    for rec in (a, b):
        with rec.request(route="x") as req, req.stage("s"):
            pass
        rec.close()
    fams = _families(registry)
    (count,) = [
        s.value
        for s in fams["tailbudget_stage_duration_seconds"].samples
        if s.name.endswith("_count")
    ]
    assert count == pytest.approx(2)


def test_metrics_registered_elsewhere_are_reused():
    from prometheus_client import CollectorRegistry, Counter

    registry = CollectorRegistry()
    mine = Counter("tailbudget_dropped_records", "made by the app", ["sink"], registry=registry)
    rec = Recorder(sink=PrometheusSink(registry), registry=registry)
    rec.close()
    with rec.request():
        pass
    assert mine.labels(sink="prometheus")._value.get() == 1
