"""Benchmark: read_log on a large Parquet log next to a bare DuckDB query.

Both sides compute the same thing from the same file: row count, p50/p95/p99
of the total and the mean of every stage. Ours also canonicalises (casts,
NaN/negative/timestamp checks, rejection counts by reason) - that is the
price measured. Prints a markdown table.

    python bench/read_log.py            # 10,000,000 rows
    python bench/read_log.py --quick    # 200,000 rows

A second table reads a span table (1,000,000 spans of Train-Ticket-like traces by
default, `--spans N`) with critical-path attribution next to self time, the reading
before critical paths existed; each reading runs in its own process for its peak RSS.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

STAGES = ("embed", "retrieval", "rerank", "llm")


def make_log(path: Path, rows: int, seed: int = 0) -> None:
    """A realistic log: lognormal stages, a timestamp, a covariate, a cohort, 0.1% bad rows."""
    rng = np.random.default_rng(seed)
    chunk = 1_000_000
    writer = None
    start = np.datetime64("2024-05-01T00:00:00", "ms")
    for offset in range(0, rows, chunk):
        n = min(chunk, rows - offset)
        cols: dict[str, object] = {
            "request_id": pa.array(np.char.add("r", np.arange(offset, offset + n).astype(str))),
            "ts": pa.array(start + np.arange(offset, offset + n).astype("timedelta64[ms]") * 20),
        }
        total = np.zeros(n)
        for k, stage in enumerate(STAGES):
            v = rng.lognormal(mean=3 + k, sigma=0.5, size=n)
            total += v
            cols[f"{stage}_ms"] = v
        bad = rng.random(n) < 0.001
        total[bad] = -1.0
        cols["total_ms"] = total + rng.exponential(5, size=n)
        cols["seq_len"] = rng.integers(10, 4000, size=n)
        cols["route"] = pa.array(np.where(rng.random(n) < 0.3, "search", "chat"))
        table = pa.table(cols)
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    assert writer is not None
    writer.close()


def bare(path: Path) -> tuple[float, int]:
    con = duckdb.connect()
    means = ", ".join(f"avg({s}_ms)" for s in STAGES)
    t = time.perf_counter()
    row = con.execute(
        f"SELECT count(*), quantile_cont(total_ms, [0.5, 0.95, 0.99]), {means} "
        f"FROM read_parquet('{path}') WHERE total_ms >= 0"
    ).fetchone()
    return time.perf_counter() - t, int(row[0])


def ours(path: Path) -> tuple[float, int]:
    import ibis

    from tailbudget.logs import ReadOptions, read_log

    t = time.perf_counter()
    log = read_log(str(path), ReadOptions(shape=("seq_len",), cohorts=("route",)))
    tab = log.table
    aggs = {f"m_{s}": tab[log.stage_column(s)].mean() for s in log.stages}
    for q in (0.5, 0.95, 0.99):
        aggs[f"q{int(q * 100)}"] = tab.total_ms.quantile(q)
    result = tab.aggregate(n=tab.count(), **aggs).to_pyarrow()
    elapsed = time.perf_counter() - t
    assert ibis is not None
    return elapsed, int(result["n"][0].as_py())


def make_spans(path: Path, spans: int, seed: int = 0) -> int:
    """Traces of about 80 spans: a gateway root with a handler sibling next to its client
    call, then nested client/server pairs across services, sequential calls and fan-outs."""
    import random

    rng = random.Random(seed)
    cols: dict[str, list[object]] = {
        k: [] for k in ("TraceID", "SpanID", "ParentID", "PodName", "OperationName", "Start", "End")
    }
    t0 = 1_674_982_159_000_000_000
    services = [f"ts-svc{k}-service-6f6cfc45b-h5m2n" for k in range(30)]

    def add(trace: str, sid: str, parent: str, pod: str, op: str, lo: float, hi: float) -> None:
        for key, value in zip(
            cols, (trace, sid, parent, pod, op, t0 + int(lo * 1e6), t0 + int(hi * 1e6)), strict=True
        ):
            cols[key].append(value)

    n = traces = 0
    while n < spans:
        trace, k = f"{traces:032x}", 0
        t = float(traces) * 20.0
        end = t + rng.lognormvariate(4.5, 0.6)
        gw = services[0]
        add(trace, f"{trace}-0", "root", gw, "/*", t, end)
        add(trace, f"{trace}-1", f"{trace}-0", gw, "FilteringWebHandler.handle", t + 0.5, end)
        add(trace, f"{trace}-2", f"{trace}-0", gw, "HTTP POST", t + 1.0, end)
        k = 3
        frontier = [(f"{trace}-2", gw, t + 1.0, end, True)]
        while frontier and k < 80:
            sid, pod, lo, hi, client = frontier.pop(0)
            if client:  # the server span of another service, inside the client's wait
                callee = rng.choice(services[1:])
                child = f"{trace}-{k}"
                k += 1
                a, b = lo + (hi - lo) * 0.02, hi - (hi - lo) * 0.02
                add(trace, child, sid, callee, "/api/v1/op", a, b)
                frontier.append((child, callee, a, b, False))
                continue
            cursor = lo + (hi - lo) * 0.05
            while cursor < hi and k < 80:
                length = (hi - cursor) * rng.uniform(0.2, 0.6)
                for _ in range(rng.choice([1, 1, 2])):
                    child = f"{trace}-{k}"
                    k += 1
                    stop = cursor + length * rng.uniform(0.5, 1.0)
                    remote = rng.random() < 0.5
                    add(trace, child, sid, pod, "HTTP GET" if remote else "SELECT x", cursor, stop)
                    if remote:
                        frontier.append((child, pod, cursor, stop, True))
                cursor += length * 1.1
        n += k
        traces += 1
    table = pa.table(
        {
            "TraceID": cols["TraceID"],
            "SpanID": cols["SpanID"],
            "ParentID": cols["ParentID"],
            "PodName": cols["PodName"],
            "OperationName": cols["OperationName"],
            "StartTimeUnixNano": pa.array(cols["Start"], pa.int64()),
            "EndTimeUnixNano": pa.array(cols["End"], pa.int64()),
        }
    )
    pq.write_table(table, path)
    return n


def _read_spans(path: str, attribution: str, out: object) -> None:
    from tailbudget.logs import ReadOptions, read_log

    t = time.perf_counter()
    log = read_log(path, ReadOptions(span_stage="service", span_attribution=attribution))  # type: ignore[arg-type]
    tab = log.table
    aggs = {f"m_{s}": tab[log.stage_column(s)].mean() for s in log.stages}
    result = tab.aggregate(n=tab.count(), p99=tab.total_ms.quantile(0.99), **aggs).to_pyarrow()
    elapsed = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out.put((elapsed, int(result["n"][0].as_py()), rss))  # type: ignore[attr-defined]


def spans_table(n_spans: int) -> None:
    """Span-table reading: critical path next to self time, each in a fresh process."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spans.parquet"
        made = make_spans(path, n_spans)
        results = {}
        for attribution in ("self", "critical_path"):
            runs = []
            for _ in range(2):
                queue = ctx.Queue()
                proc = ctx.Process(target=_read_spans, args=(str(path), attribution, queue))
                proc.start()
                runs.append(queue.get())
                proc.join()
            results[attribution] = min(runs, key=lambda r: r[0])
    base = results["self"]
    print(f"\nSpan table: {made:,} spans (Parquet), stages by service; best of 2 runs each\n")
    print("| what | wall time (s) | traces | peak RSS (MB) | ratio |")
    print("|---|---:|---:|---:|---:|")
    for attribution, label in (
        ("self", "read_log, self time (span minus its children)"),
        ("critical_path", "read_log, critical path (+ network gaps on the callee)"),
    ):
        s, n, rss = results[attribution]
        print(f"| {label} | {s:.3f} | {n:,} | {rss:.0f} | {s / base[0]:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200,000 rows")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--spans", type=int, default=None, help="spans in the span table")
    parser.add_argument("--only-spans", action="store_true", help="skip the Parquet log table")
    args = parser.parse_args()
    if args.only_spans:
        spans_table(args.spans or (100_000 if args.quick else 1_000_000))
        return
    rows = args.rows or (200_000 if args.quick else 10_000_000)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log.parquet"
        make_log(path, rows)
        size_mb = os.path.getsize(path) / 1e6
        bare_s, bare_n = min((bare(path) for _ in range(3)), key=lambda r: r[0])
        ours_s, ours_n = min((ours(path) for _ in range(3)), key=lambda r: r[0])
    assert bare_n == ours_n, (bare_n, ours_n)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"Parquet log: {rows:,} rows, {size_mb:.0f} MB; best of 3 runs; peak RSS {rss_mb:.0f} MB\n"
    )
    print("| what | wall time (s) | rows used | ratio |")
    print("|---|---:|---:|---:|")
    print(
        "| bare DuckDB query (count, p50/p95/p99, stage means) "
        f"| {bare_s:.3f} | {bare_n:,} | 1.00 |"
    )
    print(
        f"| tailbudget read_log + same query (canonical table, rejection counts) "
        f"| {ours_s:.3f} | {ours_n:,} | {ours_s / bare_s:.2f} |"
    )
    spans_table(args.spans or (100_000 if args.quick else 1_000_000))


if __name__ == "__main__":
    main()
