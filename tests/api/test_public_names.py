"""The public surface is deliberate: `tailbudget.__all__` is pinned, and a new public
(non-underscore) module at the package's top level fails here until it is added on purpose."""

from __future__ import annotations

from pathlib import Path

import tailbudget

PACKAGE = Path(tailbudget.__file__).resolve().parent

PUBLIC_MODULES = {
    "audit",
    "budget",
    "budgeting",
    "cli",
    "control",
    "demo",
    "errors",
    "export",
    "logs",
    "measure",
    "otel",
    "report",
    "serve",
    "sim",
    "sketch",
}
"""The layers, `errors` and `otel` (the OpenTelemetry span processor); the rest is private."""

API = {
    "read",
    "audit",
    "plan",
    "measure_budget",
    "rebudget",
    "replay",
    "simulate",
    "capacity",
    "export",
}


def _top_level_modules() -> set[str]:
    names = set()
    for path in PACKAGE.iterdir():
        if path.is_dir() and (path / "__init__.py").exists():
            names.add(path.name)
        elif path.suffix == ".py" and path.name != "__init__.py":
            names.add(path.stem)
        elif path.suffix in (".so", ".pyd"):
            names.add(path.name.split(".", 1)[0])
    return {n for n in names if not n.startswith("_")}


def test_no_new_public_module():
    assert _top_level_modules() == PUBLIC_MODULES


def test_every_command_is_a_function():
    assert set(tailbudget.__all__) >= API
    for name in API:
        fn = getattr(tailbudget, name)
        assert callable(fn) and fn.__module__.startswith("tailbudget._api."), name


def test_all_is_pinned():
    # The Python API (issue 25): one function per CLI command, and the types they take.
    assert sorted(tailbudget.__all__) == sorted(
        {
            *API,
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
            "load_budget",
            "make_plan",
            "parse_budget",
        }
    )
    assert all(hasattr(tailbudget, name) for name in tailbudget.__all__)
    public = {name for name in dir(tailbudget) if not name.startswith("_")}
    assert set(tailbudget.__all__) - {"__version__"} <= public


def test_reports_share_one_base():
    from tailbudget._report_base import ReportBase
    from tailbudget.audit.report import AuditReport
    from tailbudget.budget.plan import Plan
    from tailbudget.budgeting.proposal import Rebudget
    from tailbudget.control.replay_record import ReplayReport
    from tailbudget.sim.capacity import CapacityReport
    from tailbudget.sim.run import SimReport

    for cls in (AuditReport, Plan, Rebudget, ReplayReport, SimReport, CapacityReport):
        assert issubclass(cls, ReportBase), cls
        for method in ("to_json", "to_markdown", "to_html", "_repr_html_", "_repr_markdown_"):
            assert callable(getattr(cls, method)), (cls, method)


def test_dir_lists_only_the_public_names():
    # Issue 36: dir(tailbudget) listed Any, TYPE_CHECKING and sys, the helpers __init__ imports.
    import tailbudget.budget  # a loaded subpackage stays out of dir too

    public = {name for name in dir(tailbudget) if not name.startswith("_")}
    assert public == set(tailbudget.__all__) - {"__version__"}
    assert "__version__" in dir(tailbudget)
