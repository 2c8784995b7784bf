"""The default policies' breach minutes on a fast subset of the policy suite (issue 34, item 6).

bench/policies.py runs the whole suite (docs/act.md quotes its table); this pins the
generated step and spike rows under the loose objectives, as bench/policies.py builds
them (grid model from the 1/s and 4/s runs, 2/s base rate, 30 minutes, seed 1).
"""

from __future__ import annotations

import pytest

from tailbudget.budget.objectives import parse_objectives
from tailbudget.budget.policy import policy_for
from tailbudget.logs import ReadOptions
from tailbudget.sim.engines import run_once
from tailbudget.sim.fit import ModelOptions
from tailbudget.sim.fitting import fit_logs
from tailbudget.sim.model import ServiceModel
from tailbudget.sim.objectives import measure
from tailbudget.sim.patterns import pattern_arrivals
from tailbudget.sim.policies import BudgetPolicy
from tailbudget.sim.suite import MAX_REPLICAS, Row, objective_sets, run_row
from tests.conftest import SHARED_DATA

GRID = SHARED_DATA / "vllm_grid" / "vllm_llama33-70b_04_tp4_pp2_IB_qps_{}.json"
SPAN_S = 30 * 60.0
PINNED = {
    "step": {"budget": 1, "model": 1},
    "spike": {"budget": 1, "model": 1},
    "steady": {"budget": 0},
}
"""Breach minutes measured at landing (bench/policies.py's rows); a change that adds one
fails here. spike/loose is above the goal (at most 1 where a fixed count spends none): the
spike's first minute arrives before any replica asked for in it is ready. step was 0 and 0
until the service model charged each prompt's tokens inside the engine (#34 items 1-3: the
model reproduces its runs); on that model the step row misses the goal (budget 3, model 5
breach minutes, fixed:6 none) and bench/policies.py's table is to be re-measured.
The reactive default's breach sizing (#34) measured budget 2 on step (1 before it: the
step's first minute at x3 is sized from the window that still shows x1), 1 on the spike
(2 before) and 0 on the steady Poisson row (2/s, fixed:2 clean), on the model as landed.
With the load line's start-up windows counted over the span the ring holds, not the
window's whole width (which put their load at a fraction of itself), budget spent 0 on
step. Since TPOT percentiles leave out one-token answers (as the audit reads them: one
truth), each minute's TPOT is judged without the one-token answers that diluted it, and step
measures budget 1 (within the goal of at most 1 where a fixed count spends none; bisected to
that change, 30a99d7) and model 1 (was 5)."""


@pytest.fixture(scope="module")
def model() -> ServiceModel:
    if not GRID.parent.is_dir():
        pytest.skip(f"real data folder not found: {GRID.parent}")
    logs = [str(GRID).format(q) for q in ("01", "04")]
    return fit_logs(logs, ReadOptions(), ModelOptions()).model


def _row(model: ServiceModel, name: str) -> Row:
    arr = pattern_arrivals(name, 2.0, SPAN_S, model.samples.size, seed=1)
    return run_row(model, name, arr, SPAN_S, "loose", objective_sets(model, arr, SPAN_S)["loose"])


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_defaults_breach_minutes_are_pinned(model: ServiceModel, name: str) -> None:
    row = _row(model, name)
    assert row.fixed_clean is not None  # some fixed count spends no minute in breach
    got = {p: row.of(p).breach_minutes for p in PINNED[name]}
    assert all(got[p] <= PINNED[name][p] for p in got), got
    # the floor is met every minute here, and every policy is priced against it
    assert row.floor.unmet_minutes == 0
    assert all(o.vs_floor is not None and o.vs_floor > 0 for o in row.outcomes)


STEADY_3_8 = "ttft.p95=488,tpot.p99=55.6"
"""The loose objectives bench/policies.py derives for its steady@3.8 row on this model (the
row run on 64 replicas: TTFT p95 x3, TPOT p99 x1.5), stated here: deriving them takes
longer than the run itself."""
STEADY_3_8_FLOOR_RH = 2.42
"""The hindsight floor of that row, as bench/policies.py measured it (docs/act.md)."""


def test_the_reactive_default_meets_the_unseen_traces_bound_on_a_row_like_them(
    model: ServiceModel,
) -> None:
    # issue 34's acceptance on the unseen traces (about 3.8 requests/s for an hour, one
    # replica at the start): at most 2 breach minutes at no more than 1.5x the floor. The
    # start-up minutes breach at every version; the square scale-down rule then kept a
    # noise step 3 -> 4 for the rest of the hour (2 minutes, 1.57x).
    arr = pattern_arrivals("steady", 3.8, 3600.0, model.samples.size, seed=1)
    objectives = parse_objectives(STEADY_3_8)
    policy = policy_for("default", objectives)
    bounds = policy.replicas.model_copy(update={"min": 1, "max": MAX_REPLICAS})
    budget = BudgetPolicy(policy.model_copy(update={"replicas": bounds}))
    trace = run_once(model, arr, budget, replicas=1, end_s=3600.0)
    results = measure(trace, objectives, model.samples.stages)
    breach = max(r.minutes_in_breach for r in results if r.objective.gated)
    assert breach <= 2
    assert trace.replica_s / 3600.0 <= 1.5 * STEADY_3_8_FLOOR_RH
