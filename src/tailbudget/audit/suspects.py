"""The culprit step wired to the audit: nesting, growth, then the ranking (audit/culprits.py)."""

from __future__ import annotations

from tailbudget.audit import growth, nesting
from tailbudget.audit.contention import Contention, contention
from tailbudget.audit.context import Ctx
from tailbudget.audit.culprits import WEAK_SLOW, Inputs, build
from tailbudget.audit.report import Culprit, Nesting, Tail

__all__ = ["collect"]


def collect(
    ctx: Ctx, tail: Tail, nested: bool, event_growth: dict[str, growth.Growth]
) -> tuple[list[Culprit], list[Nesting]]:
    """Culprits and nesting pairs; notes what each figure is computed from. Growth is
    against the baseline when one is given, else `event_growth` (after the last event)."""
    names = [d.stage for d in tail.deltas]
    if not names:
        return [], []
    pairs = nesting.find(ctx, names) if nested else []
    grown = event_growth
    held: dict[str, Contention] = {}
    if ctx.config.baseline is not None:
        grown = growth.against_baseline(ctx, ctx.config.baseline, names)
        held = contention(ctx.log.span_profile, ctx.config.baseline.span_profile)
    # Stages that do not nest add up to the total (with `unattributed` when derived).
    inp = Inputs(
        tail=tail,
        slow_total_mean=sum(d.mean_slow for d in tail.deltas),
        growth=grown,
        nesting=pairs,
        nested=nested,
        attribution=ctx.log.attribution,
        contention=held,
    )
    if tail.n_slow < WEAK_SLOW:
        lean = (
            "it leans on the growth against the baseline"
            if grown
            else "give a baseline (a fault-free log of the same service) to lean on"
        )
        ctx.notes.append(
            f"the slow group holds {tail.n_slow} requests (fewer than {WEAK_SLOW}): slow-vs-fast "
            f"attribution is weak; {lean}"
        )
    if ctx.log.attribution == "critical_path":
        ctx.notes.append(
            "stage figures, slow-vs-fast deltas, growth and culprits use critical-path time"
        )
    elif ctx.log.attribution == "self":
        ctx.notes.append("stage figures, deltas, growth and culprits use span self time")
    return build(inp), pairs
