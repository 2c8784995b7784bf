"""Recorder basics: columns, sums, nesting, errors, covariates, drops, misuse."""

from __future__ import annotations

import logging

import pytest

from tailbudget import Recorder, TailbudgetError
from tailbudget.measure import current_request
from tailbudget.measure.record import Clock, Record, to_rows


def test_record_columns_sums_counts_and_nesting(tmp_path, registry, read_jsonl):
    path = tmp_path / "r.jsonl"
    rec = Recorder(sink=path, registry=registry)
    with rec.request(route="chat", seq_len=812) as req:
        with req.stage("retrieval"), req.stage("db"):
            pass
        for _ in range(3):
            with req.stage("tool"):
                pass
        req.set(cache_hit=True)
    rec.close()
    (row,) = read_jsonl(path)
    assert row["route"] == "chat" and row["seq_len"] == 812 and row["cache_hit"] is True
    assert row["error"] is False
    assert row["request_id"] == req.id and req.id.startswith(rec.id_prefix)
    assert row["ts"].endswith("Z")
    assert {"retrieval_ms", "retrieval/db_ms", "tool_ms", "tool_count", "total_ms"} <= row.keys()
    assert row["tool_count"] == 3
    assert row["retrieval/db_ms"] <= row["retrieval_ms"] <= row["total_ms"]
    assert row["tool_ms"] + row["retrieval_ms"] <= row["total_ms"]


def test_exception_in_stage_propagates_and_marks_error(tmp_path, registry, read_jsonl):
    path = tmp_path / "r.jsonl"
    rec = Recorder(sink=path, registry=registry)
    with pytest.raises(ZeroDivisionError), rec.request(route="x") as req, req.stage("llm"):
        1 / 0  # noqa: B018
    with rec.request(route="y") as req:
        req.fail("http_503")
    with rec.request(route="z"):
        pass
    rec.close()
    rows = {r["route"]: r for r in read_jsonl(path)}
    assert rows["x"]["error"] is True and rows["x"]["error_type"] == "ZeroDivisionError"
    assert "llm_ms" in rows["x"]  # the failing stage is still timed
    assert rows["y"]["error"] is True and rows["y"]["error_type"] == "http_503"
    assert rows["z"]["error"] is False and "error_type" not in rows["z"]


def test_current_request_and_async_stage(tmp_path, registry, read_jsonl):
    import asyncio

    rec = Recorder(sink=tmp_path / "r.jsonl", registry=registry)

    async def main() -> None:
        async with rec.request(route="a") as req:
            assert current_request() is req
            async with req.stage("llm"):
                await asyncio.sleep(0)
        assert current_request() is None

    asyncio.run(main())
    rec.close()
    (row,) = read_jsonl(tmp_path / "r.jsonl")
    assert "llm_ms" in row


def test_negative_durations_are_clamped_and_misused_stages_dropped(caplog):
    stages = ("fine", 100, 200, "backwards", 300, 250)
    stages += ("late", 400, 10_000)  # ended after its request
    record = Record(7, 1_000, 500, stages, None, {"route": "x"}, None)  # end < start
    with caplog.at_level(logging.WARNING, "tailbudget.measure"):
        (row,) = to_rows([record], Clock(0, 0), "p-", set())
    assert row["total_ms"] == 0.0
    assert row["fine_ms"] == pytest.approx(100 / 1e6)
    assert row["backwards_ms"] == 0.0
    assert "late_ms" not in row
    assert "ended after its request" in caplog.text


def test_stage_misuse_never_raises(tmp_path, registry, caplog, read_jsonl):
    rec = Recorder(sink=tmp_path / "r.jsonl", registry=registry)
    with rec.request() as req:
        timer = req.stage("x")
        with caplog.at_level(logging.WARNING, "tailbudget.measure"):
            timer.__exit__(None, None, None)  # exit without enter
        with timer:
            pass
    rec.close()
    (row,) = read_jsonl(tmp_path / "r.jsonl")
    assert "x_ms" in row
    assert "misused" in caplog.text


def test_queue_full_counts_drops_and_reports_them(tmp_path, registry, caplog, read_jsonl):
    rec = Recorder(sink=tmp_path / "r.jsonl", registry=registry, capacity=5, flush_interval_s=60)
    rec._pump.batch_size = 10**9  # keep the writer asleep so the queue fills
    for _ in range(12):
        with rec.request():
            pass
    assert rec.dropped == 7
    with caplog.at_level(logging.WARNING, "tailbudget.measure"):
        rec.close()
    assert "7 records dropped" in caplog.text
    assert len(read_jsonl(tmp_path / "r.jsonl")) == 5
    value = registry.get_sample_value("tailbudget_dropped_records_total", {"sink": "jsonl"})
    assert value == 7


