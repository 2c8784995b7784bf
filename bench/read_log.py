"""Benchmark: read_log on a large Parquet log next to a bare DuckDB query.

Both sides compute the same thing from the same file: row count, p50/p95/p99
of the total and the mean of every stage. Ours also canonicalises (casts,
NaN/negative/timestamp checks, rejection counts by reason) - that is the
price measured. Prints a markdown table.

    python bench/read_log.py            # 10,000,000 rows
    python bench/read_log.py --quick    # 200,000 rows
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
    aggs = {f"m_{s}": tab[f"{s}_ms"].mean() for s in log.stages}
    for q in (0.5, 0.95, 0.99):
        aggs[f"q{int(q * 100)}"] = tab.total_ms.quantile(q)
    result = tab.aggregate(n=tab.count(), **aggs).to_pyarrow()
    elapsed = time.perf_counter() - t
    assert ibis is not None
    return elapsed, int(result["n"][0].as_py())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200,000 rows")
    parser.add_argument("--rows", type=int, default=None)
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
