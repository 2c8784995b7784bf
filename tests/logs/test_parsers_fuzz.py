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


metric_values = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**9), max_value=10**19),
    st.text(max_size=5),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=4),
)
units = st.sampled_from(["ms", "ns", "s", "us", "furlongs", None])


@st.composite
def aiperf_records(draw):
    """AIPerf lines: each metric may be missing, null, text, a wrong unit; errors or not."""
    metrics = {}
    for name in ("ttft", "request_latency", "inter_chunk_latency", "output_sequence_length"):
        if draw(st.booleans()):
            metrics[name] = {"value": draw(metric_values), "unit": draw(units)}
    rec = {"metadata": {"timestamp_ns": draw(metric_values)}, "metrics": metrics}
    if draw(st.booleans()):
        rec["error"] = draw(st.one_of(st.none(), st.text(max_size=5), st.just({"code": 499})))
    return json.dumps(rec) if draw(st.integers(0, 9)) else draw(st.text(max_size=6))


@SETTINGS
@given(lines=st.lists(aiperf_records(), min_size=1, max_size=8))
def test_aiperf_malformed_records_are_counted(tmp_path, duck, lines):
    # A first line the sniffer recognises, then anything.
    head = '{"metadata": {"x_request_id": "a"}, "metrics": {}}'
    path = tmp_path / "profile_export.jsonl"
    path.write_text("\n".join([head, *lines]) + "\n")
    log = _read_or_log_error(path, duck)
    if log is not None:
        assert log.format == "aiperf"
        assert log.rows.total == len([ln for ln in [head, *lines] if ln.strip()])


@st.composite
def guidellm_requests(draw):
    timings = {k: draw(metric_values) for k in ("request_start", "request_end")}
    return {
        "request_id": draw(st.one_of(st.none(), st.text(max_size=4))),
        "request_latency": draw(metric_values),
        "time_to_first_token_ms": draw(metric_values),
        "output_tokens": draw(metric_values),
        "info": draw(st.one_of(st.just({"timings": timings, "error": "boom"}), json_values)),
    }


@SETTINGS
@given(
    groups=st.fixed_dictionaries(
        {g: st.lists(guidellm_requests(), max_size=4) for g in ("successful", "errored")}
    ),
    incomplete=st.integers(0, 3),
)
def test_guidellm_malformed_requests_are_counted(tmp_path, duck, groups, incomplete):
    requests = {**groups, "incomplete": [{"request_id": "i"}] * incomplete}
    doc = {"benchmarks": [{"scheduler_metrics": {}, "requests": requests}]}
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(doc))
    log = _read_or_log_error(path, duck)
    if log is not None:
        held = sum(len(v) for v in requests.values())
        assert log.rows.total == held
        assert log.rows.rejected_reasons.get("incomplete", 0) == incomplete


@SETTINGS
@given(
    n=st.integers(1, 5),
    ttft=metric_values,
    gap=metric_values,
    error=st.one_of(st.just(""), st.text(max_size=5)),
)
def test_sglang_malformed_arrays_are_counted(tmp_path, duck, n, ttft, gap, error):
    doc = {
        "mean_e2e_latency_ms": 1.0,
        "ttfts": [ttft] * n,
        "itls": [[gap]] * n,
        "output_lens": [2] * n,
        "errors": [error] * n,
    }
    path = tmp_path / "sglang.jsonl"
    path.write_text(json.dumps(doc) + "\n" + json.dumps({"mean_e2e_latency_ms": 2.0}) + "\n")
    log = _read_or_log_error(path, duck)
    if log is not None:
        assert log.format == "sglang" and log.rows.total == n


# int64 at most: the streaming parser (yajl) refuses larger integers as not valid JSON,
# as the line parser does past uint64.
otlp_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63) + 1, 2**63 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=6),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
span_fields = st.fixed_dictionaries(
    {},
    optional={
        "traceId": st.sampled_from(["t1", "t2", "", None, 7]),
        "spanId": st.sampled_from(["a", "b", "c", None]),
        "parentSpanId": st.sampled_from(["", "a", "b", None]),
        "name": st.one_of(st.text(max_size=4), st.none()),
        "kind": st.sampled_from([1, 2, 3, "SPAN_KIND_CLIENT", None]),
        "startTimeUnixNano": st.one_of(
            st.integers(0, 2**63 - 1), st.text("0123456789", max_size=20)
        ),
        "endTimeUnixNano": st.one_of(
            st.integers(-5, 2**63 - 1), st.floats(allow_nan=False, allow_infinity=False)
        ),
        "status": st.one_of(
            st.none(), st.fixed_dictionaries({"code": st.sampled_from([0, 2, "ERROR"])})
        ),
        "attributes": st.lists(
            st.fixed_dictionaries(
                {"key": st.sampled_from(["route", "tokens", "service.name"]), "value": otlp_values}
            ),
            max_size=3,
        ),
    },
)


@st.composite
def otlp_documents(draw):
    """OTLP TracesData with one spelling per level, the resource before or after the spans,
    scopeSpans or the older instrumentationLibrarySpans, and odd values in every field."""
    top = draw(st.sampled_from(["resourceSpans", "resource_spans"]))
    out = []
    for _ in range(draw(st.integers(0, 3))):
        scope = draw(st.sampled_from(["scopeSpans", "scope_spans", "instrumentationLibrarySpans"]))
        spans = draw(st.lists(st.one_of(span_fields, otlp_values), max_size=4))
        body: dict[str, object] = {scope: [{"spans": spans}] if draw(st.booleans()) else []}
        resource = {
            "attributes": draw(
                st.lists(
                    st.fixed_dictionaries({"key": st.just("service.name"), "value": otlp_values}),
                    max_size=2,
                )
            )
        }
        out.append(
            {"resource": resource, **body}
            if draw(st.booleans())
            else {**body, "resource": resource}
        )
    return {top: out}


@settings(max_examples=60, deadline=None)
@given(doc=otlp_documents(), indent=st.sampled_from([None, 1]))
def test_streamed_otlp_document_gives_the_parsed_documents_rows(doc, indent):
    import io

    from tailbudget.logs.traces import _streamed, otlp_spans

    data = json.dumps(doc, indent=indent).encode()
    keys = ("route", "tokens")
    assert list(_streamed(io.BytesIO(data), "t", keys)) == list(otlp_spans(doc, "t", keys))
