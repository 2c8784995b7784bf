"""Controller semantics, driven by window stats the test states exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tailbudget.budget.policy import parse_policy, resolve_policy
from tailbudget.control.engine import NO_BASELINE, Controller
from tailbudget.control.windows import WindowStats
from tailbudget.errors import PolicyError


def _stats(
    p95: float = 500.0,
    *,
    count: int = 600,
    errors: int = 0,
    p99: float | None = None,
    p99_lower: float | None = None,
    known: bool | None = None,
) -> WindowStats:
    return WindowStats(
        count=count,
        errors=errors,
        p50=p95 / 3,
        p95=p95,
        p99=p99 if p99 is not None else p95 * 1.5,
        known=count >= 20 if known is None else known,
        error_rate_upper=None,
        p99_lower=p99_lower,
    )


def _run(c: Controller, start: float, values: list[WindowStats], every: float = 10.0):
    out = []
    for i, s in enumerate(values):
        out += c.evaluate(start + i * every, s)
    return out


def test_scale_up_fires_at_once_with_evidence() -> None:
    c = Controller(resolve_policy(None))
    (d,) = c.evaluate(10.0, _stats(1900.0))
    assert (d.action, d.metric, d.value, d.threshold, d.rule) == (
        "scale_up",
        "p95",
        1900.0,
        1800.0,
        "scale_up_p95",
    )
    assert "1,900 ms > 1,800 ms" in d.reason and "1 -> 2" in d.reason
    assert d.replicas == 2 and c.desired_replicas == 2 and not d.dry_run
    assert c.active == {"scale_up"}


def test_for_must_hold_at_every_evaluation() -> None:
    c = Controller(resolve_policy(None))
    # 2900 ms is above trim (2800) but below shed (3000)
    seq = [_stats(2900.0)] * 12 + [_stats(2700.0)] + [_stats(2900.0)] * 13
    decisions = _run(c, 10.0, seq)
    trims = [d for d in decisions if d.action == "trim_logging"]
    assert len(trims) == 1
    # streak restarts at the 14th evaluation (t=140); 120 s later is t=260
    assert trims[0].t_s == pytest.approx(260.0)
    assert not [d for d in decisions if d.action == "shed_load"]


def test_missed_evaluations_break_the_streak() -> None:
    c = Controller(resolve_policy(None))
    for t in (10.0, 20.0, 30.0):
        c.evaluate(t, _stats(2900.0))
    # nothing evaluated for 90 s: the condition is not known to have held
    assert not [d for d in c.evaluate(130.0, _stats(2900.0)) if d.action == "trim_logging"]
    trims = [d for d in _run(c, 140.0, [_stats(2900.0)] * 12) if d.action == "trim_logging"]
    assert [d.t_s for d in trims] == [250.0]


def test_unknown_never_triggers_nor_recovers() -> None:
    c = Controller(resolve_policy(None))
    few = _stats(5000.0, count=5)
    assert _run(c, 10.0, [few] * 30) == []
    assert c.status(300.0)["rules"][0]["status"] == "unknown"
    # engage trim and shed, then only unknown windows: nothing is restored
    _run(c, 400.0, [_stats(3100.0)] * 13)
    assert {"trim_logging", "shed_load", "scale_up"} <= c.active
    assert _run(c, 530.0, [_stats(100.0, count=3)] * 60) == []
    assert {"trim_logging", "shed_load"} <= c.active


def test_unknown_breaks_a_streak() -> None:
    c = Controller(resolve_policy(None))
    seq = [_stats(2900.0)] * 6 + [_stats(2900.0, count=5)] + [_stats(2900.0)] * 12
    trims = [d for d in _run(c, 10.0, seq) if d.action == "trim_logging"]
    assert trims == []


def test_cooldown_and_replica_bounds() -> None:
    p = parse_policy({"replicas": {"min": 2, "max": 5, "step": 2}})
    c = Controller(p)
    ups = [d for d in _run(c, 10.0, [_stats(2000.0)] * 30) if d.action == "scale_up"]
    # 60 s cooldown between steps; 2 -> 4 -> 5 then bounded at max
    assert [d.t_s for d in ups] == [10.0, 70.0]
    assert [d.replicas for d in ups] == [4, 5]
    assert c.desired_replicas == 5


def test_hysteresis_and_stabilization_for_recovery() -> None:
    c = Controller(resolve_policy(None))
    _run(c, 10.0, [_stats(2900.0)] * 13)
    assert "trim_logging" in c.active
    # between the clear threshold (2380) and the trigger: stays trimmed
    assert not [d for d in _run(c, 140.0, [_stats(2500.0)] * 30) if "logging" in d.action]
    assert "trim_logging" in c.active
    restored = [d for d in _run(c, 440.0, [_stats(2000.0)] * 20) if d.action == "restore_logging"]
    assert [d.t_s for d in restored] == [440.0 + 120.0]
    assert restored[0].threshold == pytest.approx(2380.0)
    assert "trim_logging" not in c.active


def test_scale_down_steps_once_per_stabilization_window() -> None:
    c = Controller(resolve_policy(None))
    _run(c, 10.0, [_stats(2000.0)] * 13)  # up at 10, 70, 130
    assert c.desired_replicas == 4
    downs = [d for d in _run(c, 140.0, [_stats(900.0)] * 50) if d.action == "scale_down"]
    assert [d.t_s for d in downs] == [260.0, 380.0, 500.0]
    assert [d.replicas for d in downs] == [3, 2, 1]
    assert "scale_up" not in c.active


def test_error_rate_uses_wilson_lower_bound() -> None:
    c = Controller(resolve_policy(None))
    # 2 errors in 60 requests: raw 3.3% > 1%, but the lower bound is below 1%
    noisy = [_stats(500.0, count=60, errors=2)] * 30
    assert _run(c, 10.0, noisy) == []
    assert c.status(300.0)["rules"][3]["bound"] < 0.01
    # 30 errors in 600: the bound clears 1% and it held for 2 min
    real = [_stats(500.0, count=600, errors=30)] * 13
    (d,) = _run(c, 400.0, real)
    assert d.action == "rollback" and d.t_s == 520.0
    assert d.bound is not None and 0.01 < d.bound < d.value == pytest.approx(0.05)
    assert d.bound_kind == "wilson_cc_lower@0.975"
    assert "Wilson lower bound" in d.reason


def test_baseline_rule_inactive_without_baseline() -> None:
    c = Controller(resolve_policy(None))
    assert _run(c, 10.0, [_stats(500.0, p99=5000.0, p99_lower=4000.0)] * 20) == []
    assert NO_BASELINE in c.status(200.0)["notes"]
    assert c.status(200.0)["rules"][4]["status"] == "inactive"
    c.set_baseline(1000.0)
    (d,) = _run(c, 210.0, [_stats(500.0, p99=5000.0, p99_lower=4000.0)] * 13)
    assert (d.action, d.metric, d.rule) == ("rollback", "p99_vs_baseline", "rollback_p99_baseline")
    assert d.value == pytest.approx(5.0) and d.bound == pytest.approx(4.0)
    assert NO_BASELINE not in c.status(400.0)["notes"]


def test_baseline_rule_needs_the_lower_bound_above() -> None:
    c = Controller(resolve_policy(None).with_baseline(1000.0))
    # point p99 1.3x baseline, but its lower bound is only 1.1x: not enough
    assert _run(c, 10.0, [_stats(500.0, p99=1300.0, p99_lower=1100.0)] * 30) == []


def test_dry_run_marks_decisions_and_journal_sees_them() -> None:
    seen = []
    c = Controller(parse_policy({"dry_run": True}), journal=seen.append)
    (d,) = c.evaluate(10.0, _stats(2000.0))
    assert d.dry_run and seen == [d]
    assert "dry run" in " ".join(c.notes())


def test_state_round_trip_keeps_streaks_and_window() -> None:
    p = resolve_policy(None)
    c = Controller(p)
    rng = np.random.default_rng(0)
    ts = np.sort(rng.uniform(0, 60, 600))
    c.observe_many(ts, rng.lognormal(8.0, 0.1, 600))
    _run(c, 10.0, [_stats(2900.0)] * 6)  # trim streak since t=10
    state = json.loads(json.dumps(c.to_state()))
    r = Controller.from_state(p, state)
    assert r.desired_replicas == c.desired_replicas == 2
    assert r.window_stats(60.0) == c.window_stats(60.0)
    trims = [d for d in _run(r, 70.0, [_stats(2900.0)] * 7) if d.action == "trim_logging"]
    assert [d.t_s for d in trims] == [130.0]


def test_from_state_rejects_garbage() -> None:
    with pytest.raises(PolicyError, match="controller state is not valid"):
        Controller.from_state(resolve_policy(None), {"desired_replicas": "many"})


def test_observe_never_raises_and_counts_bad_input() -> None:
    c = Controller(resolve_policy(None))
    assert not c.observe(float("nan"), 10.0)
    assert not c.observe(1.0, "slow")  # type: ignore[arg-type]
    assert c.observe(1.0, -5.0)  # negative durations clamp to 0
    assert c.window.rejected == 2


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_set_baseline_validates(bad: float) -> None:
    with pytest.raises(PolicyError, match="baseline p99 must be a positive number"):
        Controller(resolve_policy(None)).set_baseline(bad)


def test_status_shows_external_stats_when_given() -> None:
    c = Controller(resolve_policy(None))
    c.evaluate(10.0, _stats(1234.0, count=321))
    st = c.status(10.0)
    assert st["stats"]["p95"] == 1234.0 and st["stats"]["count"] == 321
    c.evaluate(20.0)  # back to the own (empty) window: unknown
    st = c.status(20.0)
    assert st["stats"]["count"] == 0 and st["known"] is False
