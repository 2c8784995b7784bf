"""Critical-path attribution on hand-built span trees (each ms counted once)."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tailbudget.logs import ReadOptions, read_log
from tailbudget.logs.engine import connect

T0 = 1_700_000_000_000_000_000  # ns
MS = 1_000_000


@pytest.fixture(scope="module")
def duck():
    return connect(None)


def _span(span, parent, service, name, start, end, trace="t1", kind=None):
    row = {
        "trace_id": trace,
        "span_id": span,
        "parent_id": parent,
        "service_name": service,
        "name": name,
        "start_ns": T0 + int(start * MS),
        "end_ns": T0 + int(end * MS),
    }
    if kind is not None:
        row["kind"] = kind
    return row


def _read(tmp_path, duck, rows, **options):
    path = tmp_path / "spans.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    log = read_log(str(path), ReadOptions(**options), engine=duck)
    return log, log.table.execute().set_index("request_id")


def test_client_server_gap_lands_on_the_callee(tmp_path, duck):
    # auth calls verify: the client span waits 80 ms, the server span runs 20 of them.
    rows = [
        _span("r", "", "auth", "login", 0, 100),
        _span("c", "r", "auth", "HTTP GET", 10, 90),
        _span("s", "c", "verify", "verify", 40, 60),
    ]
    log, df = _read(tmp_path, duck, rows, span_stage="service")
    assert df.loc["t1", "verify_ms"] == pytest.approx(80.0)  # 20 served + 60 network/queue
    assert df.loc["t1", "auth_ms"] == pytest.approx(20.0)
    assert log.attribution == "critical_path"


def test_span_kind_client_marks_the_edge_even_on_one_service(tmp_path, duck):
    # No service tells caller from callee; the CLIENT kind does.
    rows = [
        _span("r", "", "app", "handle", 0, 100, kind="SPAN_KIND_SERVER"),
        _span("c", "r", "app", "call db", 10, 90, kind="SPAN_KIND_CLIENT"),
        _span("s", "c", "app", "query", 40, 60, kind="SPAN_KIND_SERVER"),
    ]
    _, df = _read(tmp_path, duck, rows)
    assert df.loc["t1", "query_ms"] == pytest.approx(80.0)
    assert df.loc["t1", "handle_ms"] == pytest.approx(20.0)


def test_gateway_handler_sibling_is_not_double_counted(tmp_path, duck):
    # Spring Cloud Gateway: the handler span and the client call are siblings under the root.
    rows = [
        _span("r", "", "gateway", "/*", 0, 100),
        _span("h", "r", "gateway", "FilteringWebHandler.handle", 1, 99),
        _span("p", "r", "gateway", "HTTP POST", 2, 100),
        _span("a", "p", "auth", "/login", 5, 95),
    ]
    log, df = _read(tmp_path, duck, rows)
    stages = [log.stage_column(s) for s in log.stages]
    assert df.loc["t1", stages].sum() == pytest.approx(100.0)
    assert df.loc["t1", "FilteringWebHandler_handle_ms"] == pytest.approx(0.0)
    assert df.loc["t1", "login_ms"] == pytest.approx(98.0)  # 90 served + 8 of the call's gaps


def test_fan_out_critical_path_takes_the_slow_branch(tmp_path, duck):
    rows = [
        _span("r", "", "front", "page", 0, 100),
        _span("cb", "r", "front", "call fast", 5, 30),
        _span("b", "cb", "fast", "fast op", 6, 29),
        _span("cc", "r", "front", "call slow", 5, 95),
        _span("c", "cc", "slow", "slow op", 6, 94),
    ]
    _, df = _read(tmp_path, duck, rows, span_stage="service")
    assert df.loc["t1", "fast_ms"] == pytest.approx(0.0)  # the page never waited for it
    assert df.loc["t1", "slow_ms"] == pytest.approx(90.0)
    assert df.loc["t1", "front_ms"] == pytest.approx(10.0)


def test_self_time_is_still_available(tmp_path, duck):
    rows = [
        _span("r", "", "front", "page", 0, 100),
        _span("b", "r", "fast", "fast op", 5, 30),
        _span("c", "r", "slow", "slow op", 5, 95),
    ]
    log, df = _read(tmp_path, duck, rows, span_stage="service", span_attribution="self")
    assert log.attribution == "self"
    assert df.loc["t1", "fast_ms"] == pytest.approx(25.0)
    assert df.loc["t1", "slow_ms"] == pytest.approx(90.0)


def _walk(kids, span, lo, hi, acc):
    """Jaeger's critical path, written the slow way: walk back from the end."""
    t = hi
    while t > lo:
        cands = [
            c
            for c in kids.get(span, [])
            if lo < min(c[2], hi) <= t and max(c[1], lo) < min(c[2], hi)
        ]
        if not cands:
            break
        c = max(cands, key=lambda c: min(c[2], hi))
        end, start = min(c[2], hi), max(c[1], lo)
        acc[span] = acc.get(span, 0.0) + t - end
        _walk(kids, c[0], start, end, acc)
        t = start
    acc[span] = acc.get(span, 0.0) + max(t - lo, 0.0)


