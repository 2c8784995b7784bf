"""Plan per class: each class's objectives against the composed figures of the stages
that class goes through (a class may skip stages: batch skips rerank).

A class's plan is the budget's own plan on the class's view of the budget: the pipeline
without its skipped stages, its objectives (the service's where it states none), the
same slices, headroom and composition. The service's measured end-to-end figures
(`composition.measured`) describe every request, not the class's: a class composes from
its own `measured:` figures when it has them, else from its stages' distributions.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from tailbudget.budget import model as m
from tailbudget.budget.plan_objectives import ObjectiveCheck
from tailbudget.errors import TailbudgetError

__all__ = ["ClassPlan", "class_budget", "without_stages"]


class ClassPlan(BaseModel):
    """One class in `plan --format json`'s `classes[]`."""

    model_config = ConfigDict(frozen=True)

    name: str
    priority: int
    skip: list[str]
    stages: list[str]
    """The stages the class's requests go through, in pipeline order."""
    fits: bool
    objectives: list[ObjectiveCheck]
    composed: dict[str, float]
    """The class's composed end-to-end percentiles (ms)."""
    problems: list[str]


def without_stages(items: list[Any], skip: set[str]) -> list[Any]:
    """A pipeline's items with the `skip` stages taken out (emptied groups dropped)."""
    out: list[Any] = []
    for item in items:
        if isinstance(item, m.Stage):
            if item.name not in skip:
                out.append(item)
        elif isinstance(item, m.Parallel):
            kept = without_stages(item.parallel, skip)
            if kept:
                out.append(item.model_copy(update={"parallel": kept}))
        else:
            kept = without_stages(item.sequence, skip)
            if kept:
                out.append(item.model_copy(update={"sequence": kept}))
    return out


def class_budget(budget: m.Budget, name: str) -> m.Budget:
    """The budget as one class sees it: its stages, its objectives, no classes."""
    assert budget.classes is not None
    spec = budget.classes.specs()[name]
    pipeline = without_stages(budget.pipeline, set(spec.skip))
    if not pipeline:
        raise TailbudgetError(f"classes.{name}.skip: the class skips every stage")
    composition = budget.composition.model_copy(update={"measured": spec.measured})
    # A copy, not a new validation: the parts are valid already, and a class need not
    # state an objective at its environment's gate (under prd its p95 is shown, not gated).
    return budget.model_copy(
        update={
            "slo": spec.slo or budget.slo,
            "pipeline": pipeline,
            "composition": composition,
            "classes": None,
        }
    )
