"""Benchmark: reading large OTLP JSON trace files, next to a bare json.load + pyarrow.

Two generated OTLP files of each layout (the OpenTelemetry Collector's file exporter,
one ExportTraceServiceRequest a line, and one pretty-printed document) are read by
`read_log` (critical-path stages, every request's figures on DuckDB) and by the peer:
`json.load` (a line at a time for the Collector file, the whole document otherwise)
and the spans flattened into one pyarrow table - no requests computed. Each reading runs in its own process for its peak RSS. Prints a markdown table.

    python bench/traces.py             # about 150 MB and 300 MB files
    python bench/traces.py --quick     # about 15 MB and 30 MB files
    python bench/traces.py --live [--spans 1000000]

`--live`: the same traces as OTLP/HTTP protobuf requests of about 512 spans (the
SDK's BatchSpanProcessor batch) POSTed by four clients to `serve --traces` on
loopback, timed until every trace is attributed (observations_total), next to a
bare protobuf decode of the same requests in this process (ParseFromString and a
walk over every span's ids and times: no durability, no assembly, no attribution).
The server's RSS is sampled as the spans go in (flat = bounded memory).
"""

from __future__ import annotations

import argparse
import base64
import json
import multiprocessing as mp
import os
import random
import resource
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SERVICES = ("gateway", "chat-api", "retriever", "vector-db", "reranker", "llm-server")
LAYOUTS = (("lines", "jsonl"), ("document", "json"))
BYTES_PER_SPAN = {"lines": 365, "document": 815}  # about; to aim at a file size


def _value(v: object) -> dict[str, object]:
    if isinstance(v, int):
        return {"intValue": str(v)}
    return {"stringValue": str(v)}


def _attrs(**kv: object) -> list[dict[str, object]]:
    return [{"key": k, "value": _value(v)} for k, v in kv.items()]


