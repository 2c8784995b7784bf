"""Benchmark: full `tailbudget audit` of a 10M-row Parquet log vs a bare DuckDB query.

The bare query computes the same figures by hand in one script: end-to-end and per-stage
percentiles, R^2 of every (stage, covariate) pair, the cohort group-bys and the per-minute
timeline. Each side runs in its own child process so peak RSS is measured per side.

    python bench/audit.py            # 10,000,000 rows (generated once into bench/out/)
    python bench/audit.py --quick    # 300,000 rows
    python bench/audit.py --rows N

A third run audits the same log with objectives on top of the e2e SLO (an e2e p99.9,
two stage objectives and goodput over every threshold): its ratio to the e2e-only audit
is the cost of objectives.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
STAGES = ("embedding", "retrieval", "rerank", "llm")
SHAPE = ("output_tokens", "context_tokens", "query_tokens", "top_k")
COHORTS = ("route", "model_variant", "region")
CHUNK = 1_000_000
OBJECTIVES = "p50=1300,p95=2800,p99=4000,e2e.p99.9=9000,llm.p99=3000,retrieval.p99=800,goodput=0.95"


def generate(rows: int, out: Path = OUT) -> tuple[Path, Path]:
    """Write the log once into `out` (in chunks, so memory stays flat) and reuse it."""
    import pyarrow.parquet as pq

    sys.path.insert(0, str(HERE.parent / "src"))
    from tailbudget.demo.generate import event_times, make_table, write_events

    path = out / f"audit_v2_{rows}.parquet"
    events = out / f"audit_v2_{rows}_events.csv"
    if path.exists() and events.exists():
        return path, events
    out.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    writer = None
    done, k, first_events = 0, 0, None
    while done < rows:
        n = min(CHUNK, rows - done)
        table, ev = make_table(n, seed=100 + k, id_offset=done, traffic_seed=99)
        first_events = first_events or ev
        if writer is None:
            writer = pq.ParquetWriter(tmp, table.schema, compression="zstd")
        writer.write_table(table)
        done += table.num_rows
        k += 1
    assert writer is not None and first_events is not None
    writer.close()
    tmp.rename(path)
    write_events(events, event_times(first_events))
    return path, events


def bare_sql(path: Path) -> list[str]:
    """The hand-written queries: the same percentiles, R^2 and group-bys."""
    src = f"read_parquet('{path}')"
    qs = "[0.5, 0.95, 0.99]"
    cols = [f"quantile_cont(total_ms, {qs})", "max(total_ms)", "avg(total_ms)"]
    cols += [f"quantile_cont({s}_ms, {qs})" for s in STAGES]
    cols.append(f"quantile_cont(total_ms - ({' + '.join(s + '_ms' for s in STAGES)}), {qs})")
    r2 = [f"regr_r2({s}_ms, {c}), regr_slope({s}_ms, {c})" for s in STAGES for c in SHAPE]
    out = [f"SELECT {', '.join(cols)} FROM {src}", f"SELECT {', '.join(r2)} FROM {src}"]
    out += [
        f"SELECT {c}, count(*), quantile_cont(total_ms, 0.99) FROM {src} GROUP BY {c}"
        for c in COHORTS
    ]
    out.append(
        f"SELECT date_trunc('minute', ts) m, count(*), approx_quantile(total_ms, 0.99) "
        f"FROM {src} GROUP BY m"
    )
    return out


def child_bare(path: str) -> None:
    import duckdb

    con = duckdb.connect()
    t0 = time.perf_counter()
    for q in bare_sql(Path(path)):
        con.execute(q).fetchall()
    _report(time.perf_counter() - t0, {})


def child_audit(path: str, events: str, objectives: str | None = None) -> None:
    sys.path.insert(0, str(HERE.parent / "src"))
    from tailbudget.audit import AuditConfig, run_audit
    from tailbudget.audit.events import read_events
    from tailbudget.logs import ReadOptions, read_log
    from tailbudget.report.audit_md import audit_markdown

    t0 = time.perf_counter()
    options = ReadOptions(timestamp="ts", shape=SHAPE, cohorts=COHORTS, error="error")
    log = read_log(path, options)
    from tailbudget.audit.config import e2e_objectives
    from tailbudget.budget.objectives import parse_objectives

    slo = {"p50": 1300.0, "p95": 2800.0, "p99": 4000.0}
    objs = parse_objectives(objectives) if objectives else None
    config = AuditConfig(objs or e2e_objectives(slo), events=read_events(Path(events)))
    report = run_audit(log, config)
    audit_markdown(report)
    info = {
        "passes": report.provenance.notes[-1],
        "hypotheses": [h.kind for h in report.hypotheses],
        "p99": report.snapshot.p99,
    }
    _report(time.perf_counter() - t0, info)


def _report(seconds: float, info: dict[str, object]) -> None:
    # VmHWM is this process's own peak (ru_maxrss would carry the parent's across exec).
    status = Path("/proc/self/status").read_text().splitlines()
    hwm = next((ln for ln in status if ln.startswith("VmHWM:")), None)
    rss = (
        int(hwm.split()[1]) / 1024
        if hwm
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    )
    print(json.dumps({"seconds": seconds, "rss_mib": rss, **info}))


def _run(args: list[str], script: str = __file__) -> dict[str, object]:
    """`script` run as a child with `args`; its last stdout line as JSON (see `_report`)."""
    proc = subprocess.run(
        [sys.executable, script, *args], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"child {args[0]} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--quick", action="store_true", help="300,000 rows")
    ap.add_argument("--repeat", type=int, default=2, help="runs per side (best is kept)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        if a.child[0] == "bare":
            child_bare(a.child[1])
        else:
            child_audit(a.child[1], a.child[2], *a.child[3:])
        return
    rows = 300_000 if a.quick else a.rows
    t0 = time.perf_counter()
    path, events = generate(rows)
    gen = time.perf_counter() - t0
    # Alternate the two sides and keep each one's best run: the machine is shared.
    bare = min((_run(["--child", "bare", str(path)]) for _ in range(a.repeat)), key=_secs)
    audit = min(
        (_run(["--child", "audit", str(path), str(events)]) for _ in range(a.repeat)), key=_secs
    )
    objs = min(
        (_run(["--child", "audit", str(path), str(events), OBJECTIVES]) for _ in range(a.repeat)),
        key=_secs,
    )
    ratio = _secs(audit) / _secs(bare)
    cores = _cores()
    print(f"\nAudit of a {rows:,}-row Parquet log (DuckDB, {cores} cores, best of {a.repeat})\n")
    print("| run | wall time s | peak RSS MiB | x bare |")
    print("|---|---:|---:|---:|")
    print(
        f"| bare DuckDB SQL: same percentiles, R², group-bys | {_secs(bare):.2f} | "
        f"{bare['rss_mib']:.0f} | 1.0 |"
    )
    print(
        f"| tailbudget audit: read + full audit + markdown | {_secs(audit):.2f} | "
        f"{audit['rss_mib']:.0f} | {ratio:.1f} |"
    )
    print(
        f"| tailbudget audit with objectives (e2e p99.9, 2 stages, goodput) | "
        f"{_secs(objs):.2f} | {objs['rss_mib']:.0f} | {_secs(objs) / _secs(bare):.1f} |"
    )
    print(f"\nobjectives / e2e-only audit: {_secs(objs) / _secs(audit):.2f}x")
    print(
        f"\nlog generated in {gen:.1f} s; {audit['passes']}; "
        f"hypotheses: {', '.join(map(str, audit['hypotheses']))}"
    )  # type: ignore[call-overload]


def _secs(result: dict[str, object]) -> float:
    return float(result["seconds"])  # type: ignore[arg-type]


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    main()
