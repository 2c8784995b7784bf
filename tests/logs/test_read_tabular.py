"""Parquet, CSV and JSONL logs: defaults, mapping, units, rejection, errors."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tailbudget.errors import LogError
from tailbudget.logs import ReadOptions, read_log


def _rows(n: int = 50) -> list[dict[str, object]]:
    return [
        {
            "request_id": f"r{i}",
            "ts": f"2024-05-01T12:00:{i % 60:02d}",
            "embed_ms": 10.0 + i,
            "llm_ms": 100.0 + 2 * i,
            "total_ms": 120.0 + 3 * i,
            "seq_len": 100 + i,
            "route": "chat" if i % 2 else "search",
            "error": i % 10 == 0,
        }
        for i in range(n)
    ]


def _write_csv(path, rows):
    cols = list(rows[0])
    lines = [",".join(cols)] + [",".join(str(r[c]) for c in cols) for r in rows]
    path.write_text("\n".join(lines) + "\n")


def test_parquet_defaults(tmp_path):
    rows = _rows()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "log.parquet")
    log = read_log(
        str(tmp_path / "log.parquet"), ReadOptions(shape=("seq_len",), cohorts=("route",))
    )
    assert log.format == "parquet"
    assert log.stages == ("embed", "llm")
    assert log.rows.total == 50 and log.rows.used == 50 and log.rows.rejected == 0
    assert log.has_timestamp and not log.total_derived
    df = log.table.order_by("request_id").execute()
    assert set(df.columns) >= {"request_id", "ts", "total_ms", "embed_ms", "llm_ms", "error"}
    assert df["llm_ms"].sum() == pytest.approx(sum(r["llm_ms"] for r in rows))
    assert int(df["error"].sum()) == 5
    assert df["ts"].dt.second.max() == 49
    assert log.shape == ("seq_len",) and log.cohorts == ("route",)
    assert df.loc[df.request_id == "r3", "route"].item() == "chat"


def test_parquet_folder_and_glob(tmp_path):
    rows = _rows(30)
    folder = tmp_path / "logs"
    folder.mkdir()
    for k in range(3):
        pq.write_table(pa.Table.from_pylist(rows[k * 10 : (k + 1) * 10]), folder / f"p{k}.parquet")
    for src in (str(folder), str(folder / "*.parquet")):
        log = read_log(src)
        assert log.rows.used == 30
        assert log.table.total_ms.sum().execute() == pytest.approx(sum(r["total_ms"] for r in rows))


def test_csv_and_jsonl_agree(tmp_path):
    rows = _rows()
    _write_csv(tmp_path / "log.csv", rows)
    (tmp_path / "log.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    a = read_log(str(tmp_path / "log.csv"))
    b = read_log(str(tmp_path / "log.jsonl"))
    assert (a.format, b.format) == ("csv", "jsonl")
    assert a.rows == b.rows
    for col in ("total_ms", "embed_ms", "llm_ms"):
        assert a.table[col].sum().execute() == pytest.approx(b.table[col].sum().execute())


def test_total_derived_when_absent(tmp_path):
    rows = [{k: v for k, v in r.items() if k != "total_ms"} for r in _rows(10)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "log.parquet")
    log = read_log(str(tmp_path / "log.parquet"))
    assert log.total_derived
    expected = sum(r["embed_ms"] + r["llm_ms"] for r in rows)
    assert log.table.total_ms.sum().execute() == pytest.approx(expected)
    assert any("sum of 2 stages" in n for n in log.notes)


def test_bad_rows_counted_by_reason(tmp_path):
    text = (
        "request_id,ts,a_ms,b_ms,total_ms\n"
        "1,2024-01-01T00:00:00,1,2,3\n"
        "2,2024-01-01T00:00:01,-1,2,3\n"  # negative
        "3,2024-01-01T00:00:02,NaN,2,3\n"  # nan
        "4,2024-01-01T00:00:03,abc,2,3\n"  # non-numeric
        "5,not a time,1,2,3\n"  # bad timestamp
        "6,2024-01-01T00:00:05,1,2,\n"  # missing total
        "7,2024-01-01T00:00:06,1,,3\n"  # missing stage: kept, counted as 0
        "8,2024-01-01T00:00:07,1,2,4\n"
    )
    (tmp_path / "bad.csv").write_text(text)
    log = read_log(str(tmp_path / "bad.csv"))
    assert log.rows.total == 8
    assert log.rows.used == 3
    assert log.rows.rejected_reasons == {
        "missing_total": 1,
        "non_numeric": 1,
        "nan": 1,
        "negative": 1,
        "bad_timestamp": 1,
    }
    df = log.table.order_by("request_id").execute()
    assert df.request_id.tolist() == ["1", "7", "8"]
    assert df.b_ms.tolist() == [2.0, 0.0, 2.0]


@pytest.mark.parametrize(
    ("column", "value", "reason"),
    [
        ("a_ms", float("nan"), "nan"),
        ("total_ms", float("inf"), "infinite"),
        ("b_ms", -0.5, "negative"),
        ("total_ms", None, "missing_total"),
    ],
)
def test_typed_parquet_rejects_each_bad_value(tmp_path, column, value, reason):
    # Typed columns are first checked by sums and minima; one bad cell must still be found.
    cols: dict[str, list[float | None]] = {
        "a_ms": [1.0] * 6,
        "b_ms": [2.0] * 6,
        "total_ms": [3.0] * 6,
    }
    cols[column][4] = value
    pq.write_table(pa.table(cols), tmp_path / "typed.parquet")
    log = read_log(str(tmp_path / "typed.parquet"))
    assert (log.rows.total, log.rows.used, log.rows.rejected_reasons) == (6, 5, {reason: 1})
    assert log.table.count().execute() == 5


def test_typed_parquet_clean_and_overflowing_sums(tmp_path):
    big = 1.5e308  # finite, but two of them sum to infinity: no proof, the full count runs
    pq.write_table(
        pa.table({"a_ms": [big, big, 1.0], "total_ms": [big, big, 2.0]}), tmp_path / "big.parquet"
    )
    log = read_log(str(tmp_path / "big.parquet"))
    assert (log.rows.total, log.rows.used, log.rows.rejected) == (3, 3, 0)
    assert log.table.count().execute() == 3
    # A derived total is missing when every stage is null.
    pq.write_table(
        pa.table({"a_ms": [1.0, None, 2.0], "b_ms": [1.0, None, None]}), tmp_path / "d.parquet"
    )
    log = read_log(str(tmp_path / "d.parquet"))
    assert (log.rows.used, log.rows.rejected_reasons) == (2, {"missing_total": 1})


def test_mapping_glob_units_and_generated_ids(tmp_path):
    rows = [
        {"when": 1714564800 + i, "Latency": 0.5 + i / 100, "rpc_a": 0.1, "rpc_b": 0.2, "other": 7}
        for i in range(20)
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "x.parquet")
    opts = ReadOptions(total="Latency", stages_glob="rpc_*", timestamp="when", unit="s")
    log = read_log(str(tmp_path / "x.parquet"), opts)
    assert log.stages == ("rpc_a", "rpc_b")
    df = log.table.execute()
    assert df.total_ms.sum() == pytest.approx(sum(r["Latency"] for r in rows) * 1000)
    assert df.rpc_b_ms.tolist() == pytest.approx([200.0] * 20)
    assert str(df.ts.min()) == "2024-05-01 12:00:00"
    assert df.request_id.nunique() == 20
    explicit = read_log(
        str(tmp_path / "x.parquet"), opts.with_(stages={"a": "rpc_a"}, stages_glob=None)
    )
    assert explicit.stages == ("a",)
    assert explicit.table.a_ms.sum().execute() == pytest.approx(2000.0)


def test_guessed_total_without_stages_says_how_to_map(tmp_path):
    _write_csv(tmp_path / "x.csv", [{"Latency": 10 + i, "rpc": i, "kind": "a"} for i in range(5)])
    log = read_log(str(tmp_path / "x.csv"))
    assert log.stages == ()
    assert log.rows.used == 5
    assert any("stages" in n and "rpc" in n for n in log.notes)


def test_engine_query_on_duckdb():
    log = read_log(
        None,
        ReadOptions(query="SELECT range AS i, range * 2.0 AS total_ms, 1.0 AS x_ms FROM range(10)"),
    )
    assert log.format == "engine"
    assert log.rows.used == 10
    assert log.table.total_ms.sum().execute() == pytest.approx(90.0)


@pytest.mark.parametrize(
    ("setup", "opts", "fragment"),
    [
        (lambda p: None, ReadOptions(), "no such file"),
        (lambda p: p.write_text(""), ReadOptions(), "empty"),
        (lambda p: p.write_text("a,b\n1,2\n"), ReadOptions(), "no latency column"),
        (lambda p: p.write_text("total_ms\n1\n"), ReadOptions(total="latency"), "'latency'"),
        (
            lambda p: p.write_text("total_ms\n1\n"),
            ReadOptions(stages_glob="x_*"),
            "matches no column",
        ),
        (lambda p: p.write_text("total_ms\n-1\n"), ReadOptions(), "all 1 rows were rejected"),
    ],
)
def test_bad_input_raises_log_error(tmp_path, setup, opts, fragment):
    path = tmp_path / "log.csv"
    setup(path)
    with pytest.raises(LogError, match=fragment) as info:
        read_log(str(path), opts)
    assert "\n" not in str(info.value)


def test_unknown_format_and_missing_query(tmp_path):
    path = tmp_path / "log.bin"
    path.write_bytes(b"\x00\x01\x02garbage")
    with pytest.raises(LogError, match="unknown log format"):
        read_log(str(path))
    with pytest.raises(LogError, match="query") as err:
        read_log(None)
    assert err.value.param == "query" and "--" not in str(err.value)
    with pytest.raises(LogError, match="unknown log format"):
        ReadOptions(format="xml")


def test_from_budget_maps_log_block():
    from tailbudget.budget import parse_budget

    budget = parse_budget(
        """
