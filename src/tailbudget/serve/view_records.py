"""`GET /v1/verdict` and `GET /v1/status` as typed records, field for key.

A block another part of the service builds and owns the shape of (the controller's
picture, a stage window, the model policy's state, the last decisions as journalled)
is carried as JSON values (`JsonValue`); the keys a rollout tool or a dashboard reads
are fields here. The HTTP answer is `json_data()` through the strict writer.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, JsonValue

from tailbudget._report_base import ReportBase
from tailbudget.budget.policy_model import Rule

__all__ = [
    "EvaluationView",
    "PolicyView",
    "RuleState",
    "ShedView",
    "SloObjective",
    "SnapshotView",
    "StageView",
    "StatusView",
    "VerdictBy",
    "VerdictView",
    "WalView",
    "WindowView",
]

Json = dict[str, JsonValue]
"""A block whose keys another module states (its own docstring lists them)."""


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WindowView(_Record):
    """The window the verdict rests on; its figures (count, p50, p99, error_rate...) are
    the window's own keys, kept as extra fields."""

    model_config = ConfigDict(frozen=True, extra="allow")

    known: bool
    source: str
    count: int = 0


class VerdictBy(_Record):
    """A rule (and its metric) behind the verdict; rule None for the window or evaluation."""

    rule: str | None
    metric: str


class RuleState(_Record):
    """A rollback rule's last state: the objectives the verdict is made of."""

    rule: str
    metric: str
    status: str
    value: float | None
    bound: float | None
    engaged: bool


class VerdictView(_Record, ReportBase):
    """healthy | rollback | unknown, for Argo Rollouts (jsonPath `{$.verdict}`) or Flagger."""

    verdict: Literal["healthy", "rollback", "unknown"]
    reason: str | None
    healthy: bool
    rollback: bool
    by: list[VerdictBy]
    window: WindowView
    active: list[str]
    objectives: list[RuleState]


class StageView(_Record):
    """A stage's window (no error figures: errors belong to requests), with its budget
    slices and their burn when the budget gives them."""

    count: int
    p50: float | None
    p95: float | None
    p99: float | None
    known: bool
    window_s: float | None
    budget: dict[str, float] | None = None
    """The stage's slice per percentile (ms)."""
    burn: dict[str, float] | None = None
    """The window's percentile over its slice (1 = the whole slice), as /metrics'
    tailbudget_stage_budget_burn."""


class SloObjective(_Record):
    """A gated objective judged on the window by the one verdict rule."""

    objective: str
    target_ms: float
    measured_ms: float | None
    verdict: Literal["pass", "breach", "inconclusive", "no_data"]
    n: int
    over: int | None
    """Requests in the window over the target (None: Prometheus' figures, not counted)."""
    confidence: float | None
    reason: str


class ShedView(_Record):
    """What shed_load is doing now."""

    fraction: float
    rate_per_s: float | None


class PolicyView(_Record):
    """The policy serve runs: reactive rules, or the model policy with the rules as guard."""

    mode: Literal["model", "reactive"]
    source: str
    window_s: float
    evaluate_every_s: float
    min_samples: int
    rules: list[Rule]


class EvaluationView(_Record):
    """The evaluation loop's heartbeat: when it last succeeded, and its errors by kind."""

    period_s: float
    last_good_s: float | None
    age_s: float
    stale_after_s: float
    last_error: str | None
    last_error_kind: str | None
    errors: dict[str, int]


class SnapshotView(_Record):
    """When the state was last snapshotted, and why it could not be."""

    written_s: float | None
    error: str | None


class WalView(_Record):
    """The write-ahead log: its size, the batches in it, the fsyncs they took."""

    bytes: int
    batches: int
    fsyncs: int


class StatusView(_Record, ReportBase):
    """Everything `GET /v1/status` shows."""

    service: str | None
    verdict: Literal["breach", "healthy", "unknown"]
    """What the SLO says: breach when a gated objective's window proves it, healthy when
    every one passes, else unknown (without a budget: the rollback rules' verdict)."""
    slo: list[SloObjective]
    """Each gated objective on the window, with what its verdict rests on."""
    rollout_verdict: Literal["healthy", "rollback", "unknown"]
    """The rules' verdict (as GET /v1/verdict), beside the actions in `active`."""
    observations_total: int
    errors_total: int
    stage_observations: dict[str, int]
    window: WindowView
    stages: dict[str, StageView]
    series: dict[str, Json]
    objectives: list[Json]
    classes: dict[str, Json] | None = None
    """Per class of the budget (and `other`): window figures, e2e objectives, count."""
    verdict_by: list[VerdictBy]
    prometheus: Json | None
    active: list[str]
    desired_replicas: int
    desired_replicas_reason: str
    model: Json | None
    shed: ShedView | None
    baseline_p99_ms: float | None
    baselines: dict[str, float]
    dry_run: bool
    policy: PolicyView
    decisions_total: int
    last_decisions: list[Json]
    last_evaluated_s: float | None
    evaluation: EvaluationView
    last_error: str | None
    notes: list[str]
    controller: Json
    state_dir: str
    snapshot: SnapshotView
    wal: WalView
