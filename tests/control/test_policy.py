"""Policy resolution: the seed default, SLO shares, and errors that name the field."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tailbudget.budget import parse_budget
from tailbudget.budget.policy import parse_policy, resolve_policy, resolve_threshold
from tailbudget.errors import PolicyError

BUDGET = """
service: rag
slo: {p50: 1000, p95: 2000, p99: 4000, error_rate: 0.02}
pipeline:
  - stage: llm
    budget: {p50: 800, p95: 1500, p99: 3000}
"""


def _budget(policy: str = "") -> object:
    return parse_budget(BUDGET + policy)


def test_seed_default_without_budget() -> None:
    p = resolve_policy(None)
    by = {r.name: r for r in p.rules}
    assert (p.window_s, p.evaluate_every_s, p.sub_windows) == (60.0, 10.0, 6)
    assert by["scale_up_p95"].threshold == 1800 and by["scale_up_p95"].for_s == 0
    assert by["trim_logging_p95"].threshold == 2800 and by["trim_logging_p95"].for_s == 120
    assert by["shed_load_p95"].threshold == 3000 and by["shed_load_p95"].for_s == 120
    assert by["rollback_error_rate"].threshold == 0.01
    assert by["rollback_p99_baseline"].threshold == 1.2
    assert p.baseline_p99_ms is None
    for r in p.rules:
        assert r.clear_threshold < r.threshold


def test_default_scales_with_slo_p95() -> None:
    p = resolve_policy(_budget())  # type: ignore[arg-type]
    by = {r.name: r for r in p.rules}
    assert by["scale_up_p95"].threshold == pytest.approx(1800 * 2000 / 2800)
    assert by["shed_load_p95"].threshold == pytest.approx(3000 * 2000 / 2800)
    assert by["rollback_error_rate"].threshold == 0.02  # the SLO's error rate
    assert "scaled to slo.p95 = 2000 ms" in p.source


def test_default_watches_the_percentile_a_p99_only_slo_states() -> None:
    # DeLag measured with `--slo p99=600`: no p95 objective, so no 1800 ms p95 rule for a
    # 2800 ms SLO the budget never set; the same shares of the p99 target, on p99.
    text = BUDGET.replace("{p50: 1000, p95: 2000, p99: 4000, error_rate: 0.02}", "{p99: 600}")
    p = resolve_policy(parse_budget(text))
    latency = [r for r in p.rules if r.action in ("scale_up", "trim_logging", "shed_load")]
    assert {r.metric for r in latency} == {"p99"}
    by = {r.name: r for r in latency}
    assert by["scale_up_p99"].threshold == pytest.approx(600 * 1800 / 2800)
    assert by["trim_logging_p99"].threshold == pytest.approx(600.0)
    assert by["shed_load_p99"].threshold == pytest.approx(600 * 3000 / 2800)
    assert by["scale_up_p99"].expr == "64.3% of p99"
    assert "scaled to slo.p99 = 600 ms" in p.source
    # p50 and p99 stated: the tail objective is watched, not the median.
    both = resolve_policy(parse_budget(text.replace("{p99: 600}", "{p50: 200, p99: 600}")))
    assert {r.metric for r in both.rules if r.action == "scale_up"} == {"p99"}
    # The policy simulate runs for the same objectives is this one (one resolution).
    from tailbudget._api.sim import _policy

    budget = parse_budget(text)
    assert _policy(budget, budget.objectives)[0].rules == p.rules
    assert _policy(None, budget.objectives)[0].rules == p.rules


def test_block_with_shares_and_clear() -> None:
    p = resolve_policy(
        _budget(  # type: ignore[arg-type]
            """
policy:
  window: 2m
  evaluate_every: 15s
  min_samples: 50
  rollback_for: 3m
  baseline_p99_ms: 900
  replicas: {min: 2, max: 8, step: 2}
  dry_run: true
  rules:
    - {name: early, metric: p95, op: ">=", threshold: 90% of p95, action: scale_up,
       cooldown: 30s, clear: {threshold: 70% of p95, for: 3m}}
    - {metric: error_rate, threshold: 5%, action: rollback}
    - {metric: p99_vs_baseline, threshold: 1.5x, action: rollback}
    - {metric: p99, threshold: 4.5s, for: 1m, action: shed_load}