service: s
slo: {p50: 100, p95: 200, p99: 300}
pipeline:
  - stage: a
    budget: {p99: 100}
log: {total: Latency, stages_glob: "rpc_*", shape: [seq_len], cohorts: [route], unit: s}
"""
    )
    opts = ReadOptions.from_budget(budget, timestamp="when", total=None)
    assert opts.total == "Latency" and opts.stages_glob == "rpc_*" and opts.unit == "s"
    assert opts.shape == ("seq_len",) and opts.cohorts == ("route",) and opts.timestamp == "when"


_ZONED = (
    "request_id,ts,total_ms\n"
    "a,2024-01-01T10:00:00+02:00,5\n"
    "b,2024-01-01T10:00:00Z,6\n"
    "c,2024-01-01 10:00:00,7\n"
    "d,2024-01-01T10:00:00.5-05:30,8\n"
)
ZONED_UTC = [
    "2024-01-01 08:00:00",
    "2024-01-01 10:00:00",
    "2024-01-01 10:00:00",
    "2024-01-01 15:30:00.500000",
]


def test_text_timestamps_with_offsets_become_utc(tmp_path):
    path = tmp_path / "zoned.csv"
    path.write_text(_ZONED)
    log = read_log(str(path), ReadOptions())
    got = log.table.order_by("request_id").ts.execute().tolist()
    assert [str(t) for t in got] == ZONED_UTC


def test_duckdb_sessions_we_open_are_utc():
    from tailbudget.logs.engine import connect

    con = connect()
    assert con.raw_sql("SELECT current_setting('TimeZone')").fetchone()[0] == "UTC"
