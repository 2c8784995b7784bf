"""Formatting helpers shared by the targets: durations, names, numbers, burn windows."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailbudget.budget import Budget
from tailbudget.errors import BudgetError
from tailbudget.export.common import (
    k8s_name,
    latency_buckets,
    le_label,
    num,
    parse_burn_windows,
    parse_promql_duration,
    promql_duration,
)

DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@given(st.integers(1, 10**9))
def test_promql_duration_round_trips_whole_milliseconds(ms: int) -> None:
    text = promql_duration(ms / 1000)
    assert re.fullmatch(r"\d+(ms|s|m|h|d)", text)
    assert parse_promql_duration(text) == pytest.approx(ms / 1000, abs=1e-9)


def test_promql_duration_picks_the_largest_whole_unit() -> None:
    assert [promql_duration(s) for s in (60, 90, 3600, 259200, 0.5)] == [
        "1m",
        "90s",
        "1h",
        "3d",
        "500ms",
    ]
    with pytest.raises(BudgetError):
        promql_duration(0)
    with pytest.raises(BudgetError, match="5m, 1h or 3d"):
        parse_promql_duration("5 minutes")


@given(st.text(max_size=100), st.sampled_from(["", "latency", "tb"]))
def test_k8s_names_are_dns_1123(text: str, suffix: str) -> None:
    name = k8s_name(text, suffix)
    assert len(name) <= 63 and DNS1123.match(name), name


@given(st.integers(1, 10**7))
def test_num_and_le_print_millisecond_thresholds_exactly(ms: int) -> None:
    seconds = round(ms / 1000, 9)
    assert float(num(seconds)) == seconds
    assert float(le_label(seconds)) == seconds


@given(
    st.lists(
        st.tuples(st.integers(2, 500), st.integers(1, 100), st.integers(1, 1000)),
        min_size=1,
        max_size=4,
    )
)
def test_burn_windows_parse_what_they_print(pairs: list[tuple[int, int, int]]) -> None:
    pairs = [(long_m, min(short_m, long_m - 1), f) for long_m, short_m, f in pairs]
    text = ",".join(f"{long_m}m/{short_m}m:{f / 10:g}" for long_m, short_m, f in pairs)
    windows = parse_burn_windows(text)
    assert [(w.long_s, w.short_s, w.factor) for w in windows] == [
        (long_m * 60.0, short_m * 60.0, f / 10) for long_m, short_m, f in pairs
    ]
    assert all(w.severity == ("page" if w.factor > 1 else "ticket") for w in windows)


def test_latency_buckets_match_the_measure_layers_histograms(template_budget: Budget) -> None:
    # The latency SLI needs the service's histograms to have a bucket at each SLO
    # threshold: the bounds export assumes are the ones Measure's Prometheus sink uses.
    measure = pytest.importorskip(
        "tailbudget.measure.prometheus", reason="the Measure layer is not merged in this tree"
    )
    assert tuple(measure.budget_buckets(template_budget)) == latency_buckets(template_budget)
