"""The audit's scratch copy of a log: text labels as ENUM codes when few, a sample drawn
the same way every run."""

from __future__ import annotations

import ibis
import pyarrow as pa

from tailbudget.logs.engine import arrow_result, connect
from tailbudget.logs.scratch import ENUM_MOST, scratch_copy


def _log(n: int, many: int) -> pa.Table:
    return pa.table(
        {
            "total_ms": [float(i % 97) for i in range(n)],
            "route": [("chat", "o'brien", "search")[i % 3] for i in range(n)],
            "user": [f"u{i % many}" for i in range(n)],
            "code": list(range(n)),
        }
    )


def test_few_text_values_become_enum_codes_and_read_back_the_same() -> None:
    backend = connect()
    expr = ibis.memtable(_log(5_000, ENUM_MOST + 10))
    with scratch_copy(backend, expr, "t", labels=("route", "user", "code")) as scratch:
        kinds = {
            r[0]: r[1]
            for r in backend.raw_sql(
                "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = 't'"
            ).fetchall()
        }
        assert kinds["route"].startswith("ENUM"), kinds
        assert kinds["user"] == "VARCHAR", kinds  # too many values for an ENUM
        assert kinds["code"] == "BIGINT", kinds  # not text: copied as it is
        got = arrow_result(scratch.table, backend).to_pydict()
    assert got == expr.to_pyarrow().to_pydict()


def test_the_sample_is_the_same_rows_every_time_and_about_its_fraction() -> None:
    backend = connect()
    expr = ibis.memtable(_log(200_000, 10))
    with scratch_copy(backend, expr, "t") as scratch:
        draws = [
            sorted(arrow_result(scratch.sample(0.1, seed=7), backend).column("code").to_pylist())
            for _ in range(2)
        ]
        other = arrow_result(scratch.sample(0.1, seed=8), backend).column("code").to_pylist()
    assert draws[0] == draws[1]
    assert abs(len(draws[0]) - 20_000) < 5 * (200_000 * 0.1 * 0.9) ** 0.5
    assert sorted(other) != draws[0]
    # uniform over the log: each tenth of it holds about a tenth of the sample
    tenths = [sum(1 for c in draws[0] if k * 20_000 <= c < (k + 1) * 20_000) for k in range(10)]
    assert max(tenths) - min(tenths) < 0.2 * 2_000, tenths