def test_matches_the_walk_back_on_sequential_and_fan_out_trees(tmp_path, duck):
    rng = random.Random(7)
    rows, expected = [], {}
    for k in range(30):
        trace = f"t{k}"
        spans = [("s0", 0.0, 200.0)]
        kids: dict[str, list[tuple[str, float, float]]] = {}
        frontier = [("s0", 0.0, 200.0)]
        n = 1
        while frontier and n < 25:
            span, lo, hi = frontier.pop(0)
            cursor = lo + rng.uniform(0, 5)
            # Sequential calls, and sometimes a fan-out of parallel calls of one start.
            while cursor < hi - 5 and n < 25:
                fan = rng.choice([1, 1, 2, 3])
                length = rng.uniform(2, (hi - cursor) * 0.6)
                for _ in range(fan):
                    end = cursor + length * rng.uniform(0.3, 1.0)
                    child = (f"s{n}", cursor, end)
                    n += 1
                    spans.append(child)
                    kids.setdefault(span, []).append(child)
                    frontier.append(child)
                cursor += length + rng.uniform(0.5, 5)
        parent = {c[0]: p for p, cs in kids.items() for c in cs}
        for sid, lo, hi in spans:
            rows.append(_span(sid, parent.get(sid, ""), "svc", sid, lo, hi, trace=trace))
        acc: dict[str, float] = {}
        _walk(kids, "s0", 0.0, 200.0, acc)
        expected[trace] = acc
    path = tmp_path / "random.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    log = read_log(str(path), ReadOptions(max_stages=100), engine=duck)
    df = log.table.execute().set_index("request_id")
    for trace, acc in expected.items():
        for stage in log.stages:
            got = df.loc[trace, f"{stage}_ms"]
            assert got == pytest.approx(acc.get(stage, 0.0), abs=1e-3), (trace, stage)


def test_budget_log_block_sets_span_stage(tmp_path, duck):
    from tailbudget.budget import parse_budget

    text = (
        "service: s\nslo: {p99: 500}\npipeline:\n  - stage: a\n    budget: {p99: 100}\n"
        "log: {span_stage: service}\n"
    )
    options = ReadOptions.from_budget(parse_budget(text))
    assert options.span_stage == "service"
    rows = [
        _span("r", "", "auth", "login", 0, 100),
        _span("c", "r", "auth", "HTTP GET", 10, 90),
        _span("s", "c", "verify", "verify", 40, 60),
    ]
    path = tmp_path / "spans.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    assert set(read_log(str(path), options, engine=duck).stages) == {"auth", "verify"}


def test_fold_keeps_a_stage_that_matters_only_in_the_slowest_traces(tmp_path, duck):
    rows = []
    for k in range(1000):
        slow = k < 2
        end = 300.0 if slow else 100.0
        trace = f"t{k}"
        rows.append(_span("r", "", "app", "request", 0, end, trace=trace))
        for i in range(13):  # the leading stages by total time
            rows.append(_span(f"c{i}", "r", "app", f"step{i}", 1 + 7 * i, 7 + 7 * i, trace=trace))
        rows.append(_span("t", "r", "app", f"tiny{k % 3}", 95, 95.05, trace=trace))
        if slow:
            rows.append(_span("s", "r", "app", "suspect", 100, 300, trace=trace))
    log, df = _read(tmp_path, duck, rows, max_stages=12)
    assert "suspect" in log.stages  # 0.4% of all time, but 7% of the slowest traces'
    assert "other" in log.stages and not any(s.startswith("tiny") for s in log.stages)
    assert df.loc["t0", "suspect_ms"] == pytest.approx(200.0)
    assert any("summed into stage 'other'" in n for n in log.notes)


def test_a_root_calling_another_service_directly_keeps_its_own_time(tmp_path, duck):
    rows = [
        _span("r", "", "front", "page", 0, 100),
        _span("b", "r", "back", "op", 30, 70),
    ]
    _, df = _read(tmp_path, duck, rows, span_stage="service")
    assert df.loc["t1", "front_ms"] == pytest.approx(60.0)
    assert df.loc["t1", "back_ms"] == pytest.approx(40.0)


def test_traces_taken_a_bucket_at_a_time_give_the_same_table(tmp_path, duck, monkeypatch):
    # Large tables go through the path a bucket of whole traces at a time (bounded memory).
    from tailbudget.logs import critical_path

    rng = random.Random(3)
    rows = []
    for k in range(60):
        rows.append(_span("r", "", "gw", "root", 0, 100, trace=f"t{k}"))
        cursor = 0.0
        for i in range(rng.randint(1, 6)):
            end = cursor + rng.uniform(1, 20)
            rows.append(_span(f"c{i}", "r", f"svc{i % 3}", f"op{i}", cursor, end, trace=f"t{k}"))
            cursor = end + rng.uniform(0, 3)
    _, whole = _read(tmp_path, duck, rows, span_stage="service")
    monkeypatch.setattr(critical_path, "BUCKET_SPANS", 50)
    _, parts = _read(tmp_path, duck, rows, span_stage="service")
    assert len(whole) == 60
    assert parts.sort_index().equals(whole.sort_index())
