"""Benchmark: how the full audit's time and peak memory grow with the log, next to bare DuckDB.

At each size (1M, 10M and 100M rows of the demo service by default) two child processes
read the same Parquet file: the bare DuckDB queries of bench/audit.py (the same
percentiles, R², cohort group-bys and timeline, by hand) and `tailbudget audit` (read,
full audit, markdown). One run per side and size; peak RSS is each process's own VmHWM. Next to the wall-time
ratio, the ratio of CPU seconds (all threads of each process): on a shared machine it
moves far less with the other load than wall time does.
The last column compares the audit's gating figures (end-to-end and per-stage p50/p95/p99,
cohort p99s) with the bare query's exact `quantile_cont`.

    python bench/audit_scale.py --data-dir /work/benchdata          # 1M, 10M, 100M rows
    python bench/audit_scale.py --sizes 1000000,10000000             # chosen sizes
    python bench/audit_scale.py --quick                              # 300k and 1M rows

Logs are generated once per size into --data-dir (about 2 GB at 100M rows; keep it out
of the repository) and reused.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import audit as single  # noqa: E402  (bench/audit.py: the generator and the bare queries)

QS = (0.5, 0.95, 0.99)


def child_bare(path: str) -> None:
    import duckdb

    con = duckdb.connect()
    t0, c0 = time.perf_counter(), time.process_time()
    results = [con.execute(q).fetchall() for q in single.bare_sql(Path(path))]
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    first = results[0][0]
    figures: dict[str, float] = {}
    names = ["total", *single.STAGES, "unattributed"]
    lists = [first[0], *first[3:]]
    for name, values in zip(names, lists, strict=True):
        for q, v in zip(QS, values, strict=True):
            figures[f"{name} p{q * 100:g}"] = float(v)
    for dim, rows in zip(single.COHORTS, results[2 : 2 + len(single.COHORTS)], strict=True):
        for value, _, p99 in rows:
            figures[f"{dim}={value} p99"] = float(p99)
    single._report(seconds, {"figures": figures, "cpu": cpu})


def child_audit(path: str, events: str) -> None:
    sys.path.insert(0, str(HERE.parent / "src"))
    from tailbudget.audit import AuditConfig, run_audit
    from tailbudget.audit.events import read_events
    from tailbudget.logs import ReadOptions, read_log
    from tailbudget.report.audit_md import audit_markdown

    t0, c0 = time.perf_counter(), time.process_time()
    options = ReadOptions(timestamp="ts", shape=single.SHAPE, cohorts=single.COHORTS, error="error")
    log = read_log(path, options)
    config = AuditConfig.of_e2e(
        {"p50": 1300.0, "p95": 2800.0, "p99": 4000.0}, events=read_events(Path(events))
    )
    report = run_audit(log, config)
    audit_markdown(report)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    figures: dict[str, float] = {}
    snap = report.snapshot
    for q, v in zip(QS, (snap.p50, snap.p95, snap.p99), strict=True):
        figures[f"total p{q * 100:g}"] = v
    for s in report.stages:
        for q, v in zip(QS, (s.p50, s.p95, s.p99), strict=True):
            figures[f"{s.name} p{q * 100:g}"] = v
    for c in report.cohorts:
        figures[f"{c.dim}={c.value} p99"] = c.p99
    method = next((n for n in report.provenance.notes if "percentiles" in n), "")
    single._report(
        seconds,
        {
            "figures": figures,
            "cpu": cpu,
            "method": method,
            "passes": report.provenance.notes[-1],
            "hypotheses": [h.kind for h in report.hypotheses],
        },
    )


def _max_diff(bare: dict[str, float], audit: dict[str, float]) -> tuple[float, str]:
    worst, where = 0.0, "-"
    for key, ref in bare.items():
        got = audit.get(key)
        if got is None:
            continue
        diff = abs(got - ref) / max(abs(ref), 1e-9)
        if diff >= worst:
            worst, where = diff, key
    return worst, where


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000000,10000000,100000000")
    ap.add_argument("--quick", action="store_true", help="300k and 1M rows")
    ap.add_argument("--data-dir", type=Path, default=single.OUT)
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        if a.child[0] == "bare":
            child_bare(a.child[1])
        else:
            child_audit(a.child[1], a.child[2])
        return
    sizes = [300_000, 1_000_000] if a.quick else [int(s) for s in a.sizes.split(",")]
    lines = [
        "| rows | bare DuckDB s | bare peak RSS MiB | audit s | audit peak RSS MiB "
        "| x bare | x bare, CPU s | audit s per 1M rows | largest figure difference |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    method = ""
    found: list[str] = []
    for rows in sizes:
        path, events = single.generate(rows, a.data_dir)
        bare = _run(["--child", "bare", str(path)])
        audit = _run(["--child", "audit", str(path), str(events)])
        method = str(audit["method"])
        found.append(f"{rows:,} rows: {', '.join(map(str, audit['hypotheses']))}")  # type: ignore[call-overload]
        diff, where = _max_diff(bare["figures"], audit["figures"])  # type: ignore[arg-type]
        lines.append(
            f"| {rows:,} | {_secs(bare):.1f} | {_rss(bare):.0f} | {_secs(audit):.1f} | "
            f"{_rss(audit):.0f} | {_secs(audit) / _secs(bare):.2f} | "
            f"{_cpu(audit) / _cpu(bare):.2f} ({_cpu(audit):.1f} / {_cpu(bare):.1f}) | "
            f"{_secs(audit) / (rows / 1e6):.2f} | {diff:.4%} ({where}) |"
        )
        print(lines[-1], file=sys.stderr, flush=True)
    print(f"\nAudit cost by log size (DuckDB, {single._cores()} cores, one run per side)\n")
    print("\n".join(lines))
    print(f"\n{method}")
    print("hypotheses found: " + "; ".join(found))


def _run(args: list[str]) -> dict[str, object]:
    return single._run(args, __file__)


def _secs(result: dict[str, object]) -> float:
    return float(result["seconds"])  # type: ignore[arg-type]


def _cpu(result: dict[str, object]) -> float:
    return float(result["cpu"])  # type: ignore[arg-type]


def _rss(result: dict[str, object]) -> float:
    return float(result["rss_mib"])  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
