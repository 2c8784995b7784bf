"""The hit share at an unfitted load: linear in log(rate) between the fitted runs' shares,
the nearest run's beyond them, the fitted burst's for a burst (sim/hit_levels.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tailbudget.sim.hit_levels import offered_rate, share_at

LEVELS = ((1.0, 0.0, False), (4.0, 0.13, False), (162.0, 0.85, True))


@pytest.mark.parametrize(
    ("rate", "want"),
    [
        (1.0, 0.0),
        (4.0, 0.13),
        (2.0, 0.065),  # halfway in log(rate) between 1/s and 4/s
        (0.2, 0.0),  # below the range: the slowest run's
        (16.0, 0.13 + 0.72 * math.log(4) / math.log(40.5)),  # toward the burst's level
        (500.0, 0.85),
        (math.inf, 0.85),
    ],
)
def test_share_between_the_fitted_runs(rate: float, want: float) -> None:
    got = share_at(LEVELS, rate)
    assert got == pytest.approx(want, abs=1e-9)


def test_without_a_burst_a_burst_takes_the_busiest_runs_share() -> None:
    assert share_at(LEVELS[:2], math.inf) == pytest.approx(0.13)
    assert share_at((), 3.0) is None


def test_offered_rate_per_replica() -> None:
    assert offered_rate(np.zeros(200), 1) == math.inf  # all at once
    assert offered_rate(np.array([5.0]), 1) == 0.0  # one lone prompt
    assert offered_rate(np.linspace(0.0, 50.0, 201), 2) == pytest.approx(201 / 50 / 2)
