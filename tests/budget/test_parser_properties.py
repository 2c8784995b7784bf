"""Arbitrary YAML never crashes the budget parser: it parses or raises BudgetError."""

from __future__ import annotations

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailbudget import Budget, BudgetError, parse_budget

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["p50", "p95", "p99", "stage", "parallel", "sequence", "x", "2m"]),
)
keys = st.sampled_from(
    [
        "slo",
        "pipeline",
        "stage",
        "budget",
        "parallel",
        "sequence",
        "llm",
        "p50",
        "p95",
        "p99",
        "ttft_ms",
        "tokens_per_s",
        "output_tokens",
        "headroom",
        "environment",
        "overhead_ms",
        "log",
    ]
)
trees = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=5)
    ),
    max_leaves=25,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(trees)
def test_structured_yaml_parses_or_explains(tree):
    text = yaml.safe_dump(tree)
    try:
        result = parse_budget(text)
    except BudgetError as exc:
        assert "\n" not in str(exc)
    else:
        assert isinstance(result, Budget)


@settings(max_examples=300)
@given(st.text(max_size=200))
def test_arbitrary_text_parses_or_explains(text):
    try:
        parse_budget(text)
    except BudgetError as exc:
        assert str(exc)
