"""The one formatter: every figure reads the same wherever it appears."""

from __future__ import annotations

import math

import pytest

from tailbudget import _fmt as fmt


def test_thresholds_in_their_metric_unit() -> None:
    assert fmt.threshold("error_rate", 0.005) == "0.5%"  # never rounded up to 1%
    assert fmt.threshold("error_rate", 0.01) == "1%"
    assert fmt.threshold("p95", 1800.0) == "1,800 ms"
    assert fmt.threshold("p99_vs_baseline", 1.2) == "1.2x"
    assert fmt.threshold("ttft.p95", 45.5) == "45.5 ms"
    assert fmt.threshold("p99", None) == "n/a"


def test_ms_shares_counts_and_numbers() -> None:
    assert fmt.ms(4551.857300000002) == "4,552"
    assert fmt.ms(4.56) == "4.6" and fmt.ms(0) == "0"
    assert fmt.signed_ms(2115.2) == "+2,115" and fmt.signed_ms(-3.0) == "-3.0"
    assert fmt.share(0.1234) == "12.3%" and fmt.share(0.5, 0) == "50%"
    assert fmt.count(12000) == "12,000"
    assert fmt.number(13.8412) == "13.84" and fmt.r2(0.5913) == "0.59"
    assert fmt.seconds(14399.77) == "14,400 s" and fmt.seconds(9.8) == "9.8 s"


@pytest.mark.parametrize("bad", [None, math.nan, math.inf, "12", True])
def test_missing_figures_print_a_dash(bad: object) -> None:
    for f in (fmt.ms, fmt.share, fmt.count, fmt.number, fmt.r2, fmt.signed_ms):
        assert f(bad) == fmt.MISSING


def test_counts_and_rates_are_not_ms() -> None:
    # An hpa:concurrency policy's decisions showed "8 ms" of concurrency (issue 26).
    assert fmt.threshold("concurrency", 8.0) == "8 requests"
    assert fmt.threshold("arrival_rate", 4.5) == "4.5/s"
    assert fmt.threshold("utilization", 0.7) == "70%"
    # Issue 36: the model policy's count, singular at one; drift a ratio, never ms.
    assert fmt.threshold("replicas", 1.0) == "1 replica"
    assert fmt.threshold("replicas", 3.0) == "3 replicas"
    assert fmt.threshold("measured_vs_model", 1.25) == "1.25x"


def test_listing_reads_lists_and_pairs():
    from tailbudget import _fmt as fmt

    assert fmt.listing([[9.352, 43.983], [48.984, 57.579]]) == "(9.352, 43.98), (48.98, 57.58)"
    assert fmt.listing([-0.0, 0.0]) == "0, 0"
    assert fmt.listing("2 load levels") == "2 load levels"
    assert fmt.listing(None) == fmt.MISSING
