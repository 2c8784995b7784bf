"""Self time = span minus the union of its children, checked against brute force."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailbudget.errors import LogError
from tailbudget.logs import ReadOptions, read_log
from tailbudget.logs.columns import stage_name
from tailbudget.logs.engine import connect

T0 = 1_700_000_000_000_000_000  # ns

intervals = st.lists(
    st.tuples(st.integers(0, 120), st.integers(1, 60)), min_size=1, max_size=6
)  # (start ms, length ms) of children, possibly outside the 0..100 ms parent


@pytest.fixture(scope="module")
def duck():
    return connect(None)


@settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(children=intervals)
def test_root_self_time_matches_brute_force(tmp_path, duck, children):
    rows = [
        {
            "trace_id": "t",
            "span_id": "root",
            "parent_id": "",
            "name": "root",
            "start_ns": T0,
            "end_ns": T0 + 100 * 1_000_000,
        }
    ]
    for i, (start, length) in enumerate(children):
        rows.append(
            {
                "trace_id": "t",
                "span_id": f"c{i}",
                "parent_id": "root",
                "name": "child",
                "start_ns": T0 + start * 1_000_000,
                "end_ns": T0 + (start + length) * 1_000_000,
            }
        )
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "s.parquet")
    log = read_log(str(tmp_path / "s.parquet"), ReadOptions(span_attribution="self"), engine=duck)
    covered = set()
    for start, length in children:
        covered |= {ms for ms in range(start, start + length) if ms < 100}
    df = log.table.execute()
    assert df.root_ms.item() == pytest.approx(100 - len(covered), abs=1e-6)
    assert df.child_ms.item() == pytest.approx(sum(length for _, length in children), abs=1e-6)
    assert df.total_ms.item() == pytest.approx(100.0)


def test_stage_names_are_safe_and_distinct():
    assert stage_name("HTTP GET") == "HTTP_GET"
    assert stage_name("/api/v1/{id}") == "api_v1_id"
    assert stage_name("/*") == "root"
    assert stage_name("total") == "total_stage"
    assert stage_name("2xx") == "s_2xx"


def test_service_grouping_needs_a_service_column(tmp_path):
    rows = [
        {"TraceID": "t", "SpanID": "a", "ParentID": "root", "OperationName": "x", "Duration": 5}
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "s.parquet")
    with pytest.raises(LogError, match="service or pod column"):
        read_log(str(tmp_path / "s.parquet"), ReadOptions(span_stage="service"))
