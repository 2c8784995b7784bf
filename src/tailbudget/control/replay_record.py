"""The replay's result as a typed record: what `replay --format json` writes.

`replay()` builds this record; renderers (HTML, text) take it so every figure they
print comes from a named field. `ReplayReport.of` reads a written replay back, and
refuses keys it does not know, so a new figure cannot go unrendered by accident.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from tailbudget._report_base import ReportBase, rendered
from tailbudget.budget.policy_model import Replicas, Rule

__all__ = [
    "ReplayClass",
    "ReplayDecision",
    "ReplayPoint",
    "ReplayPolicy",
    "ReplayReport",
    "ReplayRows",
    "ShedStep",
]

OPEN_LOOP = "open loop"
"""How the note that says what an open-loop replay cannot see begins."""


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ReplayRows(_Record):
    """Rows read from the log, used, and rejected by reason."""

    total: int
    used: int
    rejected: int
    rejected_reasons: dict[str, int] = Field(default_factory=dict)


class ReplayDecision(_Record):
    """One decision the controller took, at its log time."""

    t: str
    t_offset_s: float
    action: str
    metric: str
    value: float | None
    threshold: float | None
    reason: str
    rule: str | None = None
    bound: float | None = None
    bound_kind: str | None = None
    count: int | None = None
    replicas: int | None = None
    dry_run: bool = False
    cold_window: str | None = None
    """A rollback inside a scale-up's cold window: that scale-up's time (a cold start)."""


class ShedStep(_Record):
    """Which class a shed_load sheds (the highest priority number first), or restores."""

    t: str
    t_offset_s: float
    action: Literal["shed_load", "stop_shedding"]
    sheds: str | None
    """The class shed (or restored); None when every class is already shed."""
    trigger: str
    """Whose rule fired: `service` or a class name."""
    rule: str | None = None


class ReplayClass(_Record):
    """One class's own replay: its policy's rules on its own requests."""

    name: str
    priority: int
    requests: int
    summary: dict[str, int]
    decisions: list[ReplayDecision]
    rules: list[str]
    """The class's rules as `name: metric op threshold -> action`."""


class ReplayPoint(_Record):
    """The rolling window at one evaluation (None where too few samples to know).

    An LLM log adds each series' window p95 and p99 (`ttft_p95`, `itl_p99`...): they
    are kept as extra fields, one pair per series the log holds.
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    t: str
    t_offset_s: float
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    error_rate: float | None = None
    error_rate_lower: float | None = None
    count: int = 0
    known: bool = True


class ReplayPolicy(_Record):
    """The policy the replay ran, as resolved (rules with their thresholds in units)."""

    source: str
    window_s: float
    evaluate_every_s: float
    min_samples: int
    confidence: float
    dry_run: bool
    baseline_p99_ms: float | None
    replicas: Replicas
    rules: list[Rule]


class ReplayObjective(_Record):
    """One objective of the budget judged on the whole replayed log, by the one verdict
    rule the audit uses (tailbudget._verdict), with what the verdict rests on."""

    objective: str
    metric: str
    percentile: str
    target_ms: float
    measured_ms: float | None
    verdict: str
    """pass | breach | inconclusive | not_measured."""
    gated: bool
    n: int | None = None
    over: int | None = None
    confidence: float | None = None


class ReplayReport(_Record, ReportBase):
    """Everything `tailbudget replay` finds over one log."""

    source: str
    format: str
    service: str | None = None
    rows: ReplayRows
    start: str
    end: str
    duration_s: float
    window_s: float
    evaluate_every_s: float
    evaluations: int
    baseline_p99_ms: float | None
    baseline_source: str | None
    baselines: dict[str, float] = {}
    """Every baseline a `_vs_baseline` rule compared with, by metric (`p99`, `ttft.p99`)."""
    dry_run: bool
    loop: Literal["open"] = "open"
    final_replicas: int
    active_at_end: list[str]
    summary: dict[str, int]
    """Decisions per action (every one, also past the listed MAX_DECISIONS)."""
    decisions: list[ReplayDecision]
    timeline: list[ReplayPoint]
    policy: ReplayPolicy
    notes: list[str]
    objectives: list[ReplayObjective] = []
    """The budget's objectives on the whole log (the audit's figures and verdicts); empty
    without a budget."""
    class_by: str | None = None
    classes: list[ReplayClass] | None = None
    """Each listed class replayed on its own requests with its own objectives' rules."""
    shedding: list[ShedStep] | None = None
    """Every shed_load and stop_shedding, with the class it sheds or restores."""

    @model_serializer(mode="wrap")
    def _without_classes(self, handler: SerializerFunctionWrapHandler) -> Any:
        # The class keys appear only when classes were asked for: every other document
        # stays as it was.
        data = handler(self)
        if self.classes is None and isinstance(data, dict):
            for key in ("class_by", "classes", "shedding"):
                data.pop(key, None)
        return data

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> ReplayReport:
        """The record of a replay's JSON document (what `replay --format json` wrote)."""
        return cls.model_validate(data)

    def name(self) -> str:
        """What the replay is about: the service, else the log's file name."""
        return self.service or self.source.rstrip("/").rsplit("/", 1)[-1] or "latency log"

    def to_text(self) -> str:
        """The replay for a terminal (`--format text`)."""
        return rendered(self, "text")

    @property
    def open_loop(self) -> list[str]:
        """The notes on what an open-loop replay cannot see (shown before the decisions)."""
        return [n for n in self.notes if n.startswith(OPEN_LOOP)]

    @property
    def other_notes(self) -> list[str]:
        """Every other note."""
        return [n for n in self.notes if not n.startswith(OPEN_LOOP)]

    @property
    def known_windows(self) -> int:
        """Timeline points whose window held enough samples to evaluate."""
        return sum(1 for w in self.timeline if w.known)

    @property
    def peak_p99_ms(self) -> float | None:
        """The highest window p99 over the timeline (None when no window was known)."""
        p99s = [w.p99 for w in self.timeline if w.p99 is not None]
        return max(p99s) if p99s else None
