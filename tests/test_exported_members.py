"""Pin the public surface: adding or removing a name is a deliberate change."""

from __future__ import annotations

import tailbudget


def test_exported_members():
    public = {name for name in dir(tailbudget) if not name.startswith("_")}
    exported = set(tailbudget.__all__) - {"__version__"}
    assert exported <= public
    # The Python API (issue 25): one function per CLI command, and the types they take.
    assert exported == {
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
    }


def test_one_exception_root():
    for name in ("BudgetError", "LogError", "PolicyError"):
        assert issubclass(getattr(tailbudget, name), tailbudget.TailbudgetError)


def test_sim_exported_members():
    import tailbudget.sim as sim

    assert set(sim.__all__) == {
        "ArrivalSpec",
        "CapacityReport",
        "Fitted",
        "LLMParams",
        "ModelOptions",
        "Param",
        "PolicySpec",
        "ServiceModel",
        "SimReport",
        "capacity_curve",
        "fit_logs",
        "parse_arrivals",
        "parse_policy_spec",
        "simulate",
    }
    assert all(hasattr(sim, n) for n in sim.__all__)
