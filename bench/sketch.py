"""LatencySketch next to ddsketch, HdrHistogram and np.percentile, in one run.

On N heavy-tailed values (lognormal and Pareto latencies, ms) it measures, per
method: ingest time, relative error at p50/p95/p99/p99.9 against the exact
order statistic, serialized size, and whether merging two halves gives the
whole. The per-value `add` loops of ddsketch and HdrHistogram are timed on a
subset and extrapolated to N (the table says so). Every time is the best of
three runs, to damp noise from other processes. Prints a markdown table.

    python bench/sketch.py            # 5,000,000 values per distribution
    python bench/sketch.py --quick    # 500,000
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from tailbudget.sketch import LatencySketch

QS = (0.5, 0.95, 0.99, 0.999)


def _timed(fn: Callable[[], object], repeat: int = 1) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def _rel(got: list[float], exact: np.ndarray) -> list[float]:
    return [abs(g - e) / e for g, e in zip(got, exact, strict=True)]


def bench(name: str, x: np.ndarray, subset: int) -> list[dict[str, object]]:
    """Rows of the table for one distribution."""
    n = x.size
    exact = np.quantile(x, QS, method="lower")
    rows: list[dict[str, object]] = []

    def ours() -> LatencySketch:
        s = LatencySketch(0.01)
        s.add_many(x)
        return s

    t, s = _timed(ours, repeat=3)
    assert isinstance(s, LatencySketch)
    a, b = LatencySketch(0.01), LatencySketch(0.01)
    a.add_many(x[: n // 2])
    b.add_many(x[n // 2 :])
    a.merge(b)
    merge_ok = a.quantiles(QS) == s.quantiles(QS) and a.count == s.count
    rows.append(
        {
            "method": "tailbudget LatencySketch.add_many",
            "ingest_s": t,
            "extrapolated": False,
            "err": _rel([float(v) for v in s.quantiles(QS) if v is not None], exact),
            "bytes": len(s.to_bytes()),
            "merge": "equal" if merge_ok else "DIFFERENT",
        }
    )

    from ddsketch import DDSketch
    from ddsketch.pb.proto import DDSketchProto

    sub = x[:subset]

    def dd_loop(values: np.ndarray) -> DDSketch:
        d = DDSketch(0.01)
        add = d.add
        for v in values.tolist():
            add(v)
        return d

    t_sub, _ = _timed(lambda: dd_loop(sub), repeat=3)
    full = dd_loop(x) if subset >= n else None
    # accuracy on the whole array (not timed when extrapolated), to compare like with like
    dd = full if full is not None else dd_loop(x)
    d1, d2 = dd_loop(x[: n // 2]), dd_loop(x[n // 2 :])
    d1.merge(d2)
    dd_q = [dd.get_quantile_value(q) for q in QS]
    rows.append(
        {
            "method": "ddsketch DDSketch.add loop",
            "ingest_s": t_sub * n / subset,
            "extrapolated": subset < n,
            "err": _rel(dd_q, exact),
            "bytes": len(DDSketchProto.to_proto(dd).SerializeToString()),
            "merge": "equal" if [d1.get_quantile_value(q) for q in QS] == dd_q else "DIFFERENT",
        }
    )

    from hdrh.histogram import HdrHistogram

    def hdr_loop(values: np.ndarray) -> HdrHistogram:
        h = HdrHistogram(1, 10**11, 2)  # microseconds, 2 significant digits (~1%)
        rec = h.record_value
        for v in np.maximum(1, np.rint(values * 1000)).astype(np.int64).tolist():
            rec(v)
        return h

    t_sub, _ = _timed(lambda: hdr_loop(sub), repeat=3)
    h = hdr_loop(x)
    h1, h2 = hdr_loop(x[: n // 2]), hdr_loop(x[n // 2 :])
    h1.add(h2)
    hq = [h.get_value_at_percentile(q * 100) / 1000 for q in QS]
    rows.append(
        {
            "method": "HdrHistogram record_value loop",
            "ingest_s": t_sub * n / subset,
            "extrapolated": subset < n,
            "err": _rel(hq, exact),
            "bytes": len(h.encode()),
            "merge": "equal"
            if [h1.get_value_at_percentile(q * 100) / 1000 for q in QS] == hq
            else "DIFFERENT",
        }
    )

    t, pct = _timed(lambda: np.percentile(x, [q * 100 for q in QS]), repeat=3)
    rows.append(
        {
            "method": "np.percentile (exact, keeps all values)",
            "ingest_s": t,
            "extrapolated": False,
            "err": _rel(list(np.asarray(pct, dtype=float)), exact),
            "bytes": x.nbytes,
            "merge": "n/a (concatenate arrays)",
        }
    )
    for r in rows:
        r["dist"] = name
    return rows


def main() -> None:
    """Run the benchmark and print the markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="500,000 values instead of 5,000,000")
    ap.add_argument("-n", type=int, default=None, help="values per distribution")
    ap.add_argument("--subset", type=int, default=200_000, help="values timed in add loops")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    n = args.n or (500_000 if args.quick else 5_000_000)
    subset = min(args.subset, n)
    rng = np.random.default_rng(args.seed)
    data = {
        "lognormal(5, 1.2) ms": rng.lognormal(5.0, 1.2, n),
        "pareto(a=1.5) x 50 ms": (rng.pareto(1.5, n) + 1.0) * 50.0,
    }
    rows = [r for name, x in data.items() for r in bench(name, x, subset)]
    print(
        f"\nN = {n:,} values per distribution; add loops timed on {subset:,} and scaled to N "
        "where marked *.\n"
    )
    print(
        "| distribution | method | ingest s | vs ddsketch loop | p50 err | p95 err | p99 err "
        "| p99.9 err | bytes | merge halves |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for dist in data:
        group = [r for r in rows if r["dist"] == dist]
        dd_t = next(float(r["ingest_s"]) for r in group if "ddsketch" in str(r["method"]))
        for r in group:
            t = float(r["ingest_s"])  # type: ignore[arg-type]
            errs = " | ".join(f"{100 * e:.3f}%" for e in r["err"])  # type: ignore[attr-defined]
            star = "*" if r["extrapolated"] else ""
            print(
                f"| {dist} | {r['method']} | {t:.3f}{star} | {dd_t / t:,.1f}x | {errs} | "
                f"{int(r['bytes']):,} | {r['merge']} |"
            )  # type: ignore[call-overload]
    ours = [r for r in rows if "tailbudget" in str(r["method"])]
    pct = [r for r in rows if "np.percentile" in str(r["method"])]
    worst = max(max(r["err"]) for r in ours)  # type: ignore[call-overload]
    print(
        f"\ngoals: max rel. error {100 * worst:.3f}% (<= 1%); "
        f"max size {max(int(r['bytes']) for r in ours):,} B (<= 32,768); "  # type: ignore[call-overload]
        "faster than np.percentile: "
        + ", ".join(
            f"{float(p['ingest_s']) / float(o['ingest_s']):.1f}x"  # type: ignore[arg-type]
            for o, p in zip(ours, pct, strict=True)
        )
    )


if __name__ == "__main__":
    main()
