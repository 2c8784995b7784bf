"""Pin the public surface: adding or removing a name is a deliberate change."""

from __future__ import annotations

import tailbudget


def test_exported_members():
    public = {name for name in dir(tailbudget) if not name.startswith("_")}
    exported = set(tailbudget.__all__) - {"__version__"}
    assert exported <= public
    assert exported == {
        "Budget",
        "BudgetError",
        "LogError",
        "Plan",
        "PolicyError",
        "Recorder",
        "TailbudgetError",
        "load_budget",
        "make_plan",
        "parse_budget",
    }


def test_one_exception_root():
    for name in ("BudgetError", "LogError", "PolicyError"):
        assert issubclass(getattr(tailbudget, name), tailbudget.TailbudgetError)
