"""The engine on LLM, stage and goodput metrics: the same semantics as on end-to-end p95."""

from __future__ import annotations

import numpy as np
import pytest

from tailbudget.budget.policy import parse_policy
from tailbudget.control.engine import Controller
from tailbudget.control.stats import wilson, z_of
from tailbudget.errors import PolicyError
from tailbudget.serve.wal import StageColumn

T0 = 1_800_000_000.0


def _policy(rules, **kw):
    return parse_policy(
        {"window": "10s", "evaluate_every": "1s", "min_samples": 20, "rules": rules, **kw}
    )


def _feed(c: Controller, t: float, n: int, *, ttft=None, stage=None, total=100.0, errors=0):
    ts = np.full(n, t)
    err = np.zeros(n, dtype=bool)
    err[:errors] = True
    series = {}
    if ttft is not None:
        series["ttft"] = StageColumn(np.arange(n), np.asarray(ttft, dtype=float))
    stages = {} if stage is None else {"retrieval": StageColumn(np.arange(n), np.full(n, stage))}
    c.observe_columns(ts, np.full(n, total), err, series, stages)


def test_a_stage_rule_reads_its_stage_and_honours_for_and_hysteresis() -> None:
    rule = {
        "name": "r",
        "metric": "retrieval.p99",
        "threshold": 800,
        "for": "3s",
        "action": "shed_load",
        "clear": {"threshold": 500, "for": "2s"},
    }
    c = Controller(_policy([rule]))
    fired = []
    for k in range(6):
        _feed(c, T0 + k, 30, stage=900.0)
        fired += [(k, d.action) for d in c.evaluate(T0 + k + 1)]
    assert fired == [(3, "shed_load")]  # held at evaluations 0..3: 3 s
    out = []
    for k in range(6, 30):
        _feed(c, T0 + k, 30, stage=600.0)  # under 800, over the clear 500: stays on
        out += c.evaluate(T0 + k + 1)
    assert out == []
    for k in range(30, 45):
        _feed(c, T0 + k, 30, stage=100.0)
        out += c.evaluate(T0 + k + 1)
    assert [d.action for d in out] == ["stop_shedding"]


def test_unknown_series_never_acts_and_too_few_samples_is_unknown() -> None:
    c = Controller(
        _policy([{"name": "s", "metric": "ttft.p95", "threshold": 100, "action": "scale_up"}])
    )
    _feed(c, T0, 100)  # end-to-end only: no ttft at all
    assert c.evaluate(T0 + 1) == []
    assert c.rule_states()["s"]["status"] == "unknown"
    _feed(c, T0 + 1, 10, ttft=np.full(10, 5000.0))  # 10 < min_samples 20
    assert c.evaluate(T0 + 2) == []
    _feed(c, T0 + 2, 20, ttft=np.full(20, 5000.0))
    assert [d.metric for d in c.evaluate(T0 + 3)] == ["ttft.p95"]


def test_e2e_p99_9_reads_its_own_quantile() -> None:
    c = Controller(
        _policy([{"name": "t", "metric": "e2e.p99.9", "threshold": 1000, "action": "scale_up"}])
    )
    ts = np.full(2000, T0)
    ms = np.full(2000, 100.0)
    ms[-4:] = 5000.0  # 0.2% slow: p99 is 100 ms, p99.9 is 5 s
    c.observe_columns(ts, ms, np.zeros(2000, dtype=bool))
    stats = c.window_stats(T0 + 1)
    assert stats.p99 == pytest.approx(100, rel=0.02)
    assert stats.q(0.999) == pytest.approx(5000, rel=0.02)
    assert [d.action for d in c.evaluate(T0 + 1)] == ["scale_up"]


