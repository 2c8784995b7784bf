"""Pin the public surface: adding or removing a name is a deliberate change
(`tailbudget.__all__` itself is pinned in tests/api/test_public_names.py)."""

from __future__ import annotations

import tailbudget


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
