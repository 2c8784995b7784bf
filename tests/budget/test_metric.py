"""Metric names of policy rules: the grammar, canonical forms, and clear refusals."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailbudget.budget.metric import parse_metric
from tailbudget.errors import PolicyError


@pytest.mark.parametrize(
    ("text", "kind", "series", "q", "name"),
    [
        ("p95", "quantile", "e2e", 0.95, "p95"),
        ("e2e.p95", "quantile", "e2e", 0.95, "p95"),
        ("e2e.p99.9", "quantile", "e2e", 0.999, "p99.9"),
        ("ttft.p95", "quantile", "ttft", 0.95, "ttft.p95"),
        ("tpot.p99", "quantile", "tpot", 0.99, "tpot.p99"),
        ("itl.p99", "quantile", "itl", 0.99, "itl.p99"),
        (
            "ts-seat-service_getLeftTicketOfInterval.p99",
            "quantile",
            "ts-seat-service_getLeftTicketOfInterval",
            0.99,
            "ts-seat-service_getLeftTicketOfInterval.p99",
        ),
        ("goodput", "goodput", "e2e", None, "goodput"),
        ("error_rate", "error_rate", "e2e", None, "error_rate"),
        ("p99_vs_baseline", "vs_baseline", "e2e", 0.99, "p99_vs_baseline"),
        ("ttft.p99_vs_baseline", "vs_baseline", "ttft", 0.99, "ttft.p99_vs_baseline"),
        ("goodput_vs_baseline", "goodput_vs_baseline", "e2e", None, "goodput_vs_baseline"),
    ],
)
def test_names_parse_to_their_series_and_statistic(text, kind, series, q, name):
    ref = parse_metric(text)
    assert (ref.kind, ref.series, ref.q, ref.name) == (kind, series, q, name)
    assert parse_metric(ref.name) == ref  # canonical names round-trip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("latency", "is not a metric name"),
        ("p100", "is not a metric name"),
        ("p0", "in \\(0, 100\\)"),
        ("goodput.p95", "goodput has no percentiles"),
        ("", "must be a name"),
    ],
)
def test_bad_names_are_refused_naming_the_fix(text, message):
    with pytest.raises(PolicyError, match=message):
        parse_metric(text)


@given(st.text(max_size=30))
def test_any_text_parses_or_raises_policy_error(text):
    try:
        ref = parse_metric(text)
    except PolicyError:
        return
    assert parse_metric(ref.name) == ref


@given(
    st.sampled_from(["e2e", "ttft", "tpot", "itl", "retrieval"]),
    st.floats(min_value=0.1, max_value=99.9, allow_nan=False).map(lambda x: round(x, 1)),
)
def test_every_percentile_of_every_series_round_trips(series, pct):
    ref = parse_metric(f"{series}.p{pct:g}")
    assert ref.series == series and ref.q == pytest.approx(pct / 100)
    assert parse_metric(ref.name) == ref
