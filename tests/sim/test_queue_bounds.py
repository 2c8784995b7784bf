"""The judge's shortcut for the queue engine: bounds on each request's e2e that settle a
minute's verdict without simulating, and a verdict without the figures. Both must give
exactly what the simulation and `measure` give (the floor and the model policy decide by it).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tailbudget.budget.objectives import parse_objectives
from tailbudget.sim.engines import run_once
from tailbudget.sim.judge import Draw, Judge, met
from tailbudget.sim.minute_verdict import minute_met
from tailbudget.sim.model import Param, ServiceModel, WorkSamples
from tailbudget.sim.objectives import measure
from tailbudget.sim.policies import FixedPolicy
from tailbudget.sim.queue_bounds import e2e_bounds_ms, fifo_e2e_ms
from tailbudget.sim.queue_engine import work_columns
from tailbudget.sim.trace import Arrivals
from tests.sim.helpers import queue_model

COUNTS = (1, 2, 3, 5, 8, 13, 21)


def _model(seed: int) -> ServiceModel:
    """Heavy-tailed work with a stage, 1-3 slots per replica; every other seed's work rises
    with load."""
    rng = np.random.default_rng(seed)
    work = rng.lognormal(np.log(60.0), 1.0, size=3000)
    m = queue_model(work, concurrency=1 + seed % 3, cold_factor=2.0)
    db = work * rng.uniform(0.1, 0.9, size=work.size)
    samples = replace(m.samples, error=rng.random(work.size) < 0.02, stages={"db": db})
    m = replace(m, samples=samples)
    if seed % 2:
        load = rng.uniform(5.0, 80.0, size=work.size)
        samples = replace(m.samples, load_rps=load)
        m = replace(m, samples=samples, load_slope=Param("load_slope", 0.4, "ms", "fitted"))
    return m


def _minute(seed: int) -> Arrivals:
    """A minute at 5-150/s; every third one with a two-second burst of half its requests."""
    rng = np.random.default_rng(1000 + seed)
    k = int(rng.poisson(rng.uniform(5.0, 150.0) * 60.0))
    t = rng.uniform(0.0, 60.0, k)
    if seed % 3 == 0:
        t[: k // 2] = rng.uniform(20.0, 22.0, k // 2)
    return Arrivals(np.sort(t), rng.integers(0, 3000, k), np.zeros(k, dtype=bool))


@pytest.mark.parametrize("seed", range(12))
def test_the_bounds_hold_every_request_and_the_loop_is_the_engines(seed: int) -> None:
    model, minute = _model(seed), _minute(seed)
    slots = int(model.concurrency.value)
    for n in COUNTS:
        trace = run_once(model, minute, FixedPolicy(n), replicas=n, end_s=60.0)
        work, per_ready = work_columns(model, minute)
        w = work if per_ready is None else work + per_ready * (1.0 / n)  # as run_fixed
        low, high = e2e_bounds_ms(minute.t_s, w, n * slots)
        e2e = trace.e2e_ms
        assert np.all(low <= e2e) and np.all(e2e <= high), (seed, n)
        # the judge's own loop is the engine's, float for float
        assert np.array_equal(fifo_e2e_ms(minute.t_s, w, n * slots), e2e), (seed, n)


@pytest.mark.parametrize("seed", range(12))
def test_the_shortcut_judges_as_the_simulation_does(seed: int) -> None:
    model, minute = _model(seed), _minute(seed)
    slo = ("p95=300,p99=900", "p99=2000", "p50=80,p95=250", "p95=400,db.p99=250")[seed % 4]
    judge = Judge(model, parse_objectives(slo))
    for n in COUNTS:
        assert judge.meets(Draw(seed, minute), n) == met(judge.run(minute, n)), (seed, n)


def test_the_bounds_settle_most_counts_of_a_light_tailed_minute() -> None:
    """bench/simulate.py's minute: 100/s, exponential work of 80 ms, p95/p99 targets."""
    rng = np.random.default_rng(3)
    model = queue_model(rng.exponential(80.0, size=6000))
    k = int(rng.poisson(6000))
    minute = Arrivals(
        np.sort(rng.uniform(0.0, 60.0, k)), rng.integers(0, 6000, k), np.zeros(k, bool)
    )
    judge = Judge(model, parse_objectives("p95=2800,p99=5200"))
    assert judge.fewest([Draw("bench", minute)]) == judge.fewest([minute])
    assert judge.bounded >= 2 * judge.simulations
    # the count the simulation itself gives, one count after another
    assert judge.fewest([minute]) == next(n for n in range(1, 30) if met(judge.run(minute, n)))


def test_a_verdict_without_the_figures_is_the_verdict() -> None:
    rng = np.random.default_rng(5)
    work = rng.exponential(80.0, size=3000)
    stages = {"db": work * rng.uniform(0.1, 0.9, size=work.size)}
    model = queue_model(work)
    model = replace(model, samples=WorkSamples(work, np.zeros(work.size, dtype=bool), stages))
    slo = parse_objectives("p95=400,db.p99=150,p50=60")
    for seed in range(6):
        minute = _minute(seed)
        for n in (2, 5, 9):
            trace = run_once(model, minute, FixedPolicy(n), replicas=n, end_s=60.0)
            assert minute_met(trace, slo, stages) == met(measure(trace, slo, stages))