def test_request_after_close_is_counted_not_lost(tmp_path, registry):
    rec = Recorder(sink=tmp_path / "r.jsonl", registry=registry)
    rec.close()
    rec.close()  # idempotent
    with rec.request():
        pass
    assert rec.dropped_by_reason == {"closed": 1}


def test_failing_sink_is_counted_and_others_still_written(tmp_path, registry, caplog, read_jsonl):
    from tailbudget.measure import Sink

    class Broken(Sink):
        name = "broken"

        def write(self, batch):
            raise RuntimeError("disk on fire")

    rec = Recorder(sink=[Broken(), tmp_path / "r.jsonl"], registry=registry)
    for _ in range(4):
        with rec.request():
            pass
    with caplog.at_level(logging.ERROR, "tailbudget.measure"):
        rec.close()
    assert len(read_jsonl(tmp_path / "r.jsonl")) == 4
    assert rec.dropped_by_reason == {"broken": 4}
    assert "disk on fire" in caplog.text


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"sink": "requests.csv"}, "unknown sink"),
        ({"capacity": 0}, "capacity"),
        ({"flush_interval_s": 0}, "flush_interval_s"),
        ({"deadline_ms": -1}, "deadline_ms"),
    ],
)
def test_constructor_errors_name_the_bad_value(kwargs, needle, registry):
    with pytest.raises(TailbudgetError, match=needle):
        Recorder(registry=registry, **kwargs)


def test_sinks_by_name_and_budget_by_path(tmp_path, registry):
    from tailbudget.measure import PrometheusSink
    from tailbudget.measure.otel import OTelSink
    from tailbudget.measure.sinks import JsonlSink, ParquetSink

    budget = tmp_path / "b.yaml"
    budget.write_text(
        "service: svc\nslo: {p99: 900}\npipeline:\n  - stage: a\n    budget: {p95: 100}\n"
    )
    rec = Recorder(
        sink=[tmp_path / "r.parquet", str(tmp_path / "r.ndjson"), "prometheus", "otel"],
        budget=str(budget),
        registry=registry,
    )
    kinds = [type(s) for s in rec.sinks]
    assert kinds == [ParquetSink, JsonlSink, PrometheusSink, OTelSink]
    assert rec.service == "svc" and rec.deadline_ms == 900
    rec.close()


def test_concurrent_branches_nest_under_the_owner_stage_not_in_each_other(
    tmp_path, registry, read_jsonl
):
    import asyncio

    path = tmp_path / "r.jsonl"
    rec = Recorder(sink=path, registry=registry)

    async def branch(req, name, gate):
        async with req.stage(name):
            await gate.wait()  # both branches are open at once
            with req.stage("x"):
                pass

    def in_thread(req):
        with req.stage("pool"):
            pass

    async def main():
        async with rec.request() as req:
            with req.stage("before"):
                pass
            async with req.stage("retrieval"):
                gate = asyncio.Event()
                tasks = [asyncio.create_task(branch(req, n, gate)) for n in ("vector", "bm25")]
                await asyncio.sleep(0)
                gate.set()
                await asyncio.gather(*tasks)
                await asyncio.to_thread(in_thread, req)
            with req.stage("after"):
                pass

    asyncio.run(main())
    rec.close()
    (row,) = read_jsonl(path)
    stages = {k[:-3] for k in row if k.endswith("_ms") and k != "total_ms"}
    assert {
        "before",
        "retrieval",
        "retrieval/vector",
        "retrieval/bm25",
        "retrieval/vector/x",
        "retrieval/bm25/x",
        "after",
    } <= stages
    assert not any("vector/bm25" in s or "bm25/vector" in s for s in stages)
    assert "retrieval/pool" in stages  # a thread-pool stage nests under the owner's stage


def test_out_of_order_exit_is_logged_and_later_stages_still_recorded(
    tmp_path, registry, caplog, read_jsonl
):
    path = tmp_path / "r.jsonl"
    rec = Recorder(sink=path, registry=registry)
    with caplog.at_level(logging.WARNING, "tailbudget.measure"), rec.request() as req:
        outer, inner = req.stage("outer"), req.stage("inner")
        outer.__enter__()
        inner.__enter__()
        outer.__exit__(None, None, None)  # misuse: the parent first
        inner.__exit__(None, None, None)
        with req.stage("next"):
            pass
    rec.close()
    (row,) = read_jsonl(path)
    assert "exited before a stage inside it" in caplog.text
    assert {"outer_ms", "outer/inner_ms"} <= row.keys()
    assert any(k.endswith("next_ms") for k in row)
