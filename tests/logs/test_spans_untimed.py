"""Spans that cannot be timed or placed are rejected rows with their reason (#30).

A span with no end (or an end past int64) once read as a 0 ms request that
passed; spans with no trace id were merged into one request; a missing start
time gave an error naming no field.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tailbudget.errors import LogError
from tailbudget.logs import read_log

MS = 1_000_000
T0 = 1_700_000_000_000 * MS


def _span(trace: str | None, span: str, parent: str, start: int | None, end: object) -> dict:
    out: dict[str, object] = {"spanId": span, "name": f"op-{span}"}
    if trace is not None:
        out["traceId"] = trace
    if parent:
        out["parentSpanId"] = parent
    if start is not None:
        out["startTimeUnixNano"] = str(start)
    if end is not None:
        out["endTimeUnixNano"] = str(end)
    return out


def _good(trace: str, k: int) -> list[dict]:
    base = T0 + k * 1000 * MS
    return [
        _span(trace, f"{trace}r", "", base, base + 100 * MS),
        _span(trace, f"{trace}c", f"{trace}r", base + 10 * MS, base + 60 * MS),
    ]


def _write(tmp_path, spans: list[dict]):
    doc = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]
                },
                "scopeSpans": [{"spans": spans}],
            }
        ]
    }
    path = tmp_path / "traces.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_untimed_spans_reject_their_traces_with_the_reason(tmp_path):
    base = T0 + 50_000 * MS
    spans = [*_good("aa01", 0), *_good("aa02", 1), *_good("aa03", 2)]
    # a root with no end: was a 0 ms request
    spans.append(_span("bb01", "x1", "", base, None))
    # a child whose end is past int64: was a 0 ms stage
    spans += [_span("bb02", "x2", "", base, base + 5 * MS)]
    spans.append(_span("bb02", "x3", "x2", base, 2**64 + 5))
    # no start
    spans.append(_span("bb03", "x4", "", None, base + 5 * MS))
    # two spans with no trace id (and one all zeros): were merged into one request
    spans.append(_span(None, "x5", "", base, base + 7 * MS))
    spans.append(_span("00000000000000000000000000000000", "x6", "", base, base + 9 * MS))
    log = read_log(_write(tmp_path, spans))
    assert log.rows.used == 3
    assert log.rows.rejected_reasons == {
        "span_without_trace_id": 1,
        "span_without_start": 1,
        "span_without_end": 2,
    }
    df = log.table.execute()
    assert sorted(df.total_ms.round(6)) == [100.0, 100.0, 100.0]
    assert (df.total_ms > 0).all()
    (note,) = [n for n in log.notes if "cannot be timed" in n]
    assert "2 span_without_trace_id, 1 span_without_start, 2 span_without_end" in note


def test_a_file_where_no_span_can_be_timed_is_one_line_naming_the_field(tmp_path):
    base = T0
    spans = [_span("cc01", "r", "", base, None), _span("cc02", "r2", "", None, base)]
    with pytest.raises(
        LogError,
        match=r"no trace has spans that can all be timed; .*1 span_without_start, 1 span_without_end",
    ):
        read_log(_write(tmp_path, spans))


def test_a_span_table_with_null_times_rejects_those_traces(tmp_path):
    rows = [
        {
            "trace_id": "1",
            "span_id": "r",
            "parent_id": "",
            "name": "root",
            "start_ns": T0,
            "end_ns": T0 + 100 * MS,
        },
        {
            "trace_id": "2",
            "span_id": "r",
            "parent_id": "",
            "name": "root",
            "start_ns": T0,
            "end_ns": None,
        },
        {
            "trace_id": None,
            "span_id": "q",
            "parent_id": "",
            "name": "root",
            "start_ns": T0,
            "end_ns": T0 + 5 * MS,
        },
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "spans.parquet")
    log = read_log(str(tmp_path / "spans.parquet"))
    assert log.rows.used == 1
    assert log.rows.rejected_reasons == {"span_without_trace_id": 1, "span_without_end": 1}
    assert log.table.execute().total_ms.item() == pytest.approx(100.0)
