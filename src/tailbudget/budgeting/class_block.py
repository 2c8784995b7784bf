"""`init --from LOG --class-by COLUMN`: the `classes:` block measured from the log.

Each class (the values of the column, most requests first, at most MAX_CLASSES) gets
its objectives: the ones stated (`--slo premium:p95=800`), else what its own requests
measure end to end at p95 and p99; the stages its requests never spend time in as
`skip:`; and a priority (stated classes first, in the order given). Each stated e2e
objective is judged on the class's requests by the one verdict rule, so `fits` is never
true where the audit would say the class breaches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tailbudget._units import PERCENTILES
from tailbudget._verdict import judge
from tailbudget.budget.classes import CLASS_NAME, OTHER
from tailbudget.budget.compose import additive
from tailbudget.budget.model import Budget
from tailbudget.budget.objectives import Objectives
from tailbudget.budget.plan_classes import without_stages
from tailbudget.errors import TailbudgetError
from tailbudget.logs.engine import arrow_result
from tailbudget.logs.table import LogTable

__all__ = ["MAX_CLASSES", "ClassBlock", "class_block"]

MAX_CLASSES = 12
"""Classes written; further values fall under the service-wide objectives."""


@dataclass(frozen=True)
class ClassBlock:
    """The block's YAML lines, and the class objectives the log proves breached."""

    lines: list[str]
    breaches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _num(ms: float) -> str:
    return f"{math.ceil(ms * 10) / 10:g}"


def class_block(
    log: LogTable, by: str, stated: dict[str, Objectives], budget: Budget
) -> ClassBlock:
    """The `classes:` block for column `by` of `log` (a cohort column of the read log);
    `budget` is the measured file without it (its slices give each class's sum)."""
    t = log.table
    total = t["total_ms"]
    label = t[by].cast("string")
    aggs = {
        "n": t.count(),
        "p50": total.quantile(0.5),
        "p95": total.quantile(0.95),
        "p99": total.quantile(0.99),
        **{f"s{i}": t[log.stage_column(s)].fill_null(0).sum() for i, s in enumerate(log.stages)},
    }
    rows = arrow_result(t.group_by(v=label).aggregate(**aggs), log.backend).to_pylist()
    rows = sorted((r for r in rows if r["v"] is not None), key=lambda r: (-r["n"], r["v"]))
    by_name = {str(r["v"]): r for r in rows}
    names = list(dict.fromkeys([*stated, *by_name]))[:MAX_CLASSES]
    bad = [n for n in names if not CLASS_NAME.match(n) or n == OTHER]
    if bad:
        raise TailbudgetError(
            f"class_by {by}: the value {bad[0]!r} cannot be a class name (1 to 63 letters, "
            "digits, _ . -; 'other' is reserved); map it to a name in the log first",
            param="class_by",
        )
    lines = [
        "classes:   # objectives per class, each judged on its own requests; priority 0 is "
        "shed last",
        f"  by: {by}",
    ]
    breaches: list[str] = []
    for i, name in enumerate(names):
        row = by_name.get(name)
        skip = [s for j, s in enumerate(log.stages) if row is not None and not row[f"s{j}"]]
        slo, said = _slo(name, row, stated.get(name))
        if row is not None and name in stated:
            breaches += _breaches(log, by, name, stated[name])
        extra = f", skip: [{', '.join(skip)}]" if skip else ""
        if row is not None and int(row["n"]) > 0:
            extra += f", measured: {_measured(row, budget, skip)}"
        lines.append(f"  {name}: {{slo: {slo}, priority: {i}{extra}}}   # {said}")
    notes = []
    if len(by_name) > MAX_CLASSES:
        notes.append(
            f"classes: {len(by_name) - MAX_CLASSES} more {by} values fall under the "
            "service-wide objectives (the first {MAX_CLASSES} by requests are written)"
        )
    return ClassBlock(lines, breaches, notes)


def _measured(row: dict[str, Any], budget: Budget, skip: list[str]) -> str:
    """The class's own end-to-end figures beside its slices' sum (plan composes the class
    from them: exactly its measured figures until a slice is edited)."""
    view = budget.model_copy(
        update={
            "pipeline": without_stages(budget.pipeline, set(skip)),
            "composition": budget.composition.model_copy(update={"measured": None}),
        }
    )
    summed = additive(view)
    e2e = {p: float(row[p]) for p in PERCENTILES if row.get(p) and float(row[p]) > 0}
    keys = [p for p in e2e if summed.get(p, 0) > 0]
    fig = ", ".join(f"{p}: {e2e[p]:.4f}" for p in keys)
    sums = ", ".join(f"{p}: {summed[p]:.4f}" for p in keys)
    return f"{{requests: {int(row['n'])}, e2e: {{{fig}}}, slices: {{{sums}}}}}"


def _slo(name: str, row: dict[str, object] | None, stated: Objectives | None) -> tuple[str, str]:
    n = int(row["n"]) if row is not None else 0  # type: ignore[call-overload]
    if stated is not None:
        parts = [f"{o.key.removeprefix('e2e.')}: {o.target_ms:g}" for o in stated]
        return "{" + ", ".join(parts) + "}", f"stated; {n:,} requests in the log"
    assert row is not None
    p95, p99 = float(row["p95"]), float(row["p99"])  # type: ignore[arg-type]
    return (
        f"{{p95: {_num(p95)}, p99: {_num(p99)}}}",
        f"measured on its {n:,} requests: yours go here",
    )


def _breaches(log: LogTable, by: str, name: str, objs: Objectives) -> list[str]:
    """Each stated e2e objective of the class the log proves breached (the audit's rule)."""
    t = log.table.filter(log.table[by].cast("string") == name)
    out = []
    for o in objs.of("e2e"):
        row = arrow_result(
            t.aggregate(
                n=t.count(),
                over=(t["total_ms"] > o.target_ms).cast("int64").sum(),
                q=t["total_ms"].quantile(o.q),
            ),
            log.backend,
        ).to_pylist()[0]
        v = judge(o.percentile, o.target_ms, row["q"], int(row["n"]), int(row["over"] or 0))
        if v.verdict == "breach":
            out.append(
                f"class {name} {o.key}: {row['q']:,.0f} ms over its {o.target_ms:,.0f} ms target"
            )
    return out
