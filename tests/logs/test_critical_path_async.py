"""Asynchronous children and overflowing children on the critical path, as Jaeger defines it.

Jaeger's critical path (jaeger-ui's criticalPath, after Uber's CRISP): FOLLOWS_FROM
children are removed before the walk-back; a child that starts after its parent
ended is dropped, one that overflows its parent is clipped to it. OTLP has no
FOLLOWS_FROM: a CONSUMER span is the asynchronous side of a message (its producer
never waits for it). Written from those rules, one trace per case.
"""

from __future__ import annotations

import json

import pytest

from tailbudget.logs import ReadOptions, read_log

T0_US = 1_700_000_000_000_000


def _jaeger(tmp_path, spans):
    """A Jaeger JSON document: spans are (id, parent, ref, service, start ms, end ms)."""
    rows = []
    for sid, parent, ref, service, start, end in spans:
        refs = [{"refType": ref, "traceID": "t1", "spanID": parent}] if parent else []
        rows.append(
            {
                "traceID": "t1",
                "spanID": sid,
                "operationName": sid,
                "references": refs,
                "startTime": T0_US + int(start * 1000),
                "duration": int((end - start) * 1000),
                "processID": service,
                "tags": [],
            }
        )
    procs = {s[3]: {"serviceName": s[3]} for s in spans}
    path = tmp_path / "jaeger.json"
    path.write_text(json.dumps({"data": [{"traceID": "t1", "spans": rows, "processes": procs}]}))
    return _stages(path)


def _otlp(tmp_path, spans):
    """An OTLP JSON document: spans are (id, parent, kind, service, start ms, end ms)."""
    by_service: dict[str, list[dict]] = {}
    for sid, parent, kind, service, start, end in spans:
        by_service.setdefault(service, []).append(
            {
                "traceId": "5b8efff798038103d269b633813fc60c",
                "spanId": sid.encode().hex().ljust(16, "0"),
                "parentSpanId": parent.encode().hex().ljust(16, "0") if parent else "",
                "name": sid,
                "kind": kind,
                "startTimeUnixNano": str((T0_US + int(start * 1000)) * 1000),
                "endTimeUnixNano": str((T0_US + int(end * 1000)) * 1000),
            }
        )
    doc = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": svc}}]
                },
                "scopeSpans": [{"spans": spans_}],
            }
            for svc, spans_ in by_service.items()
        ]
    }
    path = tmp_path / "otlp.json"
    path.write_text(json.dumps(doc))
    return _stages(path)


def _stages(path):
    log = read_log(str(path), ReadOptions(max_stages=100))
    row = log.table.execute().iloc[0]
    return {s: float(row[log.stage_column(s)]) for s in log.stages}


def test_a_follows_from_child_is_off_the_path(tmp_path):
    got = _jaeger(
        tmp_path,
        [
            ("top", None, None, "api", 0, 100),
            ("sync", "top", "CHILD_OF", "api", 10, 40),
            ("later", "top", "FOLLOWS_FROM", "api", 50, 150),
        ],
    )
    assert got["sync"] == pytest.approx(30.0)
    assert got["later"] == pytest.approx(0.0)
    assert got["top"] == pytest.approx(70.0)


def test_a_follows_from_child_hides_no_synchronous_sibling(tmp_path):
    # Were `log` a CHILD_OF child, it would finish last and hide `work` from the walk-back.
    got = _jaeger(
        tmp_path,
        [
            ("top", None, None, "api", 0, 100),
            ("work", "top", "CHILD_OF", "api", 10, 90),
            ("log", "top", "FOLLOWS_FROM", "api", 20, 95),
        ],
    )
    assert got["work"] == pytest.approx(80.0)
    assert got["top"] == pytest.approx(20.0)
    assert got.get("log", 0.0) == pytest.approx(0.0)


def test_a_follows_from_subtree_is_off_the_path_with_it(tmp_path):
    got = _jaeger(
        tmp_path,
        [
            ("top", None, None, "api", 0, 100),
            ("async", "top", "FOLLOWS_FROM", "api", 10, 60),
            ("inner", "async", "CHILD_OF", "db", 20, 50),
        ],
    )
    assert got["top"] == pytest.approx(100.0)
    assert got.get("inner", 0.0) == pytest.approx(0.0)


def test_producer_waits_consumer_does_not(tmp_path):
    got = _otlp(
        tmp_path,
        [
            ("top", None, "SPAN_KIND_SERVER", "api", 0, 100),
            ("send", "top", "SPAN_KIND_PRODUCER", "api", 10, 20),
            ("process", "send", "SPAN_KIND_CONSUMER", "worker", 30, 200),
        ],
    )
    assert got["send"] == pytest.approx(10.0)
    assert got["top"] == pytest.approx(90.0)
    assert got.get("process", 0.0) == pytest.approx(0.0)


def test_consumer_kind_by_number(tmp_path):
    got = _otlp(
        tmp_path,
        [
            ("top", None, 2, "api", 0, 100),
            ("process", "top", 5, "worker", 10, 90),
        ],
    )
    assert got["top"] == pytest.approx(100.0)


def test_a_child_that_outlives_its_parent_is_clipped(tmp_path):
    got = _jaeger(
        tmp_path,
        [
            ("top", None, None, "api", 0, 100),
            ("tail", "top", "CHILD_OF", "api", 50, 150),
        ],
    )
    assert got["tail"] == pytest.approx(50.0)
    assert got["top"] == pytest.approx(50.0)


def test_a_child_that_starts_after_its_parent_ended_is_dropped(tmp_path):
    got = _jaeger(
        tmp_path,
        [
            ("top", None, None, "api", 0, 100),
            ("first", "top", "CHILD_OF", "api", 10, 30),
            ("after", "top", "CHILD_OF", "api", 120, 130),
        ],
    )
    assert got["first"] == pytest.approx(20.0)
    assert got["top"] == pytest.approx(80.0)
    assert got.get("after", 0.0) == pytest.approx(0.0)


def test_a_child_that_starts_before_its_parent_is_clipped(tmp_path):
    got = _jaeger(
        tmp_path,
        [
            ("top", None, None, "api", 10, 100),
            ("early", "top", "CHILD_OF", "api", 0, 40),
        ],
    )
    assert got["early"] == pytest.approx(30.0)
    assert got["top"] == pytest.approx(60.0)


def test_a_long_async_child_leaves_the_total_whole(tmp_path):
    got = _jaeger(
        tmp_path,
        [
            ("top", None, None, "api", 0, 100),
            ("a", "top", "CHILD_OF", "db", 0, 50),
            ("b", "top", "CHILD_OF", "cache", 50, 100),
            ("bg", "top", "FOLLOWS_FROM", "queue", 0, 500),
        ],
    )
    assert sum(got.values()) == pytest.approx(100.0)
    assert got["a"] + got["b"] == pytest.approx(100.0)
