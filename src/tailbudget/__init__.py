"""tailbudget: latency budgets for AI/ML inference services.

Plan an SLO into per-stage slices, measure every request, audit what drives
the tail, and act on rolling percentiles.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from tailbudget.errors import BudgetError, LogError, PolicyError, TailbudgetError

if TYPE_CHECKING:
    from tailbudget.budget import Budget, Plan, load_budget, make_plan, parse_budget
    from tailbudget.measure.recorder import Recorder

__version__ = "0.1.0"

_LAZY = {
    "Budget": "tailbudget.budget",
    "Plan": "tailbudget.budget",
    "load_budget": "tailbudget.budget",
    "make_plan": "tailbudget.budget",
    "parse_budget": "tailbudget.budget",
    "Recorder": "tailbudget.measure.recorder",
}
"""Imported on first use: `import tailbudget` (and so `tailbudget --help`) stays free of
NumPy, pydantic and the rest until a name that needs them is touched."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tailbudget' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "Budget",
    "BudgetError",
    "LogError",
    "Plan",
    "PolicyError",
    "Recorder",
    "TailbudgetError",
    "__version__",
    "load_budget",
    "make_plan",
    "parse_budget",
]
