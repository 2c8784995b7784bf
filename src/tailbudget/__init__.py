"""tailbudget: latency budgets for AI/ML inference services.

Plan an SLO into per-stage slices, measure every request, audit what drives
the tail, and act on rolling percentiles.

    import tailbudget as tb
    report = tb.audit(df, slo="p99=500", total="Latency", stages="*Controller*")
    report            # renders itself in Jupyter; report.to_json() is the CLI's JSON
"""

from __future__ import annotations

import sys
import types
from importlib import import_module
from typing import TYPE_CHECKING, Any

from tailbudget import _report_base
from tailbudget._version import __version__
from tailbudget.errors import BudgetError, LogError, PolicyError, TailbudgetError

if TYPE_CHECKING:
    from tailbudget._api.audit import audit
    from tailbudget._api.budgets import MeasuredBudget, export, measure_budget, plan, rebudget
    from tailbudget._api.replay import replay
    from tailbudget._api.request_table import Requests
    from tailbudget._api.requests import read
    from tailbudget._api.sim import capacity, simulate
    from tailbudget.budget import Budget, Plan, load_budget, make_plan, parse_budget
    from tailbudget.budget.objectives import Objective, Objectives
    from tailbudget.measure.recorder import Recorder


_API = {
    "read": "tailbudget._api.requests",
    "Requests": "tailbudget._api.request_table",
    "audit": "tailbudget._api.audit",
    "plan": "tailbudget._api.budgets",
    "measure_budget": "tailbudget._api.budgets",
    "MeasuredBudget": "tailbudget._api.budgets",
    "rebudget": "tailbudget._api.budgets",
    "export": "tailbudget._api.budgets",
    "replay": "tailbudget._api.replay",
    "simulate": "tailbudget._api.sim",
    "capacity": "tailbudget._api.sim",
}
_LAZY = {
    **_API,
    "Budget": "tailbudget.budget",
    "Plan": "tailbudget.budget",
    "load_budget": "tailbudget.budget",
    "make_plan": "tailbudget.budget",
    "parse_budget": "tailbudget.budget",
    "Objective": "tailbudget.budget.objectives",
    "Objectives": "tailbudget.budget.objectives",
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
    """The public names and the module's dunders: not the helpers this file imports
    (`sys`, `Any`, `TYPE_CHECKING`, `import_module`) nor subpackages a caller happened to load."""
    dunders = (name for name in globals() if name.startswith("__") and name.endswith("__"))
    return sorted({*__all__, *dunders})


class _Package(types.ModuleType):
    """`tailbudget.audit` and `tailbudget.export` are both API functions and subpackages:
    importing a subpackage sets it as an attribute of its parent, which would hide the
    function; the function keeps the name (the subpackage stays in sys.modules)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _API and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = [
    "Budget",
    "BudgetError",
    "LogError",
    "MeasuredBudget",
    "Objective",
    "Objectives",
    "Plan",
    "PolicyError",
    "Recorder",
    "Requests",
    "TailbudgetError",
    "__version__",
    "audit",
    "capacity",
    "export",
    "load_budget",
    "make_plan",
    "measure_budget",
    "parse_budget",
    "plan",
    "read",
    "rebudget",
    "replay",
    "simulate",
]


def _render(record: object, fmt: str) -> str:
    # Imported on the first render, not at `import tailbudget` (start-up time); the root
    # wires it because it is the one module that runs before any record's module.
    from tailbudget.report.registry import render

    return render(record, fmt)


_report_base.use_renderer(_render)
