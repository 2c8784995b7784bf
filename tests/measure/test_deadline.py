"""Deadlines from the budget or a header, can_afford, optional stages, propagation."""

from __future__ import annotations

import logging

import httpx
import pytest

from tailbudget import Recorder, parse_budget
from tailbudget.measure import DEADLINE_HEADER, parse_deadline, propagate_deadline

BUDGET = """
service: rag
slo: {p50: 300, p95: 600, p99: 1000}
pipeline:
  - stage: retrieval
    budget: {p50: 50, p95: 100}
  - stage: rerank
    budget: {p50: 100, p95: 200, p99: 400}
  - stage: llm
    llm: {ttft_ms: 200, tokens_per_s: 50, output_tokens: 10}
"""


@pytest.fixture
def rec(tmp_path, registry):
    r = Recorder(sink=tmp_path / "r.jsonl", budget=parse_budget(BUDGET), registry=registry)
    yield r
    r.close()


def test_deadline_comes_from_the_largest_slo_percentile(rec):
    assert rec.deadline_ms == 1000
    with rec.request() as req:
        assert 900 < req.remaining_ms <= 1000
        assert req.can_afford("rerank") and req.can_afford("llm")


def test_incoming_deadline_tightens_but_never_loosens(rec):
    with rec.request(deadline_ms=150) as req:
        assert req.remaining_ms <= 150
        assert req.can_afford("retrieval")  # p95 100 ms
        assert not req.can_afford("rerank")  # p95 200 ms
        assert not req.can_afford("llm")  # no percentiles: its llm total, 400 ms
        assert req.can_afford("not_in_budget")  # unknown cost: run it
    with rec.request(deadline_ms=5000) as req:
        assert req.remaining_ms <= 1000


def test_optional_stage_is_skipped_and_recorded_as_degraded(rec, tmp_path, read_jsonl):
    ran = []
    with rec.request(deadline_ms=150) as req:
        with req.stage("retrieval", optional=True) as s:
            if s:
                ran.append("retrieval")
        with req.stage("llm"), req.stage("rerank", optional=True) as s:
            if s:
                ran.append("rerank")
        assert req.degraded == ["llm/rerank"]
    rec.close()
    (row,) = read_jsonl(tmp_path / "r.jsonl")
    assert ran == ["retrieval"]
    assert row["degraded"] == "llm/rerank"
    assert "llm/rerank_ms" not in row and "retrieval_ms" in row


def test_no_deadline_means_everything_is_affordable(tmp_path, registry):
    rec = Recorder(sink=tmp_path / "r.jsonl", registry=registry)
    with rec.request() as req:
        assert req.remaining_ms is None and req.can_afford("anything")
        with req.stage("x", optional=True) as s:
            assert s
    rec.close()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("250", 250.0),
        (b" 12.5 ", 12.5),
        ("-3", 0.001),
        ("0", 0.001),
        ("soon", None),
        ("nan", None),
        ("inf", None),
        (None, None),
    ],
)
def test_parse_deadline(raw, expected, caplog):
    with caplog.at_level(logging.WARNING, "tailbudget.measure"):
        assert parse_deadline(raw) == expected


def test_propagation_to_outgoing_httpx_requests(rec):
    outside = httpx.Request("GET", "http://127.0.0.1/")
    propagate_deadline(outside)
    assert DEADLINE_HEADER not in outside.headers
    with rec.request(deadline_ms=800) as req:
        out = httpx.Request("GET", "http://127.0.0.1/")
        propagate_deadline(out)
        assert 0 < float(out.headers[DEADLINE_HEADER]) <= 800
        assert out.headers["x-request-id"] == req.id
        assert set(req.headers()) == {DEADLINE_HEADER, "x-request-id"}
