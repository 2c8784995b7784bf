"""simulate's budget policy runs each class's own rules as replay and serve do: a class's
rule fires on the class's own simulated requests, and every shed_load sheds the next
class of the shedding order (control/class_shedding.py's ShedOrder, one rule for all)."""

from __future__ import annotations

import json

import numpy as np

import tailbudget as tb
from tailbudget.budget.load import parse_budget
from tailbudget.control.class_shedding import ClassDecision, class_policies, class_set_policies
from tailbudget.demo.tiers import BUDGET, tiered


def _sheds(decisions) -> list[tuple[str, str, str | None]]:
    return [
        (d.action, d.trigger, d.sheds)
        for d in decisions
        if isinstance(d, ClassDecision) and d.action in ("shed_load", "stop_shedding")
    ]


def _incident(tmp_path) -> str:
    """The tiers with standard's LLM 1.5 s slower from minute 20 to 40 (a planted
    incident): the service's p99 and standard's own both breach."""
    df = tiered(n=6000, seed=5)
    minute = (df.ts - df.ts.min()).dt.total_seconds() / 60
    slow = (df.tier == "standard") & (minute > 20) & (minute < 40)
    df.loc[slow, "llm_ms"] += 1500.0
    df.loc[slow, "total_ms"] += 1500.0
    path = tmp_path / "incident.parquet"
    df.to_parquet(path, index=False)
    return str(path)


def test_replay_and_simulate_shed_the_same_class_first_and_next(tmp_path) -> None:
    path = _incident(tmp_path)
    replayed = [(s.action, s.trigger, s.sheds) for s in tb.replay(path, BUDGET).shedding or []]
    # Ample replicas: the simulated requests take their logged times, so the same rules
    # see the same tails (the closed loop then differs: a shed class is not served).
    sim = tb.simulate(path, budget=BUDGET, policy=["budget"], replicas=40)
    simulated = _sheds(sim.runs[0].decisions)
    assert replayed[:2] == [
        ("shed_load", "service", "batch"),  # the service's p99 sheds the first class
        # standard's own rule: only a class shed before it, and batch is taken. Shedding
        # standard itself would hide the requests its rule reads: it could never clear.
        ("shed_load", "standard", None),
    ]
    assert all(s != "standard" for _, _, s in simulated)
    assert simulated[:2] == replayed[:2]
    rules = [d.rule for d in sim.runs[0].decisions if d.action == "shed_load"]
    assert rules == ["shed_load_p99", "standard:shed_load_p99"]
    # The JSON lists the shedding steps as replay's does.
    doc = json.loads(sim.to_json())
    steps = [(s["action"], s["trigger"], s["sheds"], s["rule"]) for s in doc["runs"][0]["shedding"]]
    want = [(s.action, s.trigger, s.sheds, s.rule) for s in tb.replay(path, BUDGET).shedding or []]
    assert steps[:2] == want[:2]
    assert doc["runs"][0]["requests"]["shed"] > 0
    # Markdown and HTML list the same steps (they were in the JSON only).
    md, html = sim.to_markdown(), sim.to_html()
    assert "Shedding by budget, the highest priority number first:" in md
    assert "Shedding by budget, the highest priority number first</h3>" in html
    for s in doc["runs"][0]["shedding"]:
        rule = s["rule"] or "-"
        row = f"| {s['t_offset_s']:,.0f} | {s['action']} | {s['sheds'] or 'nothing left to shed'}"
        assert f"{row} | {s['trigger']} | {rule} |" in md, s


def test_a_class_rule_fires_on_its_own_requests(tmp_path) -> None:
    # The tiers log: premium misses its p95 of 800 ms while the service passes its p99.
    df = tiered()
    path = tmp_path / "tiers.parquet"
    df.to_parquet(path, index=False)
    replayed = tb.replay(path, BUDGET).shedding or []
    sim = tb.simulate(path, budget=BUDGET, policy=["budget"], replicas=40, duration="10m")
    decisions = sim.runs[0].decisions
    (fired,) = [d for d in decisions if d.action == "shed_load"]
    assert isinstance(fired, ClassDecision)
    assert (fired.trigger, fired.rule, fired.sheds) == ("premium", "premium:shed_load_p95", "batch")
    assert (replayed[0].trigger, replayed[0].sheds) == ("premium", "batch")
    # Its value is premium's own p95 (982 ms), over the whole service's (855 ms), and the
    # service-wide rules never shed; from then on batch's arrivals are shed.
    service_p95 = float(np.percentile(df.total_ms, 95))
    assert fired.value is not None and fired.value > 900 > service_p95
    assert fired.count == 29  # premium's requests in its window, not the service's
    assert sim.runs[0].shed > 0
    # The decisions table says whose p95 fired: premium's own, not the service's.
    assert "| shed_load | premium p95 | 983 ms | 857 ms |" in sim.to_markdown()


def test_without_classes_the_budget_policy_is_unchanged(tmp_path) -> None:
    df = tiered(n=3000, seed=5).drop(columns=["tier"])
    path = tmp_path / "plain.parquet"
    df.to_parquet(path, index=False)
    sim = tb.simulate(path, budget=BUDGET, policy=["budget"], replicas=40)
    assert not any(isinstance(d, ClassDecision) for d in sim.runs[0].decisions)
    assert "shedding" not in json.loads(sim.to_json())["runs"][0]


def test_class_rules_are_replays() -> None:
    # simulate resolves each class's rules from the class set as replay does from the file.
    b = parse_budget(BUDGET)
    assert b.class_set is not None
    assert class_set_policies(b.class_set, b.objectives, b.policy) == class_policies(b)
