"""The budget policy's class rules in a simulation: replay's and serve's, in the loop.

Each listed class runs the Controller with its objectives' shed_load rules (as serve
runs them: scaling, logging and rollback stay the service-wide rules', one replica
count) on its own finished requests, which the engines' view marks by class
(`TickView.done_class`). Every shed_load, the service's or a class's, sheds the class
with the highest priority number not yet shed and its stop_shedding restores it: the
one `ShedOrder` of control/class_shedding.py, the engines then shedding the arrivals of
every class it holds (`Knobs.shed_codes`). Decisions of one evaluation go through the
order by trigger name, as replay's `shed_steps` orders decisions at the same time, so
replay and simulate name the same class first and next.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tailbudget.control.class_shedding import (
    SERVICE,
    ClassPolicy,
    ShedOrder,
    shed_order,
    shed_rules_only,
    tagged,
)
from tailbudget.control.decision import Decision
from tailbudget.control.engine import Controller
from tailbudget.sim.fleet import Knobs

__all__ = ["ClassRules"]


class ClassRules:
    """Each class's Controller and the shedding order every controller's shed_load shares."""

    def __init__(self, classes: Sequence[ClassPolicy]) -> None:
        order = shed_order(classes)
        self.order = ShedOrder(order)
        self.code = {name: k for k, name in enumerate(order, start=1)}
        """Each class's code in the engines' arrivals (`Arrivals.class_code`)."""
        self.controllers = {c.name: Controller(shed_rules_only(c.policy)) for c in classes}

    def rows(self, name: str, done_class: npt.NDArray[np.int64] | None) -> npt.NDArray[np.bool_]:
        """Which finished requests of a view are class `name`'s (none without codes)."""
        if done_class is None:
            return np.zeros(0, dtype=bool)
        return np.asarray(done_class == self.code[name], dtype=bool)

    def decide(self, now_s: float, service: Sequence[Decision]) -> list[Decision]:
        """Every class's evaluation beside the service's decisions, each shed_load and
        stop_shedding given the class it sheds or restores (replay's order at one time)."""
        made = [(SERVICE, d) for d in service]
        for name, c in self.controllers.items():
            made += [(name, d) for d in c.evaluate(now_s)]
        made.sort(key=lambda e: e[0])  # stable: a controller's own decisions keep their order
        return [tagged(d, trigger, self.order) for trigger, d in made]

    def apply(self, knobs: Knobs) -> None:
        """Shed the arrivals of every class the order holds."""
        shed = self.order.shed
        knobs.shed = bool(shed)
        knobs.shed_codes = frozenset(self.code[n] for n in shed)
