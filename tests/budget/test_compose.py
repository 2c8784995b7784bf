"""Composition: the seed arithmetic, and the Monte Carlo against closed forms."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tailbudget.budget import (
    Exponential,
    Normal,
    additive,
    compose,
    fit_lognormal,
    fit_stage,
    load_budget,
    monte_carlo,
    parse_budget,
)
from tests.conftest import EXAMPLES

QS = (0.5, 0.95, 0.99)


def test_seed_framework_sums():
    b = load_budget(EXAMPLES / "seed-rag.yaml")
    add = additive(b)
    assert add["p50"] == pytest.approx(1300)
    assert add["p95"] == pytest.approx(2600)
    assert add["p99"] == pytest.approx(5200)


def test_overhead_is_added_once():
    text = (EXAMPLES / "seed-rag.yaml").read_text().replace("overhead_ms: 0", "overhead_ms: 200")
    add = additive(parse_budget(text))
    assert add["p95"] == pytest.approx(2800)
    assert add["p99"] == pytest.approx(5400)


def test_composed_tail_is_below_additive_for_independent_stages():
    b = load_budget(EXAMPLES / "seed-rag.yaml")
    comp = compose(b, samples=200_000, seed=1)
    add = additive(b)
    assert comp.percentiles["p95"] < add["p95"]
    assert comp.percentiles["p99"] < add["p99"]
    assert comp.method.startswith("monte_carlo_spliced_lognormal")


def test_parallel_group_takes_the_max():
    b = parse_budget(
        "slo: {p99: 10000}\npipeline:\n  - stage: a\n    budget: {p50: 10, p95: 20, p99: 30}\n"
        "  - parallel:\n      - stage: b\n        budget: {p50: 100, p95: 200, p99: 400}\n"
        "      - stage: c\n        budget: {p50: 50, p95: 250, p99: 300}\n"
    )
    assert additive(b) == pytest.approx({"p50": 110, "p95": 270, "p99": 430})


def test_parallel_composed_tail_exceeds_max_of_tails():
    # Two identical independent branches: P(max <= x) = F(x)^2, so the composed p99
    # is the branch's 0.99**0.5 quantile, above the branch p99.
    b = parse_budget(
        "slo: {p99: 10000}\npipeline:\n  - parallel:\n"
        "      - stage: a\n        budget: {p50: 100, p95: 200, p99: 300}\n"
        "      - stage: b\n        budget: {p50: 100, p95: 200, p99: 300}\n"
    )
    fit = fit_stage({"p50": 100, "p95": 200, "p99": 300})
    expected = fit.ppf(0.99**0.5)
    comp = compose(b, samples=1_000_000, seed=3)
    assert comp.percentiles["p99"] == pytest.approx(expected, rel=0.01)
    assert comp.percentiles["p99"] > additive(b)["p99"]


def test_sum_of_independent_normals_matches_closed_form():
    mus, sigmas = [100.0, 250.0, 40.0], [10.0, 30.0, 5.0]
    tree = ("seq", [("stage", Normal(m, s)) for m, s in zip(mus, sigmas, strict=True)])
    got = monte_carlo(tree, samples=1_000_000, seed=7, quantiles=QS)
    exact = stats.norm.ppf(QS, loc=sum(mus), scale=np.sqrt(sum(s * s for s in sigmas)))
    np.testing.assert_allclose(got, exact, rtol=0.01)


def test_sum_of_independent_exponentials_matches_gamma():
    mean, k = 50.0, 4
    tree = ("seq", [("stage", Exponential(mean)) for _ in range(k)])
    got = monte_carlo(tree, samples=1_000_000, seed=11, quantiles=QS)
    exact = stats.gamma.ppf(QS, a=k, scale=mean)
    np.testing.assert_allclose(got, exact, rtol=0.01)


def test_correlation_widens_the_tail():
    base = (EXAMPLES / "seed-rag.yaml").read_text()
    indep = compose(parse_budget(base), samples=200_000, seed=2)
    corr = compose(
        parse_budget(base + "composition: {correlation: 0.8}\n"), samples=200_000, seed=2
    )
    assert corr.percentiles["p99"] > indep.percentiles["p99"]
    assert "copula" in corr.method


def test_lognormal_fit_recovers_parameters():
    mu, sigma = np.log(200.0), 0.6
    points = {
        p: float(np.exp(mu + sigma * stats.norm.ppf(q)))
        for p, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
    }
    fit = fit_lognormal(points)
    assert fit.mu == pytest.approx(mu, rel=1e-9)
    assert fit.sigma == pytest.approx(sigma, rel=1e-9)
    assert fit.points == 3 and not fit.default_spread


def test_single_point_uses_documented_default_spread():
    fit = fit_lognormal({"p99": 400.0}, default_sigma=0.5)
    assert fit.default_spread and fit.sigma == 0.5
    assert fit.ppf(0.99) == pytest.approx(400.0)


def test_spliced_fit_is_exact_at_every_given_point():
    fit = fit_stage({"p50": 1000.0, "p95": 2000.0, "p99": 4000.0})
    for p, q, v in (("p50", 0.5, 1000), ("p95", 0.95, 2000), ("p99", 0.99, 4000)):
        assert fit.ppf(q) == pytest.approx(v, rel=1e-9), p
    z = np.array([0.0, stats.norm.ppf(0.95), stats.norm.ppf(0.99), 3.5])
    x = fit.from_normal(z.copy())
    np.testing.assert_allclose(x[:3], [1000, 2000, 4000], rtol=1e-9)
    assert x[3] > 4000  # the tail keeps rising past the last knot


def test_spliced_monte_carlo_reproduces_its_own_quantiles():
    fit = fit_stage({"p50": 100.0, "p95": 300.0, "p99": 900.0})
    got = monte_carlo(("stage", fit), samples=1_000_000, seed=5, quantiles=QS)
    np.testing.assert_allclose(got, [100, 300, 900], rtol=0.01)


def test_spliced_fast_path_matches_interpolation():
    fit = fit_stage({"p50": 100.0, "p95": 300.0, "p99": 900.0})
    z = np.linspace(-6, 6, 1001)
    zz, yy = fit._knots()
    np.testing.assert_allclose(fit.from_normal(z.copy()), np.exp(np.interp(z, zz, yy)), rtol=1e-12)


def test_a_mostly_absent_stage_does_not_explode_past_its_last_percentile():
    # A span-table stage most requests never call: 0.001 ms to p95, 228 ms at p99. At its
    # own slope (sigma 18) p99.9 would be ~2e8 ms; the tail grows as a sigma-2 lognormal.
    from tailbudget.budget.distributions import MAX_TAIL_SIGMA, fit_stage

    fit = fit_stage({"p50": 0.001, "p95": 0.001, "p99": 228.0})
    assert fit.ppf(0.99) == pytest.approx(228.0, rel=1e-6)
    bound = 228.0 * np.exp(MAX_TAIL_SIGMA * (3.0902 - 2.3263))
    assert fit.ppf(0.999) == pytest.approx(bound, rel=1e-3)
    draws = fit.from_normal(np.array([2.3263, 3.0902]))
    assert draws[1] == pytest.approx(bound, rel=1e-3)


@pytest.mark.parametrize("rho", [-1.0, -0.5, -0.2])
def test_negative_correlation_trades_time_between_stages(rho):
    # Two stages that trade time (a benchmark's TTFT and decode under one deadline): the
    # copula's normals correlate at rho, and the sum's spread shrinks as rho falls.
    from tailbudget.budget.compose import _opposed, draws
    from tailbudget.budget.distributions import Normal

    rng = np.random.default_rng(1)
    z = list(_opposed(rng, 3, 400_000, max(rho, -0.5)))
    c = np.corrcoef(z)
    assert c[0, 1] == pytest.approx(max(rho, -0.5), abs=0.01)
    assert np.std(z[2]) == pytest.approx(1.0, abs=0.01)
    tree = (
        "seq",
        [("stage", Normal(mu=100.0, sigma=10.0)), ("stage", Normal(mu=100.0, sigma=10.0))],
    )
    total = draws(tree, samples=400_000, seed=2, correlation=rho)
    assert np.std(total) == pytest.approx(10.0 * np.sqrt(2.0 * (1.0 + rho)), abs=0.2)


def test_a_correlation_below_what_the_stages_allow_is_refused():
    from tailbudget.budget import parse_budget
    from tailbudget.errors import TailbudgetError

    text = "slo: {p99: 100}\ncomposition: {correlation: -0.6}\npipeline:\n" + "".join(
        f"  - stage: s{i}\n    budget: {{p99: 10}}\n" for i in range(3)
    )
    with pytest.raises(TailbudgetError, match=r"-0\.5"):
        parse_budget(text)
