"""`tailbudget.read`: every kind of input gives the same per-request table."""

from __future__ import annotations

import json
import subprocess
import sys

import duckdb
import ibis
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

import tailbudget as tb
from tests.api.data import DELAG, NEZHA

COLUMNS = {"total": "Latency", "stages": "*Controller*,Gateway*"}

pytestmark = pytest.mark.skipif(not DELAG.exists(), reason="needs ../shared/data")


def _inputs() -> dict[str, object]:
    frame = pd.read_csv(DELAG)
    arrow = pacsv.read_csv(DELAG)
    con = duckdb.connect()
    return {
        "path": str(DELAG),
        "pathlib": DELAG,
        "pandas": frame,
        "polars": pl.read_csv(DELAG),
        "arrow": arrow,
        "reader": arrow.to_reader(),
        "ibis memtable": ibis.memtable(arrow),
        "ibis duckdb": ibis.duckdb.connect().read_csv(DELAG),
        "duckdb relation": con.from_arrow(arrow),
    }


def test_every_input_reads_the_same_requests():
    want = tb.read(DELAG, **COLUMNS).to_pandas()
    assert len(want) == 9985
    assert list(want.columns[:3]) == ["request_id", "total_ms", "error"]
    assert "GatewayGet" in want.columns
    for name, data in _inputs().items():
        got = tb.read(data, **COLUMNS)
        frame = got.to_pandas()
        assert list(frame.columns) == list(want.columns), name
        pd.testing.assert_series_equal(frame["total_ms"], want["total_ms"], obj=name)
        pd.testing.assert_series_equal(frame["GatewayGet"], want["GatewayGet"], obj=name)
        assert got.rows.used == 9985, name


def test_conversions():
    log = tb.read(pd.read_csv(DELAG), **COLUMNS)
    assert isinstance(log.to_arrow(), pa.Table)
    assert isinstance(log.to_polars(), pl.DataFrame)
    assert isinstance(log.table, ibis.Table)
    assert log.stages[-1] == "GatewayGet"
    assert "pandas DataFrame" in repr(log)


def test_spans_give_a_row_per_trace_and_a_column_per_service():
    frame = tb.read(NEZHA, span_stage="service").to_pandas()
    spans = pd.read_csv(NEZHA)
    assert len(frame) == spans["TraceID"].nunique()
    services = {c for c in frame.columns if c.startswith("ts-")}
    assert services and services <= set(spans["PodName"].str.rsplit("-", n=2).str[0])
    assert frame["request_id"].is_unique
    # critical-path ms: no service takes longer than its trace
    assert (frame[sorted(services)].max(axis=1) <= frame["total_ms"] + 1e-6).all()


def test_not_a_log_is_one_line():
    with pytest.raises(tb.LogError, match="cannot read a set as a log"):
        tb.read({1, 2})


def test_import_stays_light():
    code = (
        "import sys, tailbudget; "
        "print(sorted(m for m in ('numpy', 'ibis', 'pydantic', 'pandas') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_api_names_survive_their_subpackages():
    import tailbudget.audit.report
    import tailbudget.export.common  # noqa: F401

    assert callable(tb.audit) and tb.audit.__module__ == "tailbudget._api.audit"
    assert callable(tb.export) and tb.export.__module__ == "tailbudget._api.budgets"


def test_a_read_table_is_audited_as_read():
    log = tb.read(pd.read_csv(DELAG), **COLUMNS)
    direct = json.loads(tb.audit(pd.read_csv(DELAG), slo="p99=500", **COLUMNS).to_json())
    again = json.loads(tb.audit(log, slo="p99=500").to_json())
    for doc in (direct, again):
        doc.pop("provenance")
    assert again == direct
