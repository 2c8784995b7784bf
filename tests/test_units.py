"""The one percentile vocabulary: `Percentile` and `MetricKey` read and write every
`p99.9` and `ttft.p95` in tailbudget."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailbudget._units import MetricKey, Percentile, parse_percentile, percentile_name
from tailbudget.errors import TailbudgetError


@pytest.mark.parametrize(
    ("text", "q", "name"),
    [("p50", 0.5, "p50"), ("p99.9", 0.999, "p99.9"), ("p90.0", 0.9, "p90"), (" p95 ", 0.95, "p95")],
)
def test_a_percentile_reads_once_and_writes_canonically(text, q, name):
    p = Percentile.parse(text)
    assert (p.q, p.name, str(p)) == (q, name, name)
    assert parse_percentile(text) == (name, q)
    assert percentile_name(q) == name


@pytest.mark.parametrize("text", ["p0", "p100", "99", "pp9", "ttft.p95", "", "p9..9"])
def test_what_is_not_a_percentile_is_refused_naming_the_fix(text):
    with pytest.raises(TailbudgetError, match="is not a percentile; write p and a number"):
        Percentile.parse(text)


def test_the_shape_of_a_percentile_key_is_told_from_a_valid_one():
    assert Percentile.shaped("p9..9") and Percentile.shaped("p100")
    assert not Percentile.shaped("p") and not Percentile.shaped("ttft") and not Percentile.shaped(9)


@given(st.floats(min_value=0.001, max_value=99.999).map(lambda x: round(x, 3)))
def test_names_round_trip(value):
    p = Percentile.parse(f"p{value:g}")
    assert Percentile.parse(p.name) == p
    assert p.name == f"p{value:g}"


@pytest.mark.parametrize(
    ("text", "metric", "name"),
    [
        ("ttft.p95", "ttft", "ttft.p95"),
        ("p99", "e2e", "e2e.p99"),
        ("a.b.p99.9", "a.b", "a.b.p99.9"),
    ],
)
def test_a_metric_key_is_a_metric_at_a_percentile(text, metric, name):
    key = MetricKey.parse(text)
    assert (key.metric, key.name) == (metric, name)
    assert MetricKey.split(text) is not None
    assert MetricKey.split("goodput") is None


def test_percentiles_order_by_quantile():
    assert sorted(Percentile.parse(t) for t in ("p99", "p50", "p99.9")) == [
        Percentile(0.5),
        Percentile(0.99),
        Percentile(0.999),
    ]
