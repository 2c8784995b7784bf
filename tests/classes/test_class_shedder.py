"""The in-process `PriorityShedder` by class: it follows the decisions serve emits (the
controller's `ClassDecision`, or the JSON body its webhook posts), refuses the classes
they shed and admits the others; the hot path never raises, the constructor refuses a bad
class list in one line, and without classes it sheds by fraction as before."""

from __future__ import annotations

import json
import logging

import pytest

from tailbudget.budget import parse_budget
from tailbudget.budget.policy import resolve_policy
from tailbudget.control.backpressure import PriorityShedder
from tailbudget.control.class_shedding import class_policies
from tailbudget.errors import PolicyError
from tailbudget.serve.actions import ActionsConfig
from tailbudget.serve.actions.local import ShedAction
from tailbudget.serve.journal import decision_record
from tailbudget.serve.runner import _classes
from tailbudget.serve.runtime import Runtime, RuntimeConfig
from tests.classes.test_serve_class_shedding import BUDGET, T0, runtime, second
from tests.control.runtimes import crash


def _allowed(s: PriorityShedder) -> dict[str, bool]:
    return {c: s.admit(c).allowed for c in ("premium", "standard", "batch", "x")}


def test_serve_decisions_shed_batch_and_stop_shedding_restores(tmp_path) -> None:
    rt = runtime(tmp_path)
    direct = PriorityShedder(classes=parse_budget(BUDGET))
    hooked = PriorityShedder(classes=parse_budget(BUDGET).classes)
    made = []
    for k in range(16):  # premium breaches its 800 ms p99 for 6 s, then recovers
        for d in second(rt, T0 + k, 1000.0 if k < 6 else 100.0):
            made.append(d.action)
            direct.follow(d)
            hooked.follow(json.loads(json.dumps(decision_record(d))))  # the webhook body
            if d.action == "shed_load":
                assert d.sheds == "batch"
                for s in (direct, hooked):
                    assert s.shedding == ("batch",)
                    assert _allowed(s) == {
                        "premium": True,
                        "standard": True,
                        "batch": False,
                        "x": True,
                    }
                refused = direct.admit("batch")
                assert (refused.status, refused.reason) == (503, "load shed (class batch)")
    rt.close()
    assert made.count("shed_load") == made.count("stop_shedding") == 1
    for s in (direct, hooked):
        assert s.shedding == ()
        assert all(_allowed(s).values())
        assert s.other_total == s.class_seen["other"] == 2  # `x` is outside the list
    assert direct.class_shed == {"batch": 2} and hooked.class_shed == {"batch": 1}


def test_plain_decisions_step_the_shed_order_lowest_priority_first() -> None:
    s = PriorityShedder(classes={"premium": 0, "standard": 1, "batch": 2})
    s.follow({"action": "shed_load", "trigger": "premium"})
    s.follow({"action": "shed_load"})  # a plain controller's: the service's toggle
    assert s.shedding == ("batch", "standard")
    assert s.admit("premium").allowed and not s.admit("standard").allowed
    s.follow({"action": "stop_shedding", "trigger": "premium"})
    assert s.shedding == ("standard",)
    s.follow({"action": "stop_shedding", "shedding": []})  # serve's body is authoritative
    assert s.shedding == ()


def test_misuse_on_the_hot_path_logs_and_admits(caplog) -> None:
    s = PriorityShedder(classes={"premium": 0, "batch": 2})
    s.follow({"action": "shed_load", "shedding": ["batch"]})
    with caplog.at_level(logging.WARNING, logger="tailbudget.control.backpressure"):
        assert s.admit(7).allowed  # type: ignore[arg-type]
        assert s.admit(None).allowed
        s.follow({"action": "stop_shedding", "shedding": "batch"})  # not a list
        s.follow(None)
        s.follow({"action": "stop_shedding", "shedding": [], "dry_run": True})
        s.follow({"action": "shed_load", "shedding": ["batch", "nope"]})
    assert s.shedding == ("batch",)  # none of the above changed it
    assert not s.admit("batch").allowed
    assert "not a string" in caplog.text and "nope" in caplog.text
    assert "not followed" in caplog.text


@pytest.mark.parametrize(
    ("classes", "says"),
    [
        ({"other": 1}, "'other' is reserved"),
        ({"bad name": 1}, "class name 'bad name'"),
        ({"batch": -1}, "priority must be a whole number 0 to 1000, got -1"),
        ({"batch": True}, "got True"),
        (42, "got int"),
    ],
)
def test_a_bad_class_list_is_one_line(classes: object, says: str) -> None:
    with pytest.raises(PolicyError) as exc:
        PriorityShedder(classes=classes)
    assert says in str(exc.value) and "\n" not in str(exc.value)
    assert exc.value.param == "classes"


def test_without_classes_the_fraction_decides(caplog) -> None:
    budget = parse_budget(BUDGET.split("classes:")[0])
    s = PriorityShedder(1.0, classes=budget)
    assert s.classes == {}
    assert not s.admit("batch").allowed  # fraction 1.0 sheds everything, as try_acquire
    with caplog.at_level(logging.WARNING, logger="tailbudget.control.backpressure"):
        s.follow({"action": "stop_shedding", "shedding": []})
    assert "lists no classes" in caplog.text and s.fraction == 1.0


def test_the_shed_action_drives_a_class_shedder_not_its_fraction(tmp_path) -> None:
    rt = runtime(tmp_path)
    shedder = PriorityShedder(classes=parse_budget(BUDGET))
    action = ShedAction(shedder=shedder)
    for k in range(6):
        for d in second(rt, T0 + k, 1000.0):
            if action.handles(d.action):
                action.execute(d, "key")
    rt.close()
    assert shedder.shedding == ("batch",) and shedder.fraction == 0.0
    assert shedder.try_acquire(0).allowed  # the fraction path stays off
    fresh = PriorityShedder(classes=parse_budget(BUDGET))
    ShedAction(shedder=fresh).restore(0.5, None, ("batch",))  # from a snapshot
    assert fresh.shedding == ("batch",) and fresh.fraction == 0.0


def test_the_embedded_runtime_drives_its_class_shedder_and_restores_it_after_kill_9(
    tmp_path,
) -> None:
    budget = parse_budget(BUDGET)

    def embedded(shedder: PriorityShedder) -> Runtime:
        config = RuntimeConfig(
            state_dir=tmp_path / "state",
            actions=ActionsConfig(log=False),
            classes=_classes(budget),
            class_policies=tuple(class_policies(budget)),
        )
        return Runtime(resolve_policy(budget), config, shedder=shedder)

    shedder = PriorityShedder(classes=budget)
    rt = embedded(shedder)
    for k in range(6):
        second(rt, T0 + k, 1000.0)
    assert shedder.shedding == ("batch",) and shedder.fraction == 0.0
    crash(rt)  # no final snapshot: the decision's snapshot holds the shed
    fresh = PriorityShedder(classes=budget)
    again = embedded(fresh)
    assert fresh.shedding == ("batch",) and not fresh.admit("batch").allowed
    for k in range(6, 16):
        second(again, T0 + k, 100.0)
    assert fresh.shedding == () and fresh.admit("batch").allowed
    again.close()
