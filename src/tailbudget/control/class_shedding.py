"""Shedding by class: the one rule replay and `serve` share.

Each class of the budget's `classes:` block runs the Controller with the policy its own
objectives give (`class_policies`: its view of the budget, as plan and rebudget read
it) on its own requests. A `shed_load` from any controller (the service's or a class's)
sheds the class with the highest priority number not yet shed (batch before standard
before premium), a class's own rule only a class shed before it (never itself); that
controller's `stop_shedding` restores the class it shed (`ShedOrder`). A controller holds
one shed toggle whichever of its rules turned it on
(the engine's `active`), so the toggle is keyed by the controller, not by the rule: the
rule that stops shedding need not be the one that started it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tailbudget.budget.plan_classes import class_budget
from tailbudget.budget.policy import Policy, policy_for, resolve_policy
from tailbudget.control.columns import StageColumn
from tailbudget.control.decision import Decision

if TYPE_CHECKING:
    from tailbudget.budget.classes import ClassSet
    from tailbudget.budget.model import Budget
    from tailbudget.budget.objectives import Objectives

__all__ = [
    "ClassDecision",
    "ClassPolicy",
    "ShedOrder",
    "class_policies",
    "class_rows",
    "class_set_policies",
    "shed_order",
    "shed_rules_only",
    "tagged",
]

SERVICE = "service"
"""The trigger of a decision the service-wide rules made."""


@dataclass(frozen=True)
class ClassPolicy:
    """A class as the rules run it: its name, priority and the policy of its objectives."""

    name: str
    priority: int
    policy: Policy


def class_policies(budget: Budget | None, *, dry_run: bool = False) -> list[ClassPolicy]:
    """Each listed class with the policy its objectives give (its view of the budget)."""
    if budget is None or budget.classes is None:
        return []
    out = []
    for name, spec in budget.classes.specs().items():
        policy = resolve_policy(class_budget(budget, name))
        if dry_run:
            policy = policy.model_copy(update={"dry_run": True})
        out.append(ClassPolicy(name, spec.priority, policy))
    return out


def class_set_policies(
    classes: ClassSet, service: Objectives, spec: str | dict[str, Any] | None
) -> list[ClassPolicy]:
    """Each listed class with the policy `spec` (the budget's `policy:`) gives its
    objectives (the service's when it states none): `class_policies`' rules for a class set
    that may carry `--slo CLASS:...` objectives and need not come from a file (simulate)."""
    return [
        ClassPolicy(c.name, c.priority, policy_for(spec, classes.objectives_of(c.name, service)))
        for c in classes.classes
    ]


def shed_order(classes: Sequence[ClassPolicy]) -> tuple[str, ...]:
    """Class names, the first to shed first (highest priority number; ties by name)."""
    return tuple(c.name for c in sorted(classes, key=lambda c: (-c.priority, c.name)))


class ShedOrder:
    """Which class each controller's shed toggle holds, and which class the next takes."""

    def __init__(self, order: Sequence[str]) -> None:
        self.order = tuple(order)
        self.held: dict[str, str | None] = {}
        """Per trigger (`service` or a class name) whose shed_load is on: the class it shed
        (None when every class was shed already)."""

    def step(self, action: str, trigger: str) -> str | None:
        """The class a shed_load of `trigger` sheds, or its stop_shedding restores."""
        if action == "shed_load":
            taken = {v for v in self.held.values() if v is not None}
            target = next((n for n in self._below(trigger) if n not in taken), None)
            self.held[trigger] = target
            return target
        return self.held.pop(trigger, None)

    def _below(self, trigger: str) -> tuple[str, ...]:
        """The classes `trigger`'s shed_load may take: a class's own rule sheds only the
        classes shed before it, never itself or a class it outranks. Shedding itself
        would hide the very requests its rule reads, so the rule could never clear and the
        class stayed shed to the end (simulate, where shed requests are never observed)."""
        if trigger in self.order:
            return self.order[: self.order.index(trigger)]
        return self.order

    @property
    def shed(self) -> list[str]:
        """The classes shed now, in shedding order."""
        taken = set(self.held.values())
        return [n for n in self.order if n in taken]

    def to_state(self) -> dict[str, Any]:
        """JSON-able: the held toggles."""
        return {"held": dict(self.held)}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Resume from `to_state()` (classes no longer listed are dropped)."""
        held = dict(state.get("held", {}))
        self.held = {str(k): v if v in self.order else None for k, v in held.items()}


@dataclass(frozen=True, slots=True)
class ClassDecision(Decision):
    """A decision with whose rules made it and, for shedding, the class it sheds."""

    trigger: str = SERVICE
    """`service` or the class whose own rule fired."""
    sheds: str | None = None
    """For shed_load / stop_shedding: the class shed or restored."""
    shedding: tuple[str, ...] = ()
    """For shed_load / stop_shedding: every class shed after it (in shedding order)."""


def tagged(d: Decision, trigger: str, order: ShedOrder) -> ClassDecision:
    """`d` as a class decision: a class's rule named `class:rule` (one journal key per
    controller), and a shed_load / stop_shedding given the class it sheds or restores."""
    fields = {f: getattr(d, f) for f in Decision.__dataclass_fields__}
    if trigger != SERVICE:
        fields["rule"] = f"{trigger}:{d.rule}"
    if d.action not in ("shed_load", "stop_shedding"):
        return ClassDecision(**fields, trigger=trigger)
    sheds = order.step(d.action, trigger)
    return ClassDecision(**fields, trigger=trigger, sheds=sheds, shedding=tuple(order.shed))


def shed_rules_only(policy: Policy) -> Policy:
    """`policy` with its shed_load rules alone: serve's class controllers shed; scaling,
    logging and rollback stay the service-wide rules' (one replica count, one verdict)."""
    rules = [r for r in policy.rules if r.action == "shed_load"]
    return policy.model_copy(update={"rules": rules})


def class_rows(
    columns: Mapping[str, StageColumn], rows: npt.NDArray[np.int64]
) -> dict[str, StageColumn]:
    """The columns of a batch restricted to `rows` (ascending row numbers of one class),
    renumbered as rows of the class's own batch."""
    out = {}
    for name, col in columns.items():
        if not len(rows):
            break
        pos = np.searchsorted(rows, col.index)
        hit = rows[np.minimum(pos, len(rows) - 1)] == col.index
        if hit.any():
            out[name] = StageColumn(pos[hit].astype(np.int64), col.ms[hit])
    return out