def _trace(rng: random.Random, number: int) -> dict[str, list[dict[str, Any]]]:
    """One request's spans grouped by service: gateway -> chat-api, which calls retrieval
    (retriever -> vector-db), a reranker and the LLM server; some calls fan out."""
    trace = f"{number + 1:032x}"
    t0 = 1_700_000_000_000_000_000 + number * 20_000_000
    by_service: dict[str, list[dict[str, Any]]] = {s: [] for s in SERVICES}
    count = 0

    def span(service: str, name: str, parent: str, lo: int, hi: int, kind: int) -> str:
        nonlocal count
        sid = f"{number + 1:08x}{count + 1:08x}"
        count += 1
        by_service[service].append(
            {
                "traceId": trace,
                "spanId": sid,
                "parentSpanId": parent,
                "name": name,
                "kind": kind,
                "startTimeUnixNano": str(lo),
                "endTimeUnixNano": str(hi),
                "attributes": _attrs(**{"http.route": name, "net.peer.port": 8080}),
                "status": {"code": 2 if rng.random() < 0.002 else 0},
            }
        )
        return sid

    ms = 1_000_000
    end = t0 + int(rng.lognormvariate(5.0, 0.5) * ms)
    root = span("gateway", "POST /v1/chat", "", t0, end, 2)
    call = span("gateway", "HTTP POST", root, t0 + ms, end - ms, 3)
    api = span("chat-api", "/v1/chat", call, t0 + 2 * ms, end - 2 * ms, 2)
    cursor = t0 + 3 * ms
    for service, name, share in (
        ("retriever", "/search", 0.15),
        ("reranker", "/rerank", 0.1),
        ("llm-server", "/generate", 0.6),
    ):
        hi = cursor + int((end - t0) * share * rng.uniform(0.6, 1.0))
        client = span("chat-api", f"HTTP POST {name}", api, cursor, hi, 3)
        server = span(service, name, client, cursor + ms // 2, hi - ms // 2, 2)
        if service == "retriever":
            for _ in range(rng.choice((1, 2, 3))):
                db = span("retriever", "vector search", server, cursor + ms, hi - ms, 3)
                span("vector-db", "knn", db, cursor + 2 * ms, hi - 2 * ms, 2)
        else:
            span(service, "compute", server, cursor + ms, hi - ms, 1)
        cursor = hi + ms
    return by_service


def _requests(spans: int, per_request: int) -> Iterator[dict[str, Any]]:
    """ExportTraceServiceRequest objects of about `per_request` spans, up to `spans` in all."""
    rng = random.Random(0)
    made = number = 0
    while made < spans:
        grouped: dict[str, list[dict[str, Any]]] = {s: [] for s in SERVICES}
        batch = 0
        while batch < per_request and made + batch < spans:
            for service, rows in _trace(rng, number).items():
                grouped[service].extend(rows)
                batch += len(rows)
            number += 1
        made += batch
        yield {
            "resourceSpans": [
                {
                    "resource": {"attributes": _attrs(**{"service.name": s, "host.name": "h1"})},
                    "scopeSpans": [{"scope": {"name": "bench"}, "spans": rows}],
                }
                for s, rows in grouped.items()
                if rows
            ]
        }


def write_otlp(path: Path, spans: int, layout: str) -> None:
    """A Collector file (`lines`) or one pretty-printed document (`document`) of OTLP JSON."""
    with open(path, "w") as fh:
        if layout == "lines":
            for request in _requests(spans, 4_000):
                fh.write(json.dumps(request, separators=(",", ":")) + "\n")
            return
        # One document: every request's resourceSpans in one list, indented as
        # protobuf's json_format and most tools write it.
        fh.write('{\n  "resourceSpans": [')
        first = True
        for request in _requests(spans, 4_000):
            for rs in request["resourceSpans"]:
                fh.write(("" if first else ",") + "\n    ")
                fh.write(json.dumps(rs, indent=2).replace("\n", "\n    "))
                first = False
        fh.write("\n  ]\n}\n")


def _ours(path: str, out: Any) -> None:
    from tailbudget.logs import ReadOptions, read_log

    t = time.perf_counter()
    log = read_log(path, ReadOptions(span_stage="service"))
    tab = log.table
    result = tab.aggregate(n=tab.count(), p99=tab.total_ms.quantile(0.99)).to_pyarrow()
    elapsed = time.perf_counter() - t
    out.put((elapsed, int(result["n"][0].as_py()), _peak_mb()))


def _peer(path: str, out: Any) -> None:
    import pyarrow as pa

    t = time.perf_counter()
    rows = []
    with open(path, "rb") as fh:
        # A line at a time for the Collector file: only the rows are kept.
        docs = (json.loads(line) for line in fh) if path.endswith(".jsonl") else [json.load(fh)]
        for doc in docs:
            _flatten(doc, rows)
    table = pa.Table.from_pylist(rows)
    traces = len(set(table.column("trace_id").to_pylist()))
    elapsed = time.perf_counter() - t
    out.put((elapsed, traces, _peak_mb()))


def _flatten(doc: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    for rs in doc["resourceSpans"]:
        service = rs["resource"]["attributes"][0]["value"]["stringValue"]
        for scope in rs["scopeSpans"]:
            for s in scope["spans"]:
                rows.append(
                    {
                        "trace_id": s["traceId"],
                        "span_id": s["spanId"],
                        "parent_id": s["parentSpanId"],
                        "name": s["name"],
                        "service": service,
                        "start_ns": int(s["startTimeUnixNano"]),
                        "end_ns": int(s["endTimeUnixNano"]),
                    }
                )


def _peak_mb() -> float:
    """This process's peak RSS (VmHWM), in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _run(target: Any, path: str) -> tuple[float, int, float]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(path, queue))
    proc.start()
    result: tuple[float, int, float] = queue.get()
    proc.join()
    return result


def _protobuf_requests(spans: int) -> list[bytes]:
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    out = []
    for doc in _requests(spans, 512):
        for rs in doc["resourceSpans"]:
            for scope in rs["scopeSpans"]:
                for span in scope["spans"]:
                    # json_format reads ids as base64; OTLP/JSON writes them as hex
                    for key in ("traceId", "spanId", "parentSpanId"):
                        raw = bytes.fromhex(span[key]) if span[key] else b""
                        span[key] = base64.b64encode(raw).decode()
        out.append(json_format.ParseDict(doc, ExportTraceServiceRequest()).SerializeToString())
    return out


def _bare_decode(bodies: list[bytes]) -> tuple[float, int]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    t = time.perf_counter()
    n = 0
    for body in bodies:
        req = ExportTraceServiceRequest.FromString(body)
        for rs in req.resource_spans:
            for scope in rs.scope_spans:
                for span in scope.spans:
                    _ = (span.trace_id, span.span_id, span.parent_span_id)
                    _ = (span.start_time_unix_nano, span.end_time_unix_nano)
                    n += 1
    return time.perf_counter() - t, n


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def live(spans: int) -> None:
    import concurrent.futures
    import socket
    import subprocess
    import sys

    import httpx

    bodies = _protobuf_requests(spans)
    n_traces = sum(1 for _ in _trace_ids(bodies))
    bare_s, n_spans = _bare_decode(bodies)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(__file__).resolve().parents[1] / "src"
        argv = [sys.executable, "-m", "tailbudget", "serve", "--traces", "--port", str(port)]
        argv += ["--state-dir", tmp, "--span-stage", "service", "--trace-grace", "1s"]
        proc = subprocess.Popen(
            argv, env={**os.environ, "PYTHONPATH": str(src)}, stderr=subprocess.DEVNULL
        )
        url = f"http://127.0.0.1:{port}"
        try:
            while True:
                try:
                    httpx.get(f"{url}/v1/status", timeout=1)
                    break
                except httpx.HTTPError:
                    time.sleep(0.1)
            rss = [(0, _rss_mb(proc.pid))]
            headers = {"Content-Type": "application/x-protobuf"}
            step = max(1, len(bodies) // 8)
            with httpx.Client(timeout=60) as client:

                def post(body: bytes) -> None:
                    # as the OTLP exporters do: a 503 (attribution behind) is retried
                    while True:
                        r = client.post(f"{url}/v1/traces", content=body, headers=headers)
                        if r.status_code != 503:
                            r.raise_for_status()
                            return
                        time.sleep(float(r.headers.get("retry-after", "1")))

                t = time.perf_counter()
                with concurrent.futures.ThreadPoolExecutor(4) as pool:
                    for k in range(0, len(bodies), step):
                        list(pool.map(post, bodies[k : k + step]))
                        rss.append(
                            (min(k + step, len(bodies)) * n_spans // len(bodies), _rss_mb(proc.pid))
                        )
                posted = time.perf_counter() - t
                while (
                    httpx.get(f"{url}/v1/status", timeout=30).json()["observations_total"]
                    < n_traces
                ):
                    time.sleep(0.2)
                done = time.perf_counter() - t
        finally:
            proc.terminate()
            proc.wait(30)
    print(f"{n_spans:,} spans in {len(bodies):,} protobuf requests ({n_traces:,} traces)\n")
    print("| what | wall time (s) | spans/s | ratio to bare decode |")
    print("|---|---:|---:|---:|")
    print(
        f"| bare protobuf decode (ParseFromString + span walk) | {bare_s:.2f} | {n_spans / bare_s:,.0f} | 1.00 |"
    )
    print(
        f"| serve --traces: acknowledged (durable) | {posted:.2f} | {n_spans / posted:,.0f} | {posted / bare_s:.1f} |"
    )
    print(
        f"| serve --traces: every trace attributed | {done:.2f} | {n_spans / done:,.0f} | {done / bare_s:.1f} |"
    )
    print("\nserver RSS (MB) as spans go in: " + ", ".join(f"{k:,}: {mb:.0f}" for k, mb in rss))


def _trace_ids(bodies: list[bytes]) -> set[bytes]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    ids = set()
    for body in bodies:
        for rs in ExportTraceServiceRequest.FromString(body).resource_spans:
            for scope in rs.scope_spans:
                ids.update(span.trace_id for span in scope.spans)
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="about 15 MB and 30 MB files")
    parser.add_argument("--mb", type=int, nargs="*", help="file sizes to aim at, in MB")
    parser.add_argument(
        "--layout", choices=("lines", "document"), nargs="*", help="only these layouts"
    )
    parser.add_argument("--live", action="store_true", help="serve --traces over loopback")
    parser.add_argument("--spans", type=int, default=1_000_000, help="spans sent with --live")
    args = parser.parse_args()
    if args.live:
        live(args.spans)
        return
    layouts = [(lay, ext) for lay, ext in LAYOUTS if not args.layout or lay in args.layout]
    sizes = args.mb or ([15, 30] if args.quick else [150, 300])
    print("| file | what | wall time (s) | traces | peak RSS (MB) | time ratio |")
    print("|---|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for mb in sizes:
            for layout, ext in layouts:
                path = Path(tmp) / f"traces-{mb}.{ext}"
                spans = mb * 1_000_000 // BYTES_PER_SPAN[layout]
                write_otlp(path, spans, layout)
                size = os.path.getsize(path) / 1e6
                kind = "Collector file" if layout == "lines" else "document"
                name = f"{size:.0f} MB OTLP {kind} ({spans / 1e6:.2f}M spans)"
                peer = _run(_peer, str(path))
                ours = _run(_ours, str(path))
                assert peer[1] == ours[1], (peer, ours)
                print(
                    f"| {name} | json.load + pyarrow (spans only) | {peer[0]:.2f} "
                    f"| {peer[1]:,} | {peer[2]:.0f} | 1.00 |"
                )
                print(
                    f"| {name} | tailbudget read_log (critical path) | {ours[0]:.2f} "
                    f"| {ours[1]:,} | {ours[2]:.0f} | {ours[0] / peer[0]:.2f} |"
                )
                path.unlink()


if __name__ == "__main__":
    main()
