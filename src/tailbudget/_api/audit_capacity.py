"""The audit's `add_capacity` fix, priced in replicas by the capacity model (`capacity`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tailbudget.errors import TailbudgetError

if TYPE_CHECKING:
    from tailbudget._api.inputs import Source
    from tailbudget.audit import AuditReport
    from tailbudget.budget.model import Budget
    from tailbudget.budget.objectives import Objectives

__all__ = ["with_capacity"]


def with_capacity(
    report: AuditReport, source: Source, budget: Budget | None, objectives: Objectives | None
) -> AuditReport:
    """add_capacity carries the replica count `tailbudget capacity` finds at the log's load;
    the audit stands without it when the model cannot be fitted (`capacity` says why)."""
    # Deferred (start-up): `import tailbudget` and a first `tb.<name>` load only what
    # that name needs (bench/startup.py); every import inside a function in this
    # module is deferred for the same reason.
    from tailbudget.audit.fixes import with_replicas
    from tailbudget.logs import ReadOptions
    from tailbudget.sim.arrivals import ArrivalSpec
    from tailbudget.sim.capacity import capacity_curve, knee_replicas
    from tailbudget.sim.fit import ModelOptions
    from tailbudget.sim.fitting import fit_logs
    from tailbudget.sim.objectives import objectives_for

    try:
        fitted = fit_logs([source], ReadOptions.from_budget(budget), ModelOptions())
        objs = objectives_for(budget, objectives)
        spec = ArrivalSpec("log")
        rep = capacity_curve(
            fitted.model, objs, arrivals=spec, loads=[1.0],
            log_times=fitted.log_times, scale_before=False,
        )  # fmt: skip
        point = rep.curve[0]
        knee = None
        if point.replicas is None:
            knee = knee_replicas(fitted.model, objs, arrivals=spec, log_times=fitted.log_times)
    except TailbudgetError:
        return report
    conc = fitted.model.concurrency
    if fitted.model.load_slope is not None and conc.source == "measured":
        basis = "one replica = the fleet that served the log, its work growing with its load"
    else:
        basis = (
            f"{conc.value:g} request{'' if conc.value == 1 else 's'} at once per replica, "
            f"{conc.source}"
        )
    if point.replicas is not None:
        return with_replicas(report, point.replicas, basis)
    if knee is None:
        return report
    n, _ = knee
    rest = ", ".join(
        f"{r.objective.key} {r.measured_ms:,.0f} ms vs {r.objective.target_ms:,.0f}"
        for r in point.objectives  # unlimited replicas' figures are what remains
        if r.verdict == "breach" and r.measured_ms is not None
    )
    return with_replicas(report, n, basis, meets=False, rest=rest)
