"""Simulator accuracy on every shared LLM log: does the fitted model reproduce its own runs?

For each fit (the vLLM grid's three runs together, each of them alone, the vLLM
tensor-parallel-8 burst, the AIPerf export) every run is replayed on its own
arrivals (its logged times, else its prompts at its request rate, all at once for
`inf`; a Poisson run on 3 seeds) and each figure is printed beside the run's own:
TTFT p50/p95/p99, TPOT p50/p99, ITL p99, e2e p99, within 10% on medians and 20% on
tails. Then a rate between fitted levels, left out: fitted on the grid's 1/s run and
its burst, the 4/s run predicted (5 seeds), within 25% on tails. LLMPerf's file has
neither times nor a rate, so no run of it can be replayed (listed as such).
Usage: python bench/sim_accuracy.py [--only grid]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
GRID = DATA / "vllm_grid" / "vllm_llama33-70b_04_tp4_pp2_IB_qps_{}.json"
FITS = {
    "grid": [str(GRID).format(q) for q in ("01", "04", "inf")],
    "grid 1/s": [str(GRID).format("01")],
    "grid 4/s": [str(GRID).format("04")],
    "grid inf": [str(GRID).format("inf")],
    "tp8 inf": [str(DATA / "vllm_llama33-70b_tp8_sharegpt_qps_inf.json")],
    "aiperf": [str(DATA / "aiperf_profile_export.jsonl")],
    "llmperf": [str(DATA / "llmperf_anyscale_70b.json")],
}


def fit_rows(name: str, paths: list[str]) -> None:
    """Print one fit's table rows and its per-run tally."""
    from tailbudget.errors import TailbudgetError
    from tailbudget.logs import ReadOptions
    from tailbudget.sim.fit import ModelOptions
    from tailbudget.sim.fitting import fit_logs

    start = time.perf_counter()
    try:
        model = fit_logs(paths, ReadOptions(), ModelOptions()).model
    except TailbudgetError as err:
        print(f"| {name} | - | - | - | - | - | not replayable: {err} |")
        return
    took = time.perf_counter() - start
    assert model.fit is not None
    for r in model.fit.rows:
        mark = "yes" if r.ok else "**no**"
        print(
            f"| {name} | {r.load} | {r.figure} | {r.measured_ms:,.0f} | {r.predicted_ms:,.0f} "
            f"| {r.error:+.0%} | {mark} |"
        )
    tally = ", ".join(f"{load} {ok}/{n}" for _, load, ok, n in model.fit.per_run())
    print(f"| {name} | **{tally}** | fit {took:.1f} s | | | | |")


def leave_one_out() -> None:
    """Fit 1/s + burst, predict 4/s (5 seeds)."""
    from tailbudget.logs import ReadOptions
    from tailbudget.sim.fit import ModelOptions
    from tailbudget.sim.fitting import fit_logs
    from tailbudget.sim.inputs import read_logged
    from tailbudget.sim.own_runs import own_runs, predict

    model = fit_logs(FITS["grid"][::2], ReadOptions(), ModelOptions()).model
    assert model.llm is not None
    logged, extras = read_logged(FITS["grid"][1], ReadOptions())
    run = own_runs([logged], [extras])[0]
    got = predict(model, run, model.llm.prefix_hit_rate.value, seeds=5)
    for key, want in run.measured.items():
        err = got[key] / want - 1
        tail = not key.endswith(".p50")
        mark = ("yes" if abs(err) <= 0.25 else "**no**") if tail else "(median)"
        print(
            f"| 1/s + inf -> 4/s | 4/s | {key} | {want:,.0f} | {got[key]:,.0f} | {err:+.0%} "
            f"| {mark} |"
        )


def main() -> None:
    """Print the table docs/simulate.md quotes."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", choices=sorted(FITS), default=None)
    args = ap.parse_args()
    print("| fit | run | figure | measured ms | predicted ms | error | within |")
    print("|---|---|---|---:|---:|---:|---|")
    for name, paths in FITS.items():
        if args.only in (None, name):
            fit_rows(name, paths)
    if args.only is None:
        leave_one_out()


if __name__ == "__main__":
    main()
