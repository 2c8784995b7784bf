"""`rebudget --format json` as typed records, field for key.

`Rebudget` (proposal.py) holds what the proposal computed, with its allocations and
options as the budgeting modules shape them; `Rebudget.record()` states the document
from it, rounded as the contract states. A record refuses keys it does not know.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from tailbudget.audit.report import RankedFix

if TYPE_CHECKING:
    from tailbudget.budgeting.proposal import PricedOption, Rebudget

__all__ = [
    "AllocationRecord",
    "ChangeRecord",
    "CompositionRecord",
    "GapRecord",
    "GoodputRecord",
    "MeasuredRecord",
    "ObjectiveRecord",
    "OptionRecord",
    "RebudgetDocument",
    "document_of",
]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class MeasuredRecord(_Record):
    """What the log measures: each stage's percentiles, and end to end."""

    stages: dict[str, dict[str, float]]
    e2e: dict[str, float]


class AllocationRecord(_Record):
    """One gated percentile: what the stages may use, the budget, the log, the new slices."""

    percentile: str
    target_ms: float
    budget_ms: float
    measured_ms: float
    slices: dict[str, float]


class ChangeRecord(_Record):
    """One stage's slices, before and after, and why (`from` is a Python keyword)."""

    stage: str
    from_: dict[str, float] = Field(alias="from")
    to: dict[str, float]
    reason: str


class OptionRecord(_Record):
    """A priced option: what it changes, what it saves, and whether it was chosen."""

    fix: str
    stages: list[str]
    kind: str
    saved_ms: dict[str, float]
    composed_saved_ms: dict[str, float]
    hours: float
    risk: str
    reversible: bool
    score: float
    counterfactual: str
    chosen: bool


class ObjectiveRecord(_Record):
    """An objective measured on the log."""

    objective: str
    target_ms: float
    measured_ms: float | None
    verdict: str
    n: int | None = None
    over: int | None = None
    confidence: float | None = None


class GoodputRecord(_Record):
    """Goodput measured on the log as the audit counts it."""

    share: float
    good: int
    requests: int
    min: float | None
    thresholds: dict[str, float]
    verdict: str


class CompositionRecord(_Record):
    """End-to-end percentiles before and after, and how they were composed."""

    method: str
    before: dict[str, float]
    after: dict[str, float]


class GapRecord(_Record):
    """Where a breached e2e percentile's gap lies, read on the requests above it."""

    objective: str
    over_ms: float
    requests: int
    stage: str | None
    share: float | None
    says: str


class ClassRebudgetRecord(_Record):
    """One class re-budgeted on its own requests and the stages it goes through."""

    name: str
    requests: int
    fits_now: bool
    speedup_needed_ms: dict[str, float]
    changes: list[ChangeRecord]
    objectives: list[ObjectiveRecord]


class RebudgetDocument(_Record):
    """The contract: fits_now, speedup_needed_ms, changes, options, budget, and context."""

    service: str
    source: str
    how: str
    fits_now: bool | None
    """None: nothing gated fails, but a gated objective is inconclusive."""
    slo: dict[str, float]
    gated: list[str]
    headroom: float
    speedup_needed_ms: dict[str, float]
    measured: MeasuredRecord
    allocations: list[AllocationRecord]
    changes: list[ChangeRecord]
    options: list[OptionRecord]
    closes_gap: bool
    gaps: list[GapRecord]
    objective_options: list[RankedFix]
    """The audit's own ranking entries for breached TTFT/TPOT/ITL objectives."""
    objectives: list[ObjectiveRecord]
    goodput: GoodputRecord | None
    composed: list[CompositionRecord]
    notes: list[str]
    budget: str
    diff: str
    classes: list[ClassRebudgetRecord] | None = None
    """Per class of the budget (with a class column in the log): its own proposal."""

    @model_serializer(mode="wrap")
    def _without_classes(self, handler: SerializerFunctionWrapHandler) -> Any:
        # `classes` appears only for a budget with classes: other documents stay as they were.
        data = handler(self)
        if self.classes is None and isinstance(data, dict):
            data.pop("classes", None)
        return data


def _class_record(name: str, requests: int, r: Rebudget) -> ClassRebudgetRecord:
    return ClassRebudgetRecord(
        name=name,
        requests=requests,
        fits_now=r.fits_now,
        speedup_needed_ms=r.speedup_needed_ms,
        changes=[
            ChangeRecord(stage=c.stage, from_=c.from_, to=c.to, reason=c.reason) for c in r.changes
        ],
        objectives=[ObjectiveRecord(**vars(o)) for o in r.objectives],
    )


def document_of(r: Rebudget) -> RebudgetDocument:
    """The document of a proposal, rounded as the contract states."""
    return RebudgetDocument(
        service=r.service,
        source=r.source,
        how=r.how,
        fits_now=r.fits_now,
        slo=r.slo,
        gated=list(r.gated),
        headroom=r.headroom,
        speedup_needed_ms=r.speedup_needed_ms,
        measured=MeasuredRecord(stages=r.measured, e2e=r.measured_e2e),
        allocations=[
            AllocationRecord(
                percentile=a.percentile,
                target_ms=round(a.target_ms, 3),
                budget_ms=round(a.old_ms, 3),
                measured_ms=round(a.measured_ms, 3),
                slices={s: round(v, 3) for s, v in a.slices.items()},
            )
            for a in r.allocations
        ],
        changes=[
            ChangeRecord(stage=c.stage, from_=c.from_, to=c.to, reason=c.reason) for c in r.changes
        ],
        options=[_option(o) for o in r.options],
        closes_gap=r.closes_gap,
        # The records hold the same fields as what rebudget computed (the contract rounds
        # over_ms), so each is built from the computed value's fields.
        gaps=[GapRecord(**(vars(g) | {"over_ms": round(g.over_ms, 3)})) for g in r.gaps],
        objective_options=list(r.objective_options),
        objectives=[ObjectiveRecord(**vars(o)) for o in r.objectives],
        goodput=None if r.goodput is None else GoodputRecord(**vars(r.goodput)),
        composed=[CompositionRecord(**vars(c)) for c in r.compositions],
        notes=list(r.notes),
        budget=r.budget_text,
        diff=r.diff,
        classes=[_class_record(n, k, c) for n, k, c in r.class_proposals]
        if r.class_proposals
        else None,
    )


def _option(o: PricedOption) -> OptionRecord:
    return OptionRecord(
        fix=o.fix,
        stages=list(o.stages),
        kind=o.kind,
        saved_ms=o.saved_ms,
        composed_saved_ms=o.composed_saved_ms,
        hours=o.hours,
        risk=o.risk,
        reversible=o.reversible,
        score=o.score,
        counterfactual=o.counterfactual,
        chosen=o.chosen,
    )
