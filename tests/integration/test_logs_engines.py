"""The same logs read on DuckDB and on PySpark (local[2]) give the same table."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tailbudget.logs import ReadOptions, read_log

pytestmark = pytest.mark.integration
pytest.importorskip("pyspark")

_ROOT = Path(__file__).resolve().parents[2]
DATA = next(
    (
        p
        for p in (_ROOT / ".." / "shared" / "data", _ROOT / ".." / ".." / "shared" / "data")
        if p.is_dir()
    ),
    None,
)


@pytest.fixture(scope="module")
def spark():
    """One local Spark session for the whole module (started once, reused by read_log)."""
    from tailbudget.logs.engine import connect

    return connect("pyspark")


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("engines")
    rows = []
    for i in range(400):
        rows.append(
            {
                "request_id": f"r{i}",
                "ts": f"2024-05-01 12:{i // 60 % 60:02d}:{i % 60:02d}",
                "embed_ms": str(5 + i % 7),
                "llm_ms": str(100 + (i * 37) % 250),
                "total_ms": str(110 + (i * 37) % 250 + i % 7),
                "seq_len": 100 + i,
                "route": "chat" if i % 3 else "search",
                "error": "true" if i % 50 == 0 else "false",
            }
        )
    bad = {
        3: ("llm_ms", "-4"),
        4: ("embed_ms", "NaN"),
        5: ("llm_ms", "slow"),
        6: ("ts", "yesterday"),
        7: ("total_ms", ""),
        8: ("embed_ms", "inf"),
    }
    for i, (col, value) in bad.items():
        rows[i][col] = value
    header = list(rows[0])
    csv_path = folder / "log.csv"
    csv_path.write_text(
        "\n".join([",".join(header)] + [",".join(str(r[c]) for c in header) for r in rows]) + "\n"
    )
    numeric = [
        {**r, **{c: float(r[c]) for c in ("embed_ms", "llm_ms", "total_ms")}}
        for i, r in enumerate(rows)
        if i not in (5, 7)  # Parquet keeps typed columns: drop the text-in-number rows
    ]
    pq_path = folder / "log.parquet"
    pq.write_table(pa.Table.from_pylist(numeric), pq_path)
    return {"csv": str(csv_path), "parquet": str(pq_path)}


def _summary(log):
    sums = {
        col: log.table[col].sum().execute()
        for col in ("total_ms", *(log.stage_column(s) for s in log.stages))
    }
    return log.rows, sums, int(log.table.error.sum().execute()), log.table.ts.max().execute()


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_same_rows_reasons_and_sums(spark, logs, kind):
    opts = ReadOptions(shape=("seq_len",), cohorts=("route",))
    duck = read_log(logs[kind], opts)
    sparked = read_log(logs[kind], opts, engine="pyspark")
    assert sparked.backend is spark
    d_rows, d_sums, d_err, d_ts = _summary(duck)
    s_rows, s_sums, s_err, s_ts = _summary(sparked)
    assert d_rows == s_rows
    expected = {"nan": 1, "infinite": 1, "negative": 1, "bad_timestamp": 1}
    if kind == "csv":
        expected |= {"missing_total": 1, "non_numeric": 1}
    assert d_rows.rejected_reasons == expected
    assert d_rows.total == (400 if kind == "csv" else 398)
    assert d_rows.used == d_rows.total - sum(expected.values())
    assert d_sums.keys() == s_sums.keys()
    for col, value in d_sums.items():
        assert s_sums[col] == pytest.approx(value, rel=1e-12)
    assert d_err == s_err == 8
    assert str(d_ts) == str(s_ts)
    assert duck.stages == sparked.stages == ("embed", "llm")


@pytest.mark.skipif(DATA is None, reason="../shared/data is not here")
def test_span_table_same_on_both_engines(spark):
    path = str(DATA / "nezha_trainticket_baseline_spans.csv")
    duck = read_log(path)
    sparked = read_log(path, engine="pyspark")
    assert duck.rows == sparked.rows
    assert duck.stages == sparked.stages
    d = duck.table.execute().set_index("request_id").sort_index()
    s = sparked.table.execute().set_index("request_id").sort_index()
    for stage in duck.stages:
        col = duck.stage_column(stage)
        assert (d[col] - s[col]).abs().max() < 1e-6
    assert (d.total_ms - s.total_ms).abs().max() < 1e-6


@pytest.mark.skipif(DATA is None, reason="../shared/data is not here")
def test_vllm_on_spark(spark):
    path = DATA / "vllm_llama33-70b_tp8_sharegpt_qps_inf.json"
    log = read_log(str(path), engine="pyspark")
    data = json.loads(path.read_text())
    assert log.rows.used == len(data["ttfts"])
    assert log.table.tpot_ms.mean().execute() == pytest.approx(data["mean_tpot_ms"], rel=1e-4)


def test_otlp_with_attributes_on_both_engines(spark, tmp_path):
    def span(trace, sid, parent, name, start_ms, end_ms, attrs=()):
        return {
            "traceId": trace,
            "spanId": sid,
            "parentSpanId": parent,
            "name": name,
            "startTimeUnixNano": str(1_700_000_000_000_000_000 + start_ms * 1_000_000),
            "endTimeUnixNano": str(1_700_000_000_000_000_000 + end_ms * 1_000_000),
            "attributes": [{"key": k, "value": v} for k, v in attrs],
        }

    spans = []
    for i in range(6):
        trace = f"t{i}"
        attrs = [
            ("gen_ai.usage.output_tokens", {"intValue": str(10 * i)}),
            ("route", {"stringValue": "a" if i % 2 else "b"}),
        ]
        spans.append(span(trace, "r", "", "request", 100 * i, 100 * i + 50 + i, attrs))
        spans.append(span(trace, "c", "r", "llm", 100 * i + 5, 100 * i + 45))
    doc = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": spans}]}]}
    path = tmp_path / "traces.json"
    path.write_text(json.dumps(doc))
    opts = ReadOptions(shape=("gen_ai.usage.output_tokens",), cohorts=("route",))
    frames = []
    for engine in (None, "pyspark"):
        log = read_log(str(path), opts, engine=engine)
        assert log.rows.used == 6
        frames.append(log.table.execute().set_index("request_id").sort_index())
    duck, sparked = frames
    assert duck.gen_ai_usage_output_tokens.tolist() == [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]
    assert sparked.gen_ai_usage_output_tokens.tolist() == duck.gen_ai_usage_output_tokens.tolist()
    assert sparked.route.tolist() == duck.route.tolist() == ["b", "a", "b", "a", "b", "a"]
    assert (sparked.request_ms - duck.request_ms).abs().max() < 1e-9
    assert duck.request_ms.tolist() == pytest.approx([10.0 + i for i in range(6)])


def test_offset_timestamps_same_on_both_engines(spark, tmp_path):
    from tests.logs.test_read_tabular import _ZONED, ZONED_UTC

    path = tmp_path / "zoned.csv"
    path.write_text(_ZONED)
    for engine in (None, "pyspark"):
        log = read_log(str(path), ReadOptions(), engine=engine)
        got = log.table.order_by("request_id").ts.execute().tolist()
        assert [str(t) for t in got] == ZONED_UTC, engine
