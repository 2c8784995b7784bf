"""Rolling windows: ring rotation, late data, batch = one by one, bounds that cover."""

from __future__ import annotations

import numpy as np
import pytest

from tailbudget.control.stats import quantile_rank_bounds, wilson, z_of
from tailbudget.control.windows import RollingWindow
from tailbudget.errors import PolicyError


def test_window_covers_last_window_s_only() -> None:
    w = RollingWindow(60, 6)
    w.observe_many(np.arange(0, 60, 0.5), np.full(120, 100.0))
    s = w.stats(60.0, min_samples=20)
    assert s.count == 120 and s.known and s.p95 == pytest.approx(100.0, rel=0.01)
    assert w.stats(90.0).count == 60  # [30, 90)
    s = w.stats(120.0, min_samples=20)
    assert s.count == 0 and not s.known and s.p95 is None and s.error_rate is None


def test_min_samples_makes_unknown() -> None:
    w = RollingWindow(60, 6)
    w.observe_many(np.arange(19.0), np.full(19, 5.0))
    assert not w.stats(20.0, min_samples=20).known
    w.observe(19.5, 5.0)
    assert w.stats(20.0, min_samples=20).known


def test_late_observations_are_counted_not_used() -> None:
    w = RollingWindow(60, 6)
    w.observe(500.0, 10.0)
    assert not w.observe(100.0, 10.0)
    assert w.observe_many([90.0, 95.0, 499.0], [1.0, 1.0, 1.0]) == 1
    assert w.late == 3
    assert w.stats(500.0).count == 1  # [440, 500)
    assert w.stats(510.0).count == 2


def test_batch_equals_one_by_one() -> None:
    rng = np.random.default_rng(4)
    ts = rng.uniform(0, 120, 3000)  # unsorted on purpose
    ms = rng.lognormal(5, 1, 3000)
    err = rng.random(3000) < 0.03
    a, b = RollingWindow(60, 6), RollingWindow(60, 6)
    a.observe_many(ts, ms, err)
    for t, m, e in zip(ts, ms, err, strict=True):
        b.observe(t, m, bool(e))
    # the batch sees the newest slot first, so its ring drops exactly what is too old
    sa, sb = a.stats(120.0), b.stats(120.0)
    assert sa.count == int(np.sum(ts >= 60)) and sa.errors == int(np.sum(err[ts >= 60]))
    assert sa.p99 is not None and sb.p99 is not None
    assert sa.p99 == pytest.approx(float(np.quantile(ms[ts >= 60], 0.99)), rel=0.011)
    assert a.late == int(np.sum(ts < 60))


def test_bad_values_rejected_and_counted() -> None:
    w = RollingWindow(60, 6)
    assert w.observe_many([1.0, np.nan, 2.0], [5.0, 5.0, np.inf]) == 1
    assert w.rejected == 2
    with pytest.raises(PolicyError, match="one length"):
        w.observe_many([1.0], [1.0, 2.0])


def test_state_round_trip() -> None:
    w = RollingWindow(60, 6)
    rng = np.random.default_rng(1)
    w.observe_many(rng.uniform(0, 60, 500), rng.lognormal(5, 1, 500), rng.random(500) < 0.1)
    r = RollingWindow(60, 6)
    r.load_state(w.to_state())
    assert r.stats(60.0) == w.stats(60.0)


def test_wilson_textbook_values() -> None:
    # Newcombe (1998), Table I, method 4 (score interval with continuity correction)
    lo, hi = wilson(0, 10, 1.959964) or (0, 0)
    assert lo == 0.0 and hi == pytest.approx(0.3445, abs=1e-4)
    lo, hi = wilson(5, 10, 1.959964) or (0, 0)
    assert (lo, hi) == (pytest.approx(0.2014, abs=1e-4), pytest.approx(0.7986, abs=1e-4))
    assert wilson(0, 0) is None
    assert z_of(0.975) == pytest.approx(1.95996, abs=1e-4)


@pytest.mark.parametrize(("n", "p"), [(60, 0.01), (200, 0.01), (1000, 0.01), (100, 0.05)])
def test_wilson_lower_bound_covers_true_rate(n: int, p: float) -> None:
    rng = np.random.default_rng(2)
    z = z_of(0.975)
    errors = rng.binomial(n, p, 4000)
    lows = np.array([(wilson(int(e), n, z) or (0, 0))[0] for e in errors])
    highs = np.array([(wilson(int(e), n, z) or (0, 0))[1] for e in errors])
    assert np.mean(lows > p) <= 0.035  # nominal one-sided 2.5%, discrete binomial
    assert np.mean(highs < p) <= 0.035
    assert np.mean(errors / n > p) > 0.2  # the raw ratio alone would often claim a breach


def test_p99_lower_bound_covers_true_p99() -> None:
    rng = np.random.default_rng(3)
    z = z_of(0.975)
    true_p99 = float(np.exp(1.0 * 2.3263478740408408))  # lognormal(0, 1)
    n, trials, above = 300, 600, 0
    lo_q, _ = quantile_rank_bounds(0.99, n, z)
    for _ in range(trials):
        x = rng.lognormal(0.0, 1.0, n)
        lower = float(np.quantile(x, lo_q, method="lower"))
        above += lower > true_p99
    assert above / trials <= 0.025 + 0.015
