"""JSONL and Parquet round trips, schema widening, and what DuckDB/the audit reads back."""

from __future__ import annotations

import datetime as dt
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailbudget import Recorder

names = st.sampled_from(["embedding", "retrieval", "rerank", "llm", "tool"])
covariate = st.one_of(
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.text(max_size=12),
)
request = st.fixed_dictionaries(
    {
        "stages": st.lists(names, max_size=6),
        "seq_len": st.integers(0, 10_000),
        "tag": st.text(max_size=8),
    }
)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(reqs=st.lists(request, min_size=1, max_size=30), fmt=st.sampled_from(["jsonl", "parquet"]))
def test_round_trip(tmp_path_factory, reqs, fmt, read_jsonl, read_parquet):
    from prometheus_client import CollectorRegistry

    path = tmp_path_factory.mktemp("rt") / f"r.{fmt}"
    rec = Recorder(sink=path, registry=CollectorRegistry(), batch_size=7, flush_interval_s=0.01)
    before = dt.datetime.now(dt.UTC)
    for i, r in enumerate(reqs):
        with rec.request(request_id=f"r{i}", seq_len=r["seq_len"], tag=r["tag"]) as req:
            for s in r["stages"]:
                with req.stage(s):
                    pass
    rec.close()
    rows = read_jsonl(path) if fmt == "jsonl" else read_parquet(path)
    assert [row["request_id"] for row in rows] == [f"r{i}" for i in range(len(reqs))]
    for r, row in zip(reqs, rows, strict=True):
        assert row["seq_len"] == r["seq_len"] and row["tag"] == r["tag"]
        for s in set(r["stages"]):
            assert row[f"{s}_ms"] >= 0
        repeated = {s for s in r["stages"] if r["stages"].count(s) > 1}
        for s in repeated:
            assert row[f"{s}_count"] == r["stages"].count(s)
        for s in {"embedding", "retrieval", "rerank", "llm", "tool"} - set(r["stages"]):
            assert row.get(f"{s}_ms") is None
        ts = row["ts"]
        if isinstance(ts, str):
            ts = dt.datetime.fromisoformat(ts)
        assert before - dt.timedelta(seconds=1) <= ts <= dt.datetime.now(dt.UTC)
        assert math.isfinite(row["total_ms"])


def test_parquet_widens_schema_for_late_columns(tmp_path, registry, read_parquet):
    path = tmp_path / "r.parquet"
    rec = Recorder(sink=path, registry=registry)
    sink = rec.sinks[0]
    sink.row_group_rows = 1  # one row group per batch, so the widening path runs
    with rec.request(request_id="a", seq_len=3):
        pass
    rec.flush()
    with rec.request(request_id="b", seq_len=4.5, model="m") as req, req.stage("rerank"):
        pass
    rec.close()
    rows = read_parquet(path)
    assert [r["request_id"] for r in rows] == ["a", "b"]
    assert rows[0]["rerank_ms"] is None and rows[1]["rerank_ms"] >= 0
    assert rows[0]["model"] is None and rows[1]["model"] == "m"
    assert rows[0]["seq_len"] == 3 and rows[1]["seq_len"] == 4.5
    assert not (tmp_path / "r.parquet.partial").exists()


def test_parquet_with_no_records_is_still_a_valid_file(tmp_path, registry, read_parquet):
    rec = Recorder(sink=tmp_path / "r.parquet", registry=registry)
    rec.close()
    assert read_parquet(tmp_path / "r.parquet") == []


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_duckdb_reads_the_audit_columns(tmp_path, registry, fmt):
    import duckdb

    path = tmp_path / f"r.{fmt}"
    rec = Recorder(sink=path, registry=registry)
    for i in range(20):
        with rec.request(route="chat", seq_len=i) as req, req.stage("llm"):
            pass
    rec.close()
    reader = "read_parquet" if fmt == "parquet" else "read_json_auto"
    con = duckdb.connect()
    types = dict(
        con.execute(f"DESCRIBE SELECT * FROM {reader}('{path}')").fetchall()[i][:2]
        for i in range(len(con.execute(f"DESCRIBE SELECT * FROM {reader}('{path}')").fetchall()))
    )
    assert types["ts"].startswith("TIMESTAMP")
    assert types["total_ms"] == "DOUBLE" and types["llm_ms"] == "DOUBLE"
    assert types["error"] == "BOOLEAN"
    (n,) = con.execute(
        f"SELECT count(*) FROM {reader}('{path}') WHERE llm_ms <= total_ms"
    ).fetchone()
    assert n == 20
