"""LLM stream timing with a fake token source whose clock the test controls."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailbudget import Recorder
from tailbudget.measure import stream as stream_mod
from tailbudget.measure.record import stream_stats


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000_000

    def __call__(self) -> int:
        return self.now

    def advance_ms(self, ms: float) -> None:
        self.now += int(ms * 1e6)


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(stream_mod, "perf_counter_ns", c)
    return c


def test_async_stream_metrics_from_controlled_timing(tmp_path, registry, clock, read_jsonl):
    ttft, gaps = 180.0, [10.0, 20.0, 30.0, 40.0, 100.0]

    async def tokens():
        clock.advance_ms(ttft)
        yield "Hello"
        for g in gaps:
            clock.advance_ms(g)
            await asyncio.sleep(0)
            yield " tok"

    rec = Recorder(sink=tmp_path / "r.jsonl", registry=registry)

    async def main() -> list[str]:
        async with rec.request(route="chat") as req, req.stage("llm"):
            return [t async for t in req.stream(tokens(), model="m")]

    out = asyncio.run(main())
    rec.close()
    assert out == ["Hello"] + [" tok"] * 5
    (row,) = read_jsonl(tmp_path / "r.jsonl")
    assert row["ttft_ms"] == pytest.approx(ttft)
    assert row["decode_ms"] == pytest.approx(sum(gaps))
    assert row["output_tokens"] == 6
    assert row["itl_p50_ms"] == pytest.approx(np.percentile(gaps, 50))
    assert row["itl_p95_ms"] == pytest.approx(np.percentile(gaps, 95))
    assert row["tokens_per_s"] == pytest.approx(5 / (sum(gaps) / 1000))


def test_sync_stream_with_multi_token_chunks(tmp_path, registry, clock, read_jsonl):
    def chunks():
        clock.advance_ms(50)
        yield "a b"
        clock.advance_ms(25)
        yield "c d e"

    rec = Recorder(sink=tmp_path / "r.jsonl", registry=registry)
    with rec.request() as req:
        assert list(req.stream(chunks(), tokens=lambda c: len(c.split()))) == ["a b", "c d e"]
    rec.close()
    (row,) = read_jsonl(tmp_path / "r.jsonl")
    assert row["output_tokens"] == 5 and row["ttft_ms"] == pytest.approx(50)
    assert row["tokens_per_s"] == pytest.approx(3 / 0.025)


def test_empty_stream_records_zero_tokens(tmp_path, registry, read_jsonl):
    rec = Recorder(sink=tmp_path / "r.jsonl", registry=registry)
    with rec.request() as req:
        assert list(req.stream(iter(()))) == []
    rec.close()
    (row,) = read_jsonl(tmp_path / "r.jsonl")
    assert row["output_tokens"] == 0 and row["ttft_ms"] is None


@settings(max_examples=60, deadline=None)
@given(
    first=st.integers(0, 10**9),
    gaps=st.lists(st.integers(0, 10**8), min_size=1, max_size=200),
)
def test_stream_stats_match_numpy(first, gaps):
    stamps = list(np.cumsum([first, *gaps]) + 5)
    s = stream_stats(5, [int(x) for x in stamps])
    g = np.asarray(gaps) / 1e6
    assert s.ttft_ms == pytest.approx(first / 1e6)
    assert s.decode_ms == pytest.approx(g.sum())
    assert s.itl_p50_ms == pytest.approx(np.percentile(g, 50), rel=1e-9, abs=1e-9)
    assert s.itl_p95_ms == pytest.approx(np.percentile(g, 95), rel=1e-9, abs=1e-9)
    assert s.output_tokens == len(gaps) + 1
