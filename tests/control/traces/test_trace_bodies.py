"""Issue 35's bodies: multi-member gzip whole, a corrupt body a 400 (never a 503 the
exporter retries forever), OTLP JSON checked by field type, serve without its extra."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pyarrow as pa
import pytest

from tailbudget.serve.limits import BodyLimits, decompress
from tailbudget.serve.traces.otlp_body import BadTraces, decode_traces, export_response
from tests.control.traces.test_hostile_spans import _good, _request

SRC = Path(__file__).resolve().parents[3] / "src"

JSON = "application/json"
PB = "application/x-protobuf"


def _doc(spans, resource=None):
    rs = {"scopeSpans": [{"spans": spans}]}
    if resource is not None:
        rs["resource"] = resource
    return {"resourceSpans": [rs]}


def _span(k, **fields):
    t0 = time.time_ns()
    span = {
        "traceId": f"{k:032x}",
        "spanId": f"{k:016x}",
        "name": "op",
        "kind": 2,
        "startTimeUnixNano": str(t0),
        "endTimeUnixNano": str(t0 + 1000),
    }
    return {**span, **fields}


@pytest.mark.parametrize("kind", [PB, JSON])
def test_a_multi_member_gzip_body_is_decoded_whole(kind):
    if kind == PB:
        parts = [_request(_good(1, 3)), _request(_good(4, 3))]
    else:
        parts = [orjson.dumps(_doc([_span(k) for k in range(1, 4)]))]
        parts.append(orjson.dumps(_doc([_span(k) for k in range(4, 7)])))
    if kind == JSON:  # two JSON documents do not concatenate; the gzip members do
        body = gzip.compress(parts[0][:20]) + gzip.compress(parts[0][20:])
        assert len(decode_traces(body, kind, "gzip").spans) == 3
        return
    body = gzip.compress(parts[0]) + gzip.compress(parts[1])
    assert len(decode_traces(body, kind, "gzip").spans) == 12


def test_decompress_keeps_its_bound_across_members():
    member = gzip.compress(b"x" * 600)
    with pytest.raises(ValueError, match="decodes to"):
        decompress(member * 2, "gzip", BodyLimits(max_body=100, max_decoded_bytes=1000))
    assert len(decompress(member * 2, "gzip", BodyLimits(max_decoded_bytes=1200))) == 1200


@pytest.mark.parametrize(
    ("body", "encoding"),
    [
        (pa.compress(b"x" * 5000, codec="zstd", asbytes=True)[:-6], "zstd"),
        (b"(\xb5/\xfd" + b"\xff" * 40, "zstd"),
        (gzip.compress(b"x" * 5000)[:-9], "gzip"),
        (gzip.compress(b"x") + b"trailing junk", "gzip"),
    ],
)
def test_a_body_that_fails_to_decompress_is_a_400(body, encoding):
    with pytest.raises(BadTraces) as caught:
        decode_traces(body, PB, encoding)
    assert caught.value.status == 400, caught.value


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ([], "the body must be an OTLP JSON object"),
        ({"resourceSpans": "x"}, "resourceSpans must be a list, got string"),
        ({"resourceSpans": [1]}, "resourceSpans[0] must be an object, got int"),
        ({"resourceSpans": [{"resource": []}]}, "resourceSpans[0].resource must be an object"),
        ({"resourceSpans": [{"scopeSpans": {}}]}, "resourceSpans[0].scopeSpans must be a list"),
        (
            {"resourceSpans": [{"scopeSpans": [{"spans": "abc"}]}]},
            "resourceSpans[0].scopeSpans[0].spans must be a list, got string",
        ),
        (
            _doc([_span(1)], {"attributes": [{"key": "service.name", "value": {"intValue": 3}}]}),
            "resourceSpans[0].resource.attributes[0].value.stringValue (service.name)",
        ),
    ],
)
def test_otlp_json_of_the_wrong_shape_is_a_400_naming_the_field(doc, field):
    with pytest.raises(BadTraces) as caught:
        decode_traces(orjson.dumps(doc), JSON, None)
    assert caught.value.status == 400
    assert field in str(caught.value)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"startTimeUnixNano": {"a": 1}}, "spans[1].startTimeUnixNano must be an integer"),
        ({"endTimeUnixNano": 1.5}, "spans[1].endTimeUnixNano must be an integer"),
        ({"traceId": 12}, "spans[1].traceId must be a string, got int"),
        ({"name": ["x"]}, "spans[1].name must be a string, got list"),
        ({"kind": True}, "spans[1].kind must be an integer or an enum name"),
        ({"status": "ERROR"}, "spans[1].status must be an object"),
        ({"status": {"code": 2.0}}, "spans[1].status.code must be an integer or an enum name"),
    ],
)
def test_a_span_field_of_the_wrong_type_is_a_counted_partial_success(fields, named):
    doc = _doc([_span(1), _span(2, **fields), _span(3)])
    decoded = decode_traces(orjson.dumps(doc), JSON, None)
    assert len(decoded.spans) == 2 and decoded.reasons == {"wrong_type": 1}
    body = orjson.loads(export_response(JSON, decoded)[0])
    assert body["partialSuccess"]["rejectedSpans"] == 1
    assert named in body["partialSuccess"]["errorMessage"]


def test_otlp_json_enum_names_and_integer_times_are_read():
    t0 = time.time_ns()
    span = _span(
        1,
        kind="SPAN_KIND_CLIENT",
        startTimeUnixNano=t0,
        endTimeUnixNano=t0 + 5,
        status={"code": "STATUS_CODE_ERROR"},
    )
    (row,) = decode_traces(orjson.dumps(_doc([span])), JSON, None).spans
    assert (row.kind, row.error, row.start_ns, row.end_ns) == ("3", True, t0, t0 + 5)


def test_serve_without_its_extra_exits_2_naming_it(tmp_path):
    code = (
        "import sys\n"
        "for m in ('starlette', 'uvicorn', 'httptools', 'httpx'): sys.modules[m] = None\n"
        "from tailbudget.cli import main\n"
        f"sys.argv = ['tailbudget', 'serve', '--state-dir', {str(tmp_path / 's')!r}]\n"
        "main()\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    assert run.returncode == 2, run.stderr
    assert "tailbudget[serve]" in run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()  # nothing opened before the check
