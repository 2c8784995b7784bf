"""Arbitrary rows and bytes never crash the readers with anything but LogError."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailbudget.errors import LogError
from tailbudget.logs import read_log
from tailbudget.logs.engine import connect

SETTINGS = settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

cells = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.text(alphabet="0123456789.-eEnaifNI x,\"'", max_size=8),
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=6)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def duck():
    return connect(None)


def _read_or_log_error(path, duck):
    try:
        log = read_log(str(path), engine=duck)
    except LogError as exc:
        assert "\n" not in str(exc)
        return None
    assert log.rows.total == log.rows.used + log.rows.rejected + log.rows.failed
    assert sum(log.rows.failed_reasons.values()) == log.rows.failed
    assert sum(log.rows.rejected_reasons.values()) == log.rows.rejected
    return log


@SETTINGS
@given(rows=st.lists(st.tuples(cells, cells, cells), min_size=1, max_size=12))
def test_csv_rows(tmp_path, duck, rows):
    def cell(v):
        return "" if v is None else str(v).replace("\n", " ")

    text = "total_ms,a_ms,ts\n" + "\n".join(",".join(cell(v) for v in r) for r in rows) + "\n"
    path = tmp_path / "fuzz.csv"
    path.write_text(text)
    log = _read_or_log_error(path, duck)
    if log is not None:
        # Every row the table keeps has a finite, non-negative total.
        totals = log.table.total_ms.execute()
        assert all(math.isfinite(t) and t >= 0 for t in totals)


@SETTINGS
@given(values=st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=20))
def test_parquet_floats_rejected_by_reason(tmp_path, duck, values):
    path = tmp_path / "fuzz.parquet"
    pq.write_table(pa.table({"total_ms": values}), path)
    bad = {
        "nan": sum(math.isnan(v) for v in values),
        "infinite": sum(math.isinf(v) for v in values),
        "negative": sum(v < 0 and math.isfinite(v) for v in values),
    }
    log = _read_or_log_error(path, duck)
    if log is None:
        assert sum(bad.values()) == len(values)  # only when every row is bad
    else:
        assert log.rows.rejected_reasons == {k: v for k, v in bad.items() if v}


@SETTINGS
@given(
    data=st.binary(max_size=200),
    suffix=st.sampled_from([".csv", ".json", ".jsonl", ".parquet", ""]),
)
def test_arbitrary_bytes(tmp_path, duck, data, suffix):
    path = tmp_path / f"fuzz{suffix}"
    path.write_bytes(data)
    _read_or_log_error(path, duck)


@SETTINGS
@given(doc=json_values, kind=st.sampled_from(["otlp", "vllm", "llmperf", "jaeger"]))
def test_arbitrary_json_in_known_shapes(tmp_path, duck, doc, kind):
    wrapped = {
        "otlp": {"resourceSpans": [{"scopeSpans": [{"spans": [doc]}]}]},
        "vllm": {"ttfts": [doc], "itls": [doc], "input_lens": [1], "output_lens": [doc]},
        "llmperf": [{"ttft_s": doc, "end_to_end_latency_s": doc, "error_code": None}],
        "jaeger": {"data": [{"traceID": "t", "spans": [doc], "processes": doc}]},
    }[kind]
    path = tmp_path / "fuzz.json"
    path.write_text(json.dumps(wrapped))
    _read_or_log_error(path, duck)