def test_goodput_acts_on_its_wilson_upper_bound_not_on_noise() -> None:
    policy = parse_policy(
        {
            "window": "10s",
            "evaluate_every": "1s",
            "min_samples": 20,
            "rules": [
                {
                    "name": "g",
                    "metric": "goodput",
                    "op": "<",
                    "threshold": 0.95,
                    "action": "rollback",
                    "for": "2m",
                }
            ],
        },
        goodput={"ttft": 500.0},
    )
    z = z_of(policy.confidence)
    # 40 requests, 3 slow: goodput 92.5% < 95%, but its upper bound is not
    c = Controller(
        policy.model_copy(update={"rules": [policy.rules[0].model_copy(update={"for_s": 0.0})]})
    )
    _feed(c, T0, 40, ttft=[900.0] * 3 + [100.0] * 37)
    assert c.evaluate(T0 + 1) == []
    state = c.rule_states()["g"]
    assert state["value"] == pytest.approx(37 / 40)
    assert state["bound"] == pytest.approx(1 - wilson(3, 40, z)[0])
    assert state["bound"] > 0.95
    # 400 requests at the same share: now significant
    _feed(c, T0 + 1, 400, ttft=[900.0] * 30 + [100.0] * 370)
    assert [d.action for d in c.evaluate(T0 + 2)] == ["rollback"]


def test_a_ttft_baseline_rule_is_inactive_without_a_baseline_and_uses_the_lower_bound() -> None:
    rule = {"name": "b", "metric": "ttft.p99_vs_baseline", "threshold": 1.2, "action": "rollback"}
    c = Controller(_policy([rule], rollback_for="2m"))
    _feed(c, T0, 500, ttft=np.linspace(100, 400, 500))
    c.evaluate(T0 + 1)
    assert c.rule_states()["b"]["status"] == "inactive"
    assert any("no ttft.p99 baseline" in n for n in c.notes())
    c.set_baseline(300.0, "ttft.p99")
    c.evaluate(T0 + 2)
    state = c.rule_states()["b"]
    assert state["bound"] is not None and state["bound"] < state["value"]


def test_goodput_rules_need_a_falling_op_and_clear_at_or_above() -> None:
    with pytest.raises(PolicyError, match="takes '<' or '<='"):
        parse_policy(
            {"rules": [{"metric": "goodput", "op": ">", "threshold": 0.9, "action": "rollback"}]}
        )
    with pytest.raises(PolicyError, match="below the trigger threshold"):
        parse_policy(
            {
                "rules": [
                    {
                        "metric": "goodput",
                        "threshold": 0.9,
                        "action": "rollback",
                        "clear": {"threshold": 0.8},
                    }
                ]
            }
        )
    p = parse_policy({"rules": [{"metric": "goodput", "threshold": "95%", "action": "rollback"}]})
    assert p.rules[0].op == "<" and p.rules[0].clear_threshold == pytest.approx(0.975)


def test_thresholds_may_be_shares_of_llm_objectives() -> None:
    p = parse_policy(
        {"rules": [{"metric": "ttft.p95", "threshold": "90% of ttft.p95", "action": "scale_up"}]},
        targets={"ttft.p95": 1200.0},
    )
    assert p.rules[0].threshold == pytest.approx(1080.0)
    with pytest.raises(PolicyError, match=r"slo\.ttft\.p99, which the budget does not set"):
        parse_policy(
            {
                "rules": [
                    {"metric": "ttft.p99", "threshold": "90% of ttft.p99", "action": "scale_up"}
                ]
            },
            targets={"ttft.p95": 1200.0},
        )


def test_series_windows_survive_to_state_and_back() -> None:
    rules = [{"name": "s", "metric": "ttft.p95", "threshold": 100, "action": "scale_up"}]
    c = Controller(_policy(rules))
    _feed(c, T0, 50, ttft=np.linspace(10, 90, 50))
    again = Controller.from_state(c.policy, c.to_state())
    a, b = c.series_stats(T0 + 1)["ttft"], again.series_stats(T0 + 1)["ttft"]
    assert (a.count, a.p95) == (b.count, b.p95)
    old = c.to_state()
    del old["series"], old["baselines"]  # state written before LLM series
    assert Controller.from_state(c.policy, old).series_stats(T0 + 1) == {}
