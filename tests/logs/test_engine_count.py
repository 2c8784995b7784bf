"""count_true (the engine's count_if, or a sum of casts) and arrow_result."""

from __future__ import annotations

import ibis
import pyarrow as pa
import pytest

from tailbudget.logs.engine import arrow_result, connect, count_true


@pytest.mark.parametrize("where", ["all", "none_match", "empty"])
def test_count_true_counts_true_rows_as_a_sum_of_casts_would(where) -> None:
    backend = connect()
    values = {"all": [1.0, None, 5.0, 7.0], "none_match": [1.0, None], "empty": []}[where]
    t = ibis.memtable(pa.table({"x": pa.array(values, type=pa.float64())}))
    expr = t.aggregate(n=count_true(backend, t.x > 2.0), m=count_true(None, t.x > 2.0))
    row = arrow_result(expr, backend).to_pylist()[0]
    want = sum(1 for v in values if v is not None and v > 2.0)
    # null over no row at all (as a sum), a count otherwise; the portable sum of casts
    # (other engines) agrees
    assert row["n"] == row["m"] == (want if values else None)
    assert "COUNT_IF" in ibis.to_sql(expr).upper()


def test_arrow_result_keeps_ibis_types() -> None:
    backend = connect()
    t = ibis.memtable(pa.table({"x": [1, 2, 3]}))
    got = arrow_result(t.aggregate(s=t.x.sum(), z=ibis.null().cast("float64")), backend)
    assert got.schema.field("s").type == pa.int64()
    assert got.to_pylist() == [{"s": 6, "z": None}]
