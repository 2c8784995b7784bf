"""`tailbudget.replay`: the live policy run over a recorded log, every decision listed."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from tailbudget._api.inputs import BudgetLike, Data, budget_of, source_of
from tailbudget.errors import PolicyError

if TYPE_CHECKING:
    from tailbudget.budget.model import Budget
    from tailbudget.budget.policy import Policy
    from tailbudget.control.class_shedding import ClassPolicy
    from tailbudget.control.logsource import ReplayLog
    from tailbudget.control.replay import Baseline
    from tailbudget.control.replay_record import ReplayObjective, ReplayReport

__all__ = ["replay"]


def replay(
    data: Data,
    budget: BudgetLike = None,
    *,
    baseline_window: str | None = None,
    baseline_p99: float | None = None,
    baseline: Data | None = None,
    total: str | None = None,
    timestamp: str | None = None,
    error: str | None = None,
    unit: str | None = None,
    dry_run: bool = False,
    events: str | Path | None = None,
    cold_window_min: float = 5.0,
    class_by: str | None = None,
) -> ReplayReport:
    """Replay the budget's policy (the default policy without one) over the log in time
    order (`tailbudget replay`). Give at most one baseline: a window of the log's start
    (`baseline_window="10m"`), a p99 in ms, or a baseline log. A budget with `classes:`
    also replays each class's own rules on its requests (column `class_by`, else the
    budget's `classes.by`) and says which class each shed_load sheds."""
    # Deferred (start-up): `import tailbudget` and a first `tb.<name>` load only what
    # that name needs (bench/startup.py); every import inside a function in this
    # module is deferred for the same reason.
    from tailbudget.budget.policy import resolve_policy
    from tailbudget.control.logsource import load_replay_log
    from tailbudget.control.replay import replay as run

    given = [
        n
        for n, v in (
            ("baseline_window", baseline_window),
            ("baseline_p99", baseline_p99),
            ("baseline", baseline),
        )
        if v is not None
    ]
    if len(given) > 1:
        raise PolicyError(f"give one baseline, not {' and '.join(given)}", param=given[-1])
    b = budget_of(budget)
    policy = resolve_policy(b)
    if dry_run:
        policy = policy.model_copy(update={"dry_run": True})
    if b is not None:
        total = total or b.log.total
        timestamp = timestamp or b.log.timestamp
        error = error or b.log.error
    classes = _class_policies(b, dry_run)
    by = class_by or (b.classes.by if b is not None and b.classes is not None else None)
    if classes and by is None:
        raise PolicyError("classes need a column: give class_by", param="class_by")
    if class_by is not None and not classes:
        raise PolicyError(
            "class_by: replay runs each class's own rules, so it needs a budget with a "
            "classes: block (objectives per class)",
            param="class_by",
        )
    log = load_replay_log(
        source_of(data), timestamp=timestamp, total=total, error=error, unit=unit,
        class_by=by if classes else None,
    )  # fmt: skip
    base = _baseline(log, policy, baseline_window, baseline_p99, baseline, total, timestamp, unit)
    from tailbudget.audit.events import read_events

    report = run(
        log,
        policy,
        baseline=base,
        service=b.service if b else None,
        events=read_events(Path(events)) if events is not None else (),
        cold_window_s=cold_window_min * 60.0,
        classes=classes,
        class_by=by if classes else None,
    )
    if b is None:
        return report
    judged = _objectives(b, data, total=total, unit=unit)
    return report.model_copy(update={"objectives": judged})


def _objectives(
    b: Budget, data: Data, *, total: str | None, unit: str | None
) -> list[ReplayObjective]:
    """The budget's objectives on the whole log, as rebudget and the audit judge them
    (one reading of the log, one verdict rule): what the policy's windows add up to."""
    from tailbudget.audit.profile import profile_of
    from tailbudget.budgeting.checks import objective_checks
    from tailbudget.control.replay_record import ReplayObjective
    from tailbudget.logs import ReadOptions, read_log

    read = ReadOptions.from_budget(b, unit=unit, total=total)
    profile = profile_of(read_log(source_of(data), read))
    if profile.used == 0:
        return []
    gated = {o.key for o in b.objectives.gated()}
    out = []
    for c in objective_checks(b, profile):
        metric, _, percentile = c.objective.rpartition(".")
        out.append(
            ReplayObjective(
                **vars(c) | {"metric": metric, "percentile": percentile},
                gated=c.objective in gated,
            )
        )
    return out


def _class_policies(budget: Budget | None, dry_run: bool) -> list[ClassPolicy]:
    """Each listed class with the policy its objectives give (its view of the budget)."""
    from tailbudget.control.class_shedding import class_policies

    return class_policies(budget, dry_run=dry_run)


def _baseline(
    log: ReplayLog,
    policy: Policy,
    window: str | None,
    p99: float | None,
    other: Data,
    total: str | None,
    timestamp: str | None,
    unit: str | None,
) -> Baseline | None:
    from tailbudget._units import parse_duration_s
    from tailbudget.control.logsource import load_replay_log
    from tailbudget.control.replay import Baseline, log_baseline, window_baseline

    if p99 is not None:
        if not (math.isfinite(p99) and 0 < p99 < 1e9):
            raise PolicyError(
                f"baseline_p99 must be a positive, finite number of ms (below 1e9), got {p99:g}",
                param="baseline_p99",
            )
        return Baseline(float(p99), "stated")
    if window is not None:
        return window_baseline(
            log, parse_duration_s(window, field="baseline_window", param="baseline_window")
        )
    if other is not None:
        base = load_replay_log(source_of(other), timestamp=timestamp, total=total, unit=unit)
        return log_baseline(base, policy, base.source)
    return None
