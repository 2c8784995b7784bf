"""Simulator accuracy on a real load sweep: fitted on vLLM at 1/s and 4/s, every figure.

The vLLM grid (../shared/data/vllm_grid) ran the same 200 ShareGPT prompts on
one server at Poisson 1/s, 4/s and all at once. The model is fitted on the 1/s
and 4/s runs only; each run is then simulated (Poisson at its rate, or
`burst:200`) with 5 seeds. Prints, per run and figure, the real value, the
mean prediction, its error and the spread over seeds, then whether the
prediction gives the real file's verdict for targets 20% below and 20% above
the real value. Usage: python bench/sim_accuracy.py [--seeds 5]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

GRID = Path(__file__).resolve().parents[2] / "shared" / "data" / "vllm_grid"
NAME = "vllm_llama33-70b_04_tp4_pp2_IB_qps_{}.json"
FIGURES = (
    ("ttft", 50), ("ttft", 95), ("ttft", 99), ("tpot", 50), ("tpot", 99),
    ("e2e", 50), ("e2e", 99),
)  # fmt: skip


def real(q: str) -> dict[str, float]:
    """Every figure of one run, as the audit defines it (TPOT: decode time / (tokens - 1))."""
    data = json.loads((GRID / NAME.format(q)).read_text())
    ttft = np.asarray(data["ttfts"]) * 1000.0
    dec = np.asarray([sum(x) for x in data["itls"]]) * 1000.0
    out = np.asarray(data["output_lens"], dtype=np.float64)
    tpot = np.where(out > 1, dec / np.maximum(out - 1.0, 1.0), 0.0)
    values = {"ttft": ttft, "tpot": tpot, "e2e": ttft + dec}
    return {f"{m}.p{p}": float(np.percentile(values[m], p)) for m, p in FIGURES}


def predicted(q: str, seeds: int) -> list[dict[str, float]]:
    """The same figures from the model fitted on 1/s and 4/s, one dict per seed."""
    from tailbudget.logs import ReadOptions
    from tailbudget.sim.arrivals import ArrivalSpec, make_arrivals
    from tailbudget.sim.fit import ModelOptions
    from tailbudget.sim.fitting import fit_logs
    from tailbudget.sim.objectives import metric_values
    from tailbudget.sim.policies import FixedPolicy
    from tailbudget.sim.run import run_once

    paths = [str(GRID / NAME.format(x)) for x in ("01", "04")]
    model = fit_logs(paths, ReadOptions(), ModelOptions()).model
    if q == "inf":
        spec, duration = ArrivalSpec("burst", count=200), None
    else:
        rate = float(int(q))
        spec, duration = ArrivalSpec("poisson", rate=rate), 200 / rate
    out = []
    for seed in range(seeds):
        arr, horizon = make_arrivals(
            spec, pool=model.samples.size, load=1.0, duration_s=duration,
            max_requests=None, low_share=0.0, rng=np.random.default_rng(seed),
        )  # fmt: skip
        trace = run_once(model, arr, FixedPolicy(1), replicas=1, end_s=horizon)
        row = {}
        for m, p in FIGURES:
            v = metric_values(trace, m)
            row[f"{m}.p{p}"] = float(np.percentile(v[np.isfinite(v)], p))
        out.append(row)
    return out


def main() -> None:
    """Print the table docs/simulate.md quotes."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    print(
        "| run | figure | real ms | predicted ms | error | seeds' range | verdict at 0.8x / 1.2x |"
    )
    print("|---|---|---:|---:|---:|---|---|")
    for q, label in (("01", "1/s (fitted)"), ("04", "4/s (fitted)"), ("inf", "all at once")):
        want, got = real(q), predicted(q, args.seeds)
        for key, w in want.items():
            vals = np.asarray([g[key] for g in got])
            mean = float(vals.mean())
            lo, hi = (100.0 * (float(x) / w - 1.0) for x in (vals.min(), vals.max()))
            agree = ["same" if (mean <= t) == (w <= t) else "differs" for t in (0.8 * w, 1.2 * w)]
            print(
                f"| {label} | {key} | {w:,.0f} | {mean:,.0f} | {100 * (mean / w - 1):+.0f}% "
                f"| {lo:+.0f}..{hi:+.0f}% | {' / '.join(agree)} |"
            )


if __name__ == "__main__":
    main()
