"""The queueing engine against M/M/c closed forms (Erlang C) and Little's law."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq

from tailbudget.sim.arrivals import ArrivalSpec, make_arrivals
from tailbudget.sim.policies import FixedPolicy
from tailbudget.sim.queue_engine import run_queue
from tests.sim.helpers import queue_model

MEAN_MS = 100.0


def erlang_c(c: int, a: float) -> float:
    """Probability an arrival waits in M/M/c with offered load a = lambda / mu."""
    rho = a / c
    head = sum(a**k / math.factorial(k) for k in range(c))
    tail = a**c / math.factorial(c) / (1.0 - rho)
    return tail / (head + tail)


def sojourn_quantile(c: int, lam: float, mu: float, q: float) -> float:
    """Quantile of time in system (wait + service) of M/M/c, FIFO."""
    pw = erlang_c(c, lam / mu)
    theta = c * mu - lam

    def survival(t: float) -> float:
        if abs(theta - mu) < 1e-12:
            waited = math.exp(-mu * t) * (1.0 + mu * t)
        else:
            waited = (theta * math.exp(-mu * t) - mu * math.exp(-theta * t)) / (theta - mu)
        return (1.0 - pw) * math.exp(-mu * t) + pw * waited

    return brentq(lambda t: survival(t) - (1.0 - q), 0.0, 1e6)


def _run(servers: int, rho: float, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arrival times, done times and whether past the warm-up, for one replication."""
    rng = np.random.default_rng(seed)
    work = rng.exponential(MEAN_MS, size=n)
    lam = rho * servers * 1000.0 / MEAN_MS
    arrivals, _ = make_arrivals(
        ArrivalSpec("poisson", rate=lam),
        pool=work.size,
        load=1.0,
        duration_s=n / lam,
        max_requests=None,
        low_share=0.0,
        rng=rng,
    )
    trace = run_queue(
        queue_model(work), arrivals, FixedPolicy(servers), replicas=servers, end_s=n / lam
    )
    warm = arrivals.t_s > 0.02 * n / lam  # the empty start is not the steady state
    return trace.arrival_s, trace.done_s, warm


@pytest.mark.parametrize("servers", [1, 10])
@pytest.mark.parametrize("rho", [0.5, 0.7, 0.9])
def test_mmc_percentiles_and_littles_law(servers: int, rho: float) -> None:
    # near saturation the queue relaxes slowly: pool independent replications so the
    # sampling error of p99 stays well inside the 3% bound
    reps = 5 if rho >= 0.9 else 2 if rho >= 0.7 else 1
    runs = [_run(servers, rho, 500_000, seed) for seed in range(reps)]
    e2e_s = np.concatenate([(d - a)[w] for a, d, w in runs])
    assert np.isfinite(e2e_s).all()
    mu = 1000.0 / MEAN_MS
    lam = rho * servers * mu
    for q in (0.5, 0.95, 0.99):
        want = sojourn_quantile(servers, lam, mu, q)
        got = float(np.quantile(e2e_s, q))
        assert got == pytest.approx(want, rel=0.03), (q, got, want)
    # Little's law on the output: time-average in system = arrival rate x mean time
    arr, done, _ = runs[0]
    t0, t1 = float(arr[0]), float(arr[-1])
    grid = np.linspace(t0, t1, 20_001)
    in_sys = np.searchsorted(np.sort(arr), grid) - np.searchsorted(np.sort(done), grid)
    rate = arr.size / (t1 - t0)
    assert float(in_sys.mean()) == pytest.approx(rate * float(np.mean(done - arr)), rel=0.03)
