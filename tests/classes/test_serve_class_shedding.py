"""serve sheds by class as replay does: each listed class's own shed_load rule runs on its
own observations (the Controller replay runs), and every shed_load sheds the class with
the highest priority number not yet shed; the toggles and the class rules survive a
crash (kill -9: no final snapshot), and the class's stop_shedding restores its class."""

from __future__ import annotations

from tailbudget.budget import parse_budget
from tailbudget.budget.policy import resolve_policy
from tailbudget.control.class_shedding import ShedOrder, class_policies
from tailbudget.serve.actions import ActionsConfig
from tailbudget.serve.ingest import parse_observations
from tailbudget.serve.runner import _classes
from tailbudget.serve.runtime import Runtime, RuntimeConfig
from tests.control.runtimes import crash

BUDGET = """\
service: shed-svc
slo: {p99: 5000}
pipeline:
  - stage: model
    budget: {p99: 4000}
classes:
  by: tier
  premium: {slo: {p99: 800}, priority: 0}
  standard: {slo: {p99: 3000}, priority: 1}
  batch: {slo: {p99: 5000}, priority: 2}
policy:
  window: 3s
  evaluate_every: 1s
  min_samples: 5
  rules:
    - {name: shed_p99, metric: p99, threshold: 100% of p99, for: 2s, action: shed_load,
       clear: {for: 2s}}
"""
T0 = 1_800_000_000.0


def runtime(tmp_path) -> Runtime:
    budget = parse_budget(BUDGET)
    config = RuntimeConfig(
        state_dir=tmp_path / "state",
        actions=ActionsConfig(log=False),
        classes=_classes(budget),
        class_policies=tuple(class_policies(budget)),
    )
    return Runtime(resolve_policy(budget), config)


def second(rt: Runtime, t: float, premium_ms: float) -> list:
    """One second of traffic (10 requests a class; premium at `premium_ms`), evaluated."""
    items = [f'{{"ts": {t}, "total_ms": {premium_ms}, "class": "premium"}}'] * 10
    items += [f'{{"ts": {t}, "total_ms": 200, "class": "{c}"}}' for c in ("standard", "batch")] * 10
    rt.ingest(parse_observations("\n".join(items).encode(), now_s=t))
    return rt.evaluate(t + 0.5)


def sheds(decisions: list) -> list[tuple[str, str, str | None]]:
    return [(d.action, d.trigger, d.sheds) for d in decisions if "shed" in d.action]


def test_premium_breach_sheds_batch_first_and_survives_kill_9(tmp_path) -> None:
    rt = runtime(tmp_path)
    made = []
    for k in range(6):  # premium at 1,000 ms against its 800 ms p99; the service passes
        made += second(rt, T0 + k, 1000.0)
    assert sheds(made) == [("shed_load", "premium", "batch")]
    (fired,) = [d for d in made if d.action == "shed_load"]
    assert fired.rule == "premium:shed_p99" and fired.shedding == ("batch",)
    status = rt.status(T0 + 6)
    assert status["classes"]["batch"]["shed"] is True
    assert status["classes"]["premium"]["shed"] is False
    assert status["classes"]["premium"]["rules"]["shed_p99"]["engaged"] is True
    record = status["last_decisions"][-1]
    assert record["sheds"] == "batch" and record["trigger"] == "premium"
    crash(rt)  # kill -9 after the decision's snapshot: the toggle and the rule come back
    again = runtime(tmp_path)
    status = again.status(T0 + 6)
    assert status["classes"]["batch"]["shed"] is True
    assert status["classes"]["premium"]["rules"]["shed_p99"]["engaged"] is True
    made = []
    for k in range(6, 16):  # premium recovers: its stop_shedding restores batch
        made += second(again, T0 + k, 100.0)
    assert sheds(made) == [("stop_shedding", "premium", "batch")]
    assert again.status(T0 + 16)["classes"]["batch"]["shed"] is False
    again.close()


def test_without_classes_decisions_stay_plain(tmp_path) -> None:
    from tests.control.runtimes import runtime as plain

    rt = plain(tmp_path)
    assert rt.class_controllers == {} and rt.shed_order.shed == []
    rt.close()


def test_the_shed_order_is_replays() -> None:
    order = ShedOrder(("batch", "standard", "premium"))
    assert order.step("shed_load", "premium") == "batch"
    assert order.step("shed_load", "service") == "standard"
    assert order.shed == ["batch", "standard"]
    assert order.step("stop_shedding", "premium") == "batch"  # whichever rule stops it
    assert order.shed == ["standard"]
    again = ShedOrder(order.order)
    again.load_state(order.to_state())
    assert again.shed == ["standard"]


def test_status_judges_a_class_ttft_and_stage_objective_on_its_own_windows(tmp_path) -> None:
    from tailbudget.serve.runner import _class_series_objectives

    text = BUDGET.replace(
        "premium: {slo: {p99: 800}, priority: 0}",
        "premium: {slo: {p99: 800, stages: {model: {p95: 100}}}, ttft: {p95: 300}, priority: 0}",
    )
    budget = parse_budget(text)
    config = RuntimeConfig(
        state_dir=tmp_path / "state",
        actions=ActionsConfig(log=False),
        classes=_classes(budget),
        class_policies=tuple(class_policies(budget)),
        class_series_objectives=_class_series_objectives(budget),
    )
    rt = Runtime(resolve_policy(budget), config)
    items = [
        f'{{"ts": {T0}, "total_ms": 500, "ttft_ms": 450, "stages": {{"model": 50}}, '
        f'"class": "premium"}}'
    ] * 10
    items += [f'{{"ts": {T0}, "total_ms": 500, "ttft_ms": 50, "class": "batch"}}'] * 10
    rt.ingest(parse_observations("\n".join(items).encode(), now_s=T0))
    judged = {
        (o["metric"], o["percentile"]): o
        for o in rt.status(T0 + 1)["classes"]["premium"]["objectives"]
    }
    assert judged[("e2e", "p99")]["verdict"] == "pass"
    assert judged[("ttft", "p95")]["verdict"] == "breach"  # batch's fast TTFT never mixes in
    assert judged[("ttft", "p95")]["value_ms"] == 450.0
    assert judged[("model", "p95")]["verdict"] == "pass"
    rt.close()
