"""The one verdict rule (tailbudget._verdict.judge), against scipy's exact binomial test."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest

from tailbudget._units import min_rows
from tailbudget._verdict import VERDICT_CODES, judge, verdicts
from tailbudget.budget.objectives import parse_objectives
from tailbudget.sim.judge import met
from tailbudget.sim.objectives import measure
from tailbudget.sim.trace import SimTrace

PERCENTILES = ("p50", "p90", "p95", "p99", "p99.9")


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 5000),
    share=st.floats(0.0, 1.0),
    percentile=st.sampled_from(PERCENTILES),
)
def test_a_breach_is_exactly_the_one_sided_binomial_test(n, share, percentile):
    over = round(n * share)
    q = float(percentile[1:]) / 100
    p = binomtest(over, n, 1 - q, alternative="greater").pvalue
    got = judge(percentile, 100.0, 150.0, n, over)
    # p exactly 0.05 (1 of 1 at p95) is a rejection at 95%: compare past float noise.
    assert (got.verdict == "breach") is bool(p <= 0.05 + 1e-9 and over > n * (1 - q)), (n, p)
    if got.verdict == "breach":
        assert got.confidence == pytest.approx(1 - p, abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 5000), percentile=st.sampled_from(PERCENTILES))
def test_nothing_over_the_target_is_never_a_breach(n, percentile):
    # A target above every request: pass on enough requests, else inconclusive.
    got = judge(percentile, 1000.0, 900.0, n, 0)
    assert got.verdict == ("pass" if n >= min_rows(percentile) else "inconclusive")
    if got.verdict == "inconclusive":
        assert got.more == min_rows(percentile) - n


def test_few_requests_prove_a_breach():
    # A Nezha fault minute: 10 of 51 traces over a p99 target; measure_budget's 20
    # requests with 3 over 500 ms (p99 1,232 ms).
    assert judge("p99", 500, 600, 51, 10).verdict == "breach"
    got = judge("p99", 500, 1232, 20, 3)
    assert got.verdict == "breach" and got.confidence > 0.998
    assert "3 of 20 requests over 500 ms" in got.reason


def test_over_the_target_but_unproved_is_inconclusive_with_how_many_more():
    # 1.2% over a p99 target on 1,000 requests: p = 0.30, not proved. At that share,
    # the smallest log that proves it is the answer to "how many more".
    got = judge("p99", 500, 600, 1000, 12)
    assert got.verdict == "inconclusive" and got.more is not None
    total = 1000 + got.more
    k = int(total * 0.012 + 1e-9)
    assert binomtest(k, total, 0.01, alternative="greater").pvalue <= 0.05
    k0 = int((total - 1) * 0.012 + 1e-9)
    assert binomtest(k0, total - 1, 0.01, alternative="greater").pvalue > 0.05
    assert f"about {got.more:,} more" in got.reason
    # Exactly the share p99 allows: no number of requests proves it at that share.
    assert judge("p99", 500, 600, 100, 1).more is None


def test_a_pass_needs_the_minimum_and_says_its_confidence():
    assert judge("p99", 500, 400, 99, 0).verdict == "inconclusive"
    got = judge("p99", 500, 400, 100, 0)
    assert got.verdict == "pass" and got.confidence == pytest.approx(1 - 0.99**100)
    assert judge("p99", 500, None, 0, 0).verdict == "no_data"
    # Without a count of requests over the target, the figure alone decides on enough
    # requests (the minimum for both sides).
    assert judge("p99", 500, 600, 100, None).verdict == "breach"
    assert judge("p99", 500, 600, 99, None).verdict == "inconclusive"


def test_goodputs_breach_side_is_the_same_exact_test():
    from tailbudget._verdict import judge_share

    # AIPerf: 60 good of 100 against a 90% minimum: P[G <= 60 | 100, 0.9] ~ 1e-14.
    assert judge_share(60, 100, 0.9) == "breach"
    # 8 of 10 against 90%: P[G <= 8] = 0.26, not proved.
    assert judge_share(8, 10, 0.9) == "inconclusive"
    assert judge_share(9, 10, 0.9) == "pass"
    p = binomtest(85, 100, 0.9, alternative="less").pvalue
    assert (judge_share(85, 100, 0.9) == "breach") is bool(p <= 0.05)


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(0, 3000),
    share=st.floats(0.0, 1.0),
    figure=st.floats(50.0, 150.0),
    percentile=st.sampled_from(PERCENTILES),
)
def test_the_many_minutes_form_is_the_same_rule(n, share, figure, percentile):
    # simulate judges each minute with `verdicts`; it must say what `judge` says.
    over = round(n * share)
    got = verdicts(percentile, 100.0, np.asarray([figure]), np.asarray([n]), np.asarray([over]))
    assert VERDICT_CODES[int(got[0])] == judge(percentile, 100.0, figure, n, over).verdict


def test_a_simulated_minute_is_in_breach_only_when_its_requests_prove_it():
    # Three minutes of a p99 objective at 100 ms: 3 of 20 over (proved), 1 of 20 over
    # (over the target, not proved: inconclusive), 0 of 20 (too few to pass: inconclusive).
    per = [np.r_[np.full(17, 50.0), np.full(3, 500.0)], np.r_[np.full(19, 50.0), 500.0]]
    per.append(np.full(20, 50.0))
    arrival = np.concatenate([m * 60.0 + np.linspace(0, 59, v.size) for m, v in enumerate(per)])
    e2e = np.concatenate(per)
    trace = SimTrace(
        arrival_s=arrival, done_s=arrival + e2e / 1000.0, ttft_s=None,
        src=np.arange(arrival.size), shed=np.zeros(arrival.size, dtype=bool),
        error=np.zeros(arrival.size, dtype=bool), output_tokens=None,
    )  # fmt: skip
    (res,) = measure(trace, parse_objectives("p99=100"))
    assert (res.minutes_in_breach, res.minutes_inconclusive) == (1, 2)
    assert res.attainment == pytest.approx(2 / 3)
    assert not met([res])  # the floor's and the model policy's judgement: the same minutes
