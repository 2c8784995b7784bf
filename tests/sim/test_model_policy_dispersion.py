"""The model policy's forecast minutes vary in count as much as the recent minutes proved
(issue 34): Poisson where the counts look Poisson, wider where they prove more spread."""

from __future__ import annotations

import numpy as np
import pytest

from tailbudget.sim.arrivals import read_trace
from tailbudget.sim.forecast import RecentMinutes, _poisson_limit, _scaled, dispersion
from tailbudget.sim.patterns import PATTERNS, pattern_arrivals, rescaled_arrivals
from tests.conftest import SHARED_DATA

AZURE = SHARED_DATA / "azure_llm_inference_trace_code_2023.csv"


def test_the_limit_is_what_poisson_counts_show_at_any_rate() -> None:
    rng = np.random.default_rng(7)
    for rate in (20.0, 500.0):
        got = [
            dispersion(np.sort(rng.uniform(0.0, 600.0, rng.poisson(rate * 10))), 10, 10)
            for _ in range(300)
        ]
        assert sum(g > 1.0 for g in got) <= 3  # 1 in 1,000 windows, with room for chance
    assert 6.0 < _poisson_limit(10) < 9.0


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_generated_patterns_keep_poisson_draws(name: str) -> None:
    # a step, a doubling, on/off and a lone spike are level shifts or outliers, not spread
    arr = pattern_arrivals(name, 2.0, 1800.0, 100, seed=1)
    assert all(dispersion(arr.t_s, m, 10) == 1.0 for m in range(31))


def test_a_bursty_real_trace_proves_its_spread() -> None:
    if not AZURE.is_file():
        pytest.skip(f"real data file not found: {AZURE}")
    arr = rescaled_arrivals(read_trace(str(AZURE)).t_s, 3.8, 3600.0, 100, seed=1)
    got = [dispersion(arr.t_s, m, 10) for m in range(4, 61)]
    assert min(got) > 7.0 and float(np.median(got)) > 50.0


def test_spread_widens_the_drawn_counts_about_the_same_mean() -> None:
    arr = pattern_arrivals("steady", 4.0, 60.0, 100, seed=2)
    rng = np.random.default_rng(3)
    plain = [_scaled(arr, 1.0, rng).size for _ in range(2000)]
    wide = [_scaled(arr, 1.0, rng, 20.0).size for _ in range(2000)]
    assert np.mean(wide) == pytest.approx(np.mean(plain), rel=0.1)
    assert np.var(plain) == pytest.approx(arr.size, rel=0.2)  # Poisson
    assert np.var(wide) == pytest.approx(20.0 * arr.size, rel=0.3)


def test_poisson_minutes_keep_their_draws_and_a_bursty_trace_gets_wider_ones() -> None:
    # no spread proved: the load bucket alone names the draws (the same seeds as before the
    # spread rule, so a steady service is sized as it was); proved: the spread joins it
    arr = pattern_arrivals("steady", 2.0, 600.0, 100, seed=4)
    key, _ = RecentMinutes(300.0, seed=1).minutes(arr, 420.0, 2.0)
    assert isinstance(key, tuple) and key[3] == 0
    if not AZURE.is_file():
        pytest.skip(f"real data file not found: {AZURE}")
    bursty = rescaled_arrivals(read_trace(str(AZURE)).t_s, 3.8, 3600.0, 100, seed=1)
    key, minutes = RecentMinutes(300.0, seed=1).minutes(bursty, 900.0, 3.8)
    assert isinstance(key, tuple) and key[3] > 0
    sizes = [d.arrivals.size for d in minutes[0]]
    assert max(sizes) > 2.0 * 3.8 * 60.0  # some draws carry a burst minute's count