"""
        )
    )
    assert (p.window_s, p.evaluate_every_s, p.sub_windows) == (120.0, 15.0, 8)
    assert p.min_samples == 50 and p.dry_run and p.baseline_p99_ms == 900
    assert (p.replicas.min, p.replicas.max, p.replicas.step) == (2, 8, 2)
    early, err, base, shed = p.rules
    assert early.threshold == pytest.approx(1800) and early.op == ">="
    assert early.clear_threshold == pytest.approx(1400) and early.clear_for_s == 180
    assert early.cooldown_s == 30 and early.expr == "90% of p95"
    assert err.threshold == pytest.approx(0.05) and err.for_s == 180  # rollback_for
    assert err.name == "rollback_error_rate"
    assert base.threshold == 1.5 and base.clear_threshold == pytest.approx(1.25)
    assert shed.threshold == 4500 and shed.for_s == 60


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("policy: {windw: 60s}", "policy.windw: unknown key"),
        ("policy: {window: 65s}", "whole multiple"),
        ("policy: {rollback_for: 10m}", "policy.rollback_for: must be between 2m and 5m"),
        ("policy: {min_samples: 0}", "policy.min_samples"),
        ("policy: {replicas: {min: 5, max: 2}}", r"replicas.max \(2\) is below replicas.min \(5\)"),
        ("policy: {rules: []}", "policy.rules: must be a non-empty list"),
        (
            "policy: {rules: [{metric: p95, threshold: 1800}]}",
            r"policy.rules\[0\].action: is required",
        ),
        (
            "policy: {rules: [{metric: latency, threshold: 1800, action: scale_up}]}",
            r"policy.rules\[0\].metric: metric 'latency' is not a metric name",
        ),
        (
            "policy: {rules: [{metric: p95, threshold: 1800, action: scale_down}]}",
            "recovery actions follow automatically",
        ),
        (
            "policy: {rules: [{metric: p95, threshold: 'fast', action: scale_up}]}",
            r"policy.rules\[0\].threshold: a p95 threshold is milliseconds",
        ),
        (
            "policy: {rules: [{metric: p95, threshold: 90% of error_rate, action: scale_up}]}",
            "share of a latency percentile",
        ),
        (
            "policy: {rules: [{metric: p95, threshold: 1800, action: scale_up,"
            " clear: {threshold: 2000}}]}",
            r"rules\[0\].clear.threshold: 2000 is above the trigger threshold 1800",
        ),
        (
            "policy: {rules: [{metric: p95, threshold: 1800, for: soon, action: scale_up}]}",
            r"policy.rules\[0\].for: must be a duration",
        ),
    ],
)
def test_errors_name_the_field(block: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        resolve_policy(_budget(block))  # type: ignore[arg-type]


def test_share_of_missing_slo_percentile() -> None:
    with pytest.raises(PolicyError, match=r"slo\.p99, which the budget does not set"):
        parse_policy(
            {"rules": [{"metric": "p99", "threshold": "90% of p99", "action": "shed_load"}]}
        )


def test_policy_must_be_default_or_mapping() -> None:
    with pytest.raises(PolicyError, match="policy: must be 'default', 'model' or a mapping"):
        parse_policy([1])  # type: ignore[arg-type]
    with pytest.raises(PolicyError, match="policy: must be 'default', 'model' or a mapping"):
        parse_policy("aggressive")


def test_with_baseline_is_a_copy() -> None:
    p = resolve_policy(None)
    q = p.with_baseline(800.0)
    assert p.baseline_p99_ms is None and q.baseline_p99_ms == 800.0


_SLO = parse_budget(BUDGET).slo


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=1, max_value=50_000), st.sampled_from(["p50", "p95", "p99"]))
def test_threshold_share_of_slo(tenths: int, ref: str) -> None:
    share = tenths / 10
    value, expr = resolve_threshold(f"{share:g}% of {ref}", "p95", _SLO, "t")
    assert value == pytest.approx(share / 100 * getattr(_SLO, ref))
    assert expr == f"{share:g}% of {ref}"


@settings(max_examples=150, deadline=None)
@given(
    st.floats(min_value=0.001, max_value=1e6, allow_nan=False),
    st.sampled_from(["ms", "s", ""]),
)
def test_threshold_durations(value: float, unit: str) -> None:
    got, _ = resolve_threshold(f"{value:.3f}{unit}", "p99", _SLO, "t")
    assert got == pytest.approx(round(value, 3) * (1000.0 if unit == "s" else 1.0))


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(st.text(max_size=20), st.floats(), st.integers(), st.booleans(), st.none()),
    st.sampled_from(["p50", "p95", "p99", "error_rate", "p99_vs_baseline"]),
)
@example("inf", "error_rate")
@example("1e400", "p99_vs_baseline")
@example("-0%", "error_rate")
@example("0%", "error_rate")
@example("0% of p95", "p95")
@example("0x", "p99_vs_baseline")
def test_threshold_parser_only_raises_policy_error(raw: object, metric: str) -> None:
    try:
        value, _ = resolve_threshold(raw, metric, _SLO, "policy.rules[0].threshold")
    except PolicyError as exc:
        assert str(exc).startswith("policy.rules[0].threshold: ")
    else:
        assert value > 0 and value == value and value != float("inf")
