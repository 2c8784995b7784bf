"""Peak memory of reading large OTLP files: flat, well below parsing the file whole.

Each reading runs in a fresh interpreter; its peak RSS (VmHWM) after the reading,
less the peak after a warm-up reading of a tiny file (imports, the DuckDB session),
is what the reading itself took.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/self/status"), reason="VmHWM is read from /proc (Linux)"
)

SPANS = 30_000
BOUND_MB = 100
"""What the streamed reading may add to the interpreter's peak, for any file size."""

_SCRIPT = """
import sys
from tailbudget.logs import ReadOptions, read_log


def hwm():
    with open("/proc/self/status") as fh:
        return next(int(ln.split()[1]) for ln in fh if ln.startswith("VmHWM")) // 1024


def whole(path):
    import orjson

    with open(path, "rb") as fh:
        return [orjson.loads(line) for line in fh if line.strip()]


mode, tiny, big = sys.argv[1:4]
read = whole if mode == "whole" else lambda p: read_log(p, ReadOptions(span_stage="service"))
read(tiny)
base = hwm()
result = read(big)
requests = len(result) if mode == "whole" else result.rows.used
print(requests, hwm() - base)
"""


def _span(trace: int, k: int, parent: str, t0: int) -> dict[str, object]:
    # HTTP spans as instrumentations write them: a dozen attributes each.
    attrs = {
        "http.request.method": "POST",
        "http.route": f"/v1/op{k}",
        "url.full": f"http://svc{k}.local:8080/v1/op{k}?q={trace}",
        "server.address": f"svc{k}.local",
        "server.port": 8080,
        "network.protocol.version": "1.1",
        "user_agent.original": "python-httpx/0.27",
        "http.response.status_code": 200,
        "thread.name": "worker-3",
        "code.function": f"handle_op{k}",
        "code.namespace": "app.handlers",
        "tenant": f"t{trace % 7}",
    }
    return {
        "traceId": f"{trace + 1:032x}",
        "spanId": f"{trace + 1:08x}{k + 1:08x}",
        "parentSpanId": parent,
        "name": f"op{k}",
        "kind": 2 if not parent else 3,
        "startTimeUnixNano": str(t0 + k * 1_000_000),
        "endTimeUnixNano": str(t0 + (20 - k) * 1_000_000),
        "attributes": [
            {"key": key, "value": {"intValue" if isinstance(v, int) else "stringValue": str(v)}}
            for key, v in attrs.items()
        ],
        "status": {"code": 0},
    }


def _resource_spans(first: int, traces: int) -> dict[str, object]:
    spans = []
    for trace in range(first, first + traces):
        t0 = 1_700_000_000_000_000_000 + trace * 50_000_000
        root = f"{trace + 1:08x}{1:08x}"
        spans.append(_span(trace, 0, "", t0))
        spans.extend(_span(trace, k, root, t0) for k in range(1, 5))
    return {
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "api"}}]},
        "scopeSpans": [{"scope": {"name": "test"}, "spans": spans}],
    }


def _write(path: Path, layout: str, spans: int) -> None:
    """A Collector file (one request a line) or one minified document, `spans` spans."""
    per_line = 400  # traces of 5 spans
    blocks = [_resource_spans(first, per_line) for first in range(0, spans // 5, per_line)]
    with open(path, "wb") as fh:
        if layout == "lines":
            for block in blocks:
                fh.write(orjson.dumps({"resourceSpans": [block]}) + b"\n")
        else:
            fh.write(orjson.dumps({"resourceSpans": blocks}))


def _peak(mode: str, tiny: Path, big: Path) -> tuple[int, int]:
    env = {k: v for k, v in os.environ.items() if k != "TAILBUDGET_MEMORY_LIMIT"}
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, mode, str(tiny), str(big)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=300,
    )
    requests, added = out.stdout.split()
    return int(requests), int(added)


@pytest.mark.parametrize("layout", ["lines", "document"])
def test_reading_a_large_otlp_file_stays_within_a_bound(tmp_path, layout):
    tiny, big = tmp_path / f"tiny.{layout}", tmp_path / f"big.{layout}"
    _write(tiny, layout, 2_000)
    _write(big, layout, SPANS)
    size_mb = big.stat().st_size / 1e6
    assert size_mb > 25  # tens of MB: whole, they take far more than the bound
    requests, added = _peak("read", tiny, big)
    assert requests == SPANS // 5
    assert added < BOUND_MB, f"{layout}: {size_mb:.0f} MB file added {added} MB to the peak"
    # The bound is one that parsing the file whole (the json objects alone) exceeds.
    _, whole = _peak("whole", tiny, big)
    assert whole > BOUND_MB * 1.5, whole
