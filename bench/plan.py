"""Composition cost: tailbudget's Monte Carlo next to the bare NumPy work it needs.

Prints a markdown table. The bare baseline draws each stage's lognormal
samples, sums them and takes the three percentiles, nothing else; tailbudget
also fits each stage from its p50/p95/p99 and walks the pipeline tree.

    python bench/plan.py            # 1,000,000 samples over 10 stages
    python bench/plan.py --quick    # 100,000 samples
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from tailbudget.budget import compose, parse_budget

STAGES = 10


def best_of(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n = 100_000 if args.quick else args.samples

    three = parse_budget(
        "slo: {p99: 1000000}\npipeline:\n"
        + "".join(
            f"  - stage: s{i}\n    budget: {{p50: {10 * (i + 1)}, p95: {25 * (i + 1)}, p99: {45 * (i + 1)}}}\n"
            for i in range(STAGES)
        )
    )
    one = parse_budget(
        "slo: {p99: 1000000}\npipeline:\n"
        + "".join(f"  - stage: s{i}\n    budget: {{p99: {45 * (i + 1)}}}\n" for i in range(STAGES))
    )
    mus = np.log(np.arange(1, STAGES + 1) * 10.0)

    def bare() -> np.ndarray:
        rng = np.random.default_rng(0)
        total = np.zeros(n)
        for mu in mus:
            total += rng.lognormal(mu, 0.5, n)
        return np.quantile(total, [0.5, 0.95, 0.99])

    rows = [
        ("bare NumPy: lognormal draws, sum, 3 percentiles", best_of(bare, args.repeat)),
        (
            "tailbudget compose, 1 percentile per stage (lognormal)",
            best_of(lambda: compose(one, samples=n, seed=0), args.repeat),
        ),
        (
            "tailbudget compose, p50/p95/p99 per stage (spliced lognormal)",
            best_of(lambda: compose(three, samples=n, seed=0), args.repeat),
        ),
    ]
    base = rows[0][1][0]
    print(f"Composition of {STAGES} sequential stages, {n:,} samples, best of {args.repeat}\n")
    print("| work | best s | median s | ratio to bare |")
    print("|---|---:|---:|---:|")
    for name, (best, med) in rows:
        print(f"| {name} | {best:.3f} | {med:.3f} | {best / base:.2f}x |")


if __name__ == "__main__":
    main()
