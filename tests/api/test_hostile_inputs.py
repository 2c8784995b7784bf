"""Python API inputs that crashed or misled (issue 35, item 5): each is one line of
TailbudgetError, or is read as a file is."""

from __future__ import annotations

import datetime as dt

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import tailbudget as tb
from tailbudget.cli import app
from tailbudget.errors import TailbudgetError
from tailbudget.logs.frames import Spooled, materialize

N = 300


def _log(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "ts": 1.7e9 + np.arange(N) * 0.5,
            "total_ms": rng.lognormal(5, 0.3, N) + 60,
            "db_ms": rng.lognormal(3, 0.3, N),
        }
    )


def _one_line(call, *needles: str) -> str:
    with pytest.raises(TailbudgetError) as info:
        call()
    text = str(info.value)
    assert "\n" not in text, text
    for needle in needles:
        assert needle in text, text
    return text


def test_a_timestamp_column_mixing_zoned_and_naive_datetimes() -> None:
    # Was DuckDB's ConversionException from deep in the audit.
    log = _log()
    start = dt.datetime(2024, 1, 1)
    log["ts"] = pd.Series(
        [
            (start.replace(tzinfo=dt.UTC) if i % 2 else start) + dt.timedelta(seconds=i)
            for i in range(N)
        ],
        dtype=object,
    )
    _one_line(lambda: tb.audit(log, slo="p99=900", timestamp="ts"), "'ts'", "timezone")


@pytest.mark.parametrize("kind", ["arrow", "pandas", "parquet"])
def test_a_nul_in_a_column_name(kind: str, tmp_path) -> None:
    # In memory DuckDB cut the name at the NUL and the stage vanished without a word.
    log = _log().rename(columns={"db_ms": "d\x00b_ms"})
    data: object = log if kind == "pandas" else pa.Table.from_pandas(log)
    if kind == "parquet":
        pq.write_table(data, tmp_path / "nul.parquet")
        data = str(tmp_path / "nul.parquet")
    _one_line(lambda: tb.read(data).to_arrow(), "NUL")


def test_a_relation_of_a_closed_connection() -> None:
    con = duckdb.connect()
    rel = con.from_df(_log())
    con.close()
    _one_line(lambda: tb.audit(rel, slo="p99=900"), "DuckDB relation", "closed")


def test_measure_budget_and_init_from_a_log_where_every_request_failed(tmp_path) -> None:
    # Was IndexError from np.quantile of nothing; the CLI showed the traceback.
    log = _log().assign(error=1)
    _one_line(lambda: tb.measure_budget(log, slo="p99=900"), "no successful request")
    path = tmp_path / "failed.csv"
    log.to_csv(path, index=False)
    result = CliRunner().invoke(app, ["init", "--from", str(path), "-o", str(tmp_path / "b")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "no successful request" in lines[0], result.output


@pytest.mark.parametrize("column", ["total_ms", "db_ms"])
def test_a_boolean_latency_column_is_refused(column: str) -> None:
    # Was audited as 0/1 ms and passed.
    log = _log()
    log[column] = np.arange(N) % 2 == 0
    _one_line(lambda: tb.audit(log, slo="p99=900"), column, "booleans")


def test_a_non_numeric_latency_column_is_refused() -> None:
    log = _log()
    log["total_ms"] = "fast"
    _one_line(lambda: tb.audit(log, slo="p99=900"), "non_numeric")


def test_simulate_reads_a_record_batch_reader_once() -> None:
    # The fit and the log's own figures each read the source: a reader read twice was
    # empty the second time ("no rows").
    table = pa.Table.from_pandas(_log())
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=64))
    sim = tb.simulate(reader, slo="p95=800", policy="fixed", duration="2m")
    assert sim.runs and sim.log_measured


def test_a_duckdb_relation_is_streamed_to_a_file_not_materialised(tmp_path) -> None:
    # A 300M-row relation was run into one Arrow table (DuckDB out of memory at 3-6 GB);
    # it is now written batch by batch to a scratch Parquet file, read as files are.
    con = duckdb.connect()
    n = 200_000
    rel = con.sql(
        f"SELECT 100.0 + (range % 97) AS total_ms, 5.0 + (range % 13) AS db_ms FROM range({n})"
    )
    spooled = materialize(rel)
    assert isinstance(spooled, Spooled) and spooled.label == "DuckDB relation"
    meta = pq.ParquetFile(spooled.path).metadata
    assert meta.num_rows == n and meta.num_row_groups > 1  # written in batches
    report = tb.audit(con.sql(rel.sql_query()), slo="p99=900")
    assert report.rows.total == n
    assert "DuckDB relation" in report.to_markdown()
