"""Objectives per class: each class measured on its own requests, by the audit's own passes.

A class (a tier, tenant or priority, named by the `classes.by` column) gets the same
distributions pass (exact percentiles, the one verdict rule, goodput) and the same
slow-vs-fast pass as the whole log, run on its rows only: a small class is
`inconclusive`, a proven breach is a breach, and its driver is the stage that slows *its*
slow requests, even where another stage drives the service's tail. Classes the budget does
not list are shown against the service-wide objectives, ungated (their requests are judged
with the whole service).
"""

from __future__ import annotations

from dataclasses import replace

from tailbudget.audit import e2e_drivers, objectives, passes, weak
from tailbudget.audit.config import AuditConfig
from tailbudget.audit.context import Ctx
from tailbudget.audit.report import ClassGoodput, ClassRow, Recommendation
from tailbudget.budget.classes import ClassSet
from tailbudget.budget.objectives import Objectives
from tailbudget.errors import LogError
from tailbudget.logs.table import RowCounts

__all__ = ["MAX_UNLISTED", "measure", "naming_breached_class"]

MAX_UNLISTED = 12
"""Unlisted class values shown on their own (most requests first); the rest are counted."""


def measure(ctx: Ctx) -> tuple[list[ClassRow], list[str]]:
    """Every listed class, then the unlisted values the log holds; notes for the report."""
    cs = ctx.config.classes
    if cs is None:
        return [], []
    label = ctx.cohort(cs.by)
    counts = ctx.run_frame("classes", ctx.t.group_by(v=label).aggregate(n=ctx.t.count()))
    seen = {str(r["v"]): int(r["n"]) for r in counts}
    total = sum(seen.values())
    service = objectives.objectives_of(ctx)
    rows = [
        _row(ctx, cs, c.name, c.objectives or service, (seen.get(c.name, 0), total), listed=True)
        for c in cs.classes
    ]
    unlisted = sorted((v for v in seen if cs.get(v) is None), key=lambda v: (-seen[v], v))
    ungated = _ungated(service)
    rows += [
        _row(ctx, cs, v, ungated, (seen[v], total), listed=False) for v in unlisted[:MAX_UNLISTED]
    ]
    notes = []
    rest = unlisted[MAX_UNLISTED:]
    if rest:
        n = sum(seen[v] for v in rest)
        notes.append(
            f"classes: {len(rest):,} more {cs.by} values outside the class list ({n:,} "
            "requests) are judged with the whole service only"
        )
    return rows, notes


def _ungated(service: Objectives) -> Objectives:
    return replace(service, items=tuple(replace(o, gated=False) for o in service.items))


def _row(
    ctx: Ctx,
    cs: ClassSet,
    name: str,
    objs: Objectives,
    counts: tuple[int, int],
    *,
    listed: bool,
) -> ClassRow:
    c = cs.get(name)
    n, total = counts
    sub = _class_ctx(ctx, cs.by, name, objs, n)
    head = {"name": name, "listed": listed, "priority": None if c is None else c.priority}
    try:
        dist = passes.distributions(sub)
    except LogError:
        return ClassRow(
            **head,
            requests=0,
            objectives=[objectives.without_figure(o, 0, "no_data") for o in objs],
            driver=None,
            goodput=ClassGoodput(share=0.0, min=_minimum(objs)),
            note=f"no request of class {name} in the log",
        )
    split = passes.slow_vs_fast(sub, dist)
    rows = e2e_drivers.with_drivers(sub, dist.objectives)
    top = split.tail.top_delta
    g = dist.goodput
    snap = dist.snapshot
    return ClassRow(
        **head,
        requests=snap.count,
        share=snap.count / total if total else 0.0,
        objectives=rows,
        driver=split.tail.driver if top is not None else None,
        driver_delta_ms=top.delta if top is not None else None,
        weak=weak.too_few(split.tail.n_slow),
        goodput=ClassGoodput(
            share=g.share,
            min=g.min,
            verdict=g.verdict,
            good=int(g.good or 0),
            requests=int(g.requests or snap.count),
        ),
        p50=snap.p50,
        p95=snap.p95,
        p99=snap.p99,
        cdf=dist.cdf,
    )


def _class_ctx(ctx: Ctx, by: str, name: str, objs: Objectives, n: int) -> Ctx:
    """A context over the class's rows only, judged by its objectives (no baseline, no
    events: those compare the whole service)."""
    table = ctx.t.filter(ctx.cohort(by) == name)
    config: AuditConfig = replace(
        ctx.config, objectives=objs, baseline=None, events=(), classes=None
    )
    log = replace(ctx.log, table=table, rows=RowCounts(n, n, 0))
    return Ctx(log, config, parent=ctx, labelled=ctx.labelled)


def _minimum(objs: Objectives) -> float | None:
    return objs.goodput.min if objs.goodput is not None else None


_LLM = ("ttft", "tpot", "itl")


def _said(c: ClassRow) -> tuple[str, str | None] | None:
    """'class premium (1,573 requests) breaches e2e.p95 ...' and the stage to act on."""
    over = [o for o in c.objectives if c.listed and o.gated and o.verdict == "breach"]
    if not over:
        return None
    figures = ", ".join(
        f"{o.metric}.{o.percentile} {o.measured_ms or 0:,.0f} ms against its {o.target_ms:,.0f} ms"
        for o in over
    )
    text = f"class {c.name} ({c.requests:,} requests) breaches {figures}"
    # The slow-vs-fast driver reads end-to-end time: it explains e2e and stage
    # objectives, not a TTFT or TPOT miss.
    if c.driver is None or all(o.metric in _LLM for o in over):
        return text, None
    lead = " (a weak lead: few slow requests)" if c.weak else ""
    return f"{text}, driven by {c.driver}{lead}", c.driver


def naming_breached_class(rec: Recommendation, rows: list[ClassRow]) -> Recommendation:
    """The recommendation leads with every breached class (its objective, figure and
    driver), and is never "none" while a gated class objective breaches."""
    said = [(c, got) for c in rows if (got := _said(c)) is not None]
    if not said:
        return rec
    lead = "; ".join(text for _, (text, _) in said)
    lead = lead[0].upper() + lead[1:] + "."
    if rec.choice != "none":
        return rec.model_copy(update={"text": f"{lead} {rec.text}"})
    # The service-wide text ("nothing to fix") would contradict the class's breach.
    act = next(
        (f" Speed up {d} on class {c.name}'s requests first." for c, (_, d) in said if d), ""
    )
    text = (
        f"{lead} No service-wide objective is breached: only the class's own objectives "
        f"show the miss.{act}"
    )
    return rec.model_copy(update={"choice": "fix_tail", "text": text})
