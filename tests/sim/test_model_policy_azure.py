"""The model policy on a real arrival trace (Azure code, 30 minutes) against the others."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailbudget.budget.objectives import parse_objectives
from tailbudget.logs import ReadOptions
from tailbudget.sim.arrivals import parse_arrivals
from tailbudget.sim.fit import ModelOptions
from tailbudget.sim.fitting import fit_logs
from tailbudget.sim.policies import llm_default_policy, parse_policy_spec
from tailbudget.sim.run import SimReport, simulate

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
GRID = DATA / "vllm_grid" / "vllm_llama33-70b_04_tp4_pp2_IB_qps_{}.json"
TRACE = DATA / "azure_llm_inference_trace_code_2023.csv"
POLICIES = ("model", "budget", "hpa:concurrency=8", "fixed:2", "fixed:3")


def _run(ttft_ms: float, tpot_ms: float, replicas: int, policies: tuple[str, ...]) -> SimReport:
    if not TRACE.is_file():
        pytest.skip("shared data not present")
    fitted = fit_logs([str(GRID).format(q) for q in ("01", "04")], ReadOptions(), ModelOptions())
    return simulate(
        fitted.model,
        parse_objectives(f"ttft.p95={ttft_ms:g},tpot.p99={tpot_ms:g}"),
        arrivals=parse_arrivals(str(TRACE)),
        policies=[parse_policy_spec(p) for p in policies],
        budget_policy=llm_default_policy(ttft_ms),
        replicas=replicas,
        duration_s=1800.0,
        signal="ttft",
    )


@pytest.fixture(scope="module")
def report() -> SimReport:
    return _run(3000.0, 150.0, 2, POLICIES)


_COLD_PREFILL = pytest.mark.xfail(
    strict=True,
    reason="#34 items 1-3: the service model now charges each prompt's uncached tokens inside "
    "the engine at the cold cost the 1/s run shows (0.16 ms a token); this trace's ~2k-token "
    "prompts make tpot.p99 150 ms unreachable at any count (every policy ~375 ms) and the "
    "tight ttft needs more replicas; the model policy and these targets are re-judged by "
    "#34 items 4-6 (bench/policies.py)",
)


@_COLD_PREFILL
def test_model_policy_meets_every_minute(report: SimReport) -> None:
    runs = {r.policy: r for r in report.runs}
    model = runs["model"].to_dict()
    assert model["minutes_in_breach"] == 0  # every 1-minute window, both objectives
    assert all(o["attainment"] == 1.0 for o in model["objectives"])
    # cheaper than HPA on concurrency (which also meets them, at 2.0 replica-hours)
    assert runs["model"].replica_hours < runs["hpa:concurrency=8"].replica_hours


def test_floor_beside_every_policy(report: SimReport) -> None:
    assert report.floor is not None
    ratios = {r.policy: r.replica_hours_vs_floor for r in report.runs}
    assert all(x is not None for x in ratios.values())
    # measured: 1.20x the hindsight floor (1.47x when bursts were sized as sustained
    # rates). Every minute is met only by remembering the bursts of five minutes earlier:
    # minute 14's follows two silent minutes, and sizing without that memory costs 1.06x
    # with minute 14 in breach (docs/act.md); the 1.15x with every minute is not met
    assert ratios["model"] is not None and ratios["model"] < 1.3


@_COLD_PREFILL
def test_a_tight_ttft_is_met_below_the_best_fixed_count() -> None:
    # ttft.p95 1.5 s: the requests' own prefill is 87-95% of it, so a replica more buys
    # noise, not headroom; the policy sizes to the target there (docs/act.md)
    runs = {r.policy: r for r in _run(1500.0, 120.0, 1, ("model", "fixed:4")).runs}
    assert runs["model"].to_dict()["minutes_in_breach"] == 0
    assert runs["fixed:4"].to_dict()["minutes_in_breach"] == 0
    assert runs["model"].replica_hours < runs["fixed:4"].replica_hours
