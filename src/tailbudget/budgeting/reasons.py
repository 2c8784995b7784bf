"""Why a re-budget changes a stage's slices, and which stages' own objectives pass."""

from __future__ import annotations

from collections.abc import Sequence

from tailbudget import _fmt as fmt
from tailbudget.budget import model as m
from tailbudget.budget.plan_llm import TTFT_STAGE
from tailbudget.budgeting.allocate import Allocation
from tailbudget.budgeting.checks import ObjectiveCheck


def passing_stages(budget: m.Budget, checks: Sequence[ObjectiveCheck]) -> dict[str, str]:
    """Stage -> the objective of its own that passes on the log (ttft.p95 for `ttft`)."""
    names = {s.name for _, s in budget.stages()}
    out: dict[str, str] = {}
    for objective, check in zip(budget.objectives, checks, strict=True):
        stage = TTFT_STAGE if objective.metric == "ttft" else objective.metric
        if stage in names and check.verdict == "pass":
            out.setdefault(stage, check.objective)
    return out


def reason(
    stage: str,
    old: dict[str, dict[str, float]],
    measured: dict[str, dict[str, float]],
    allocations: Sequence[Allocation],
    passing: dict[str, str],
) -> str:
    """Why a stage's slices change, per gated percentile, in words."""
    parts: list[str] = []
    kept = [f"{s} ({o} passes)" for s, o in passing.items() if s != stage]
    for a in allocations:
        p, was, now = a.percentile, old[stage][a.percentile], a.slices[stage]
        got = measured.get(stage, {}).get(p)
        if got is None:
            parts.append(f"{p}: not in the log, slice kept")
            continue
        line = f"{p}: measures {fmt.ms(got)} ms against {fmt.ms(was)}"
        if now < was - 0.05 and got <= now + 0.05:
            line += f"; gives {fmt.ms(was - now)} ms it does not use to the stages over budget"
        elif now > was + 0.05:
            line += f"; takes {fmt.ms(now - was)} ms of other stages' unused room"
        elif now < was - 0.05:
            line += (
                "; the SLO with headroom leaves less once the other stages are at what they measure"
            )
            if kept and got > now + 0.05:
                line += f", and {', '.join(kept)} keeps what it measures"
        if stage in passing and got > now + 0.05:
            line += (
                f"; cut below what it measures although {passing[stage]} passes: the other "
                "stages cannot absorb the cut"
            )
        if got > now + 0.05:
            line += f"; still {fmt.ms(got - now)} ms over: needs a speed-up"
        parts.append(line)
    return "; ".join(parts)
