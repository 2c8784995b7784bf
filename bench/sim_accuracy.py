"""Simulator accuracy on every shared LLM log: does the fitted model reproduce its own runs?

For each fit (the vLLM grid's three runs together, each of them alone, the vLLM
tensor-parallel-8 burst, the AIPerf export) every run is replayed on its own
arrivals (its logged times, else its prompts at its request rate, all at once for
`inf`; a Poisson run on 3 seeds) and each figure is printed beside the run's own:
TTFT p50/p95/p99, TPOT p50/p99, ITL p99, e2e p99, within 10% on medians and 20% on
tails. Then held out: fitted on some runs, a run left out is predicted on its own
arrivals (5 seeds) with the prefix-cache share simulate would use at its load: the
grid's 4/s run from its 1/s run and burst (a rate between fitted levels: tails within
25%), its 1/s run from the others, its burst from the paced runs, the TP8 burst (another
configuration) from the grid, and AIPerf's second half from its first. LLMPerf's file
has neither times nor a rate, so no run of it can be replayed (listed as such).
Usage: python bench/sim_accuracy.py [--only grid|held]
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


HELD_OUT = {
    # (name, fitted on, held out): a rate between the fitted levels is the goal (25% on
    # tails); the others show what the model does past what it was given
    "grid 1/s + inf -> 4/s (between)": (["01", "inf"], "04"),
    "grid 4/s + inf -> 1/s (below)": (["04", "inf"], "01"),
    "grid 1/s + 4/s -> inf (burst, beyond)": (["01", "04"], "inf"),
    "grid -> tp8 inf (another config)": (["01", "04", "inf"], "tp8"),
}


def _path(key: str) -> str:
    if key == "tp8":
        return FITS["tp8 inf"][0]
    return str(GRID).format(key)


def _halves(path: str) -> tuple[tuple[object, object], tuple[object, object]]:
    """A timed log cut at its middle request: (first half, second half), each a
    (LoggedRequests, extras) pair."""
    from dataclasses import replace

    from tailbudget.logs import ReadOptions
    from tailbudget.sim.inputs import read_logged

    lg, ex = read_logged(path, ReadOptions())
    n = lg.total_ms.size // 2

    def cut(sl: slice) -> object:
        arrays = {
            f: getattr(lg, f)[sl]
            for f in ("total_ms", "error", "ts_s", "input_tokens", "output_tokens", "ttft_ms")
            if getattr(lg, f) is not None
        }
        stages = {k: v[sl] for k, v in (lg.stages or {}).items()}
        return replace(lg, **arrays, stages=stages, source=f"{lg.source}[{sl.start}:{sl.stop}]")

    return (cut(slice(0, n)), ex), (cut(slice(n, None)), ex)


def _predict_rows(name: str, model: object, run: object) -> tuple[int, int]:
    """Print the held-out run's figures, predicted with the share simulate would use at
    its load (5 seeds); (tails within 25%, tails)."""
    from tailbudget.sim.hit_levels import share_for
    from tailbudget.sim.own_runs import predict

    llm = model.llm  # type: ignore[attr-defined]
    share = share_for(llm, run.arrivals(0).t_s, 1)  # type: ignore[attr-defined]
    got = predict(model, run, share, seeds=5)  # type: ignore[arg-type]
    ok = n = 0
    for key, want in run.measured.items():  # type: ignore[attr-defined]
        if not (want > 0 and key in got):
            continue
        err = got[key] / want - 1
        tail = not key.endswith(".p50")
        mark = ("yes" if abs(err) <= 0.25 else "**no**") if tail else "(median)"
        ok, n = ok + (tail and abs(err) <= 0.25), n + tail
        print(
            f"| {name} | {run.load} | {key} | {want:,.0f} | {got[key]:,.0f} | {err:+.0%} "  # type: ignore[attr-defined]
            f"| {mark} |"
        )
    print(f"| {name} | **tails {ok}/{n} within 25%** | hit share {share:.2f} | | | | |")
    return ok, n


def held_out() -> None:
    """Fit on a subset of the shared runs, predict the run left out."""
    from tailbudget.logs import ReadOptions
    from tailbudget.sim.fit import ModelOptions
    from tailbudget.sim.fit_llm import fit_llm_model
    from tailbudget.sim.fitting import fit_logs
    from tailbudget.sim.inputs import read_logged
    from tailbudget.sim.own_runs import own_runs

    for name, (fit_on, out) in HELD_OUT.items():
        model = fit_logs([_path(k) for k in fit_on], ReadOptions(), ModelOptions()).model
        logged, extras = read_logged(_path(out), ReadOptions())
        _predict_rows(name, model, own_runs([logged], [extras])[0])
    first, second = _halves(str(DATA / "aiperf_profile_export.jsonl"))
    model = fit_llm_model([first[0]], [first[1]], ModelOptions())  # type: ignore[list-item]
    run = own_runs([second[0]], [second[1]])[0]  # type: ignore[list-item]
    _predict_rows("aiperf first half -> second half (time)", model, run)


def main() -> None:
    """Print the table docs/simulate.md quotes."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", choices=[*sorted(FITS), "held"], default=None)
    args = ap.parse_args()
    print("| fit | run | figure | measured ms | predicted ms | error | within |")
    print("|---|---|---|---:|---:|---:|---|")
    for name, paths in FITS.items():
        if args.only in (None, name):
            fit_rows(name, paths)
    if args.only in (None, "held"):
        print()
        print("| held out | run | figure | measured ms | predicted ms | error | within 25% |")
        print("|---|---|---|---:|---:|---:|---|")
        held_out()


if __name__ == "__main__":
    main()
