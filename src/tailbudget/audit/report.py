"""The audit report: the `audit --format json` contract and its extension keys."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from tailbudget._report_base import ReportBase
from tailbudget.budget.blocks import PercentileBlock
from tailbudget.logs.table import RowCounts

HypothesisKind = Literal[
    "input_shape",
    "cold_start",
    "contention",
    "external_dependency",
    "cache_miss",
    "fanout",
    "missing_slice",
    "llm_prefill",
    "llm_decode",
    "llm_queueing",
    "llm_decode_contention",
]
Choice = Literal["fix_tail", "add_capacity", "renegotiate_slo", "none"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Provenance(_Model):
    """Where the figures come from."""

    source: str
    format: str
    engine: str
    generated_at: str
    version: str
    notes: list[str] = Field(default_factory=list)


class Percentiles(PercentileBlock):
    """SLO targets in ms (null when not given), read by `given()` as every percentile
    block is; checked where the SLO was read, so none may be given here."""

    CHECKED = False

    p50: float | None = None
    p95: float | None = None
    p99: float | None = None


class Snapshot(_Model):
    """End-to-end percentiles and pass/breach against the SLO."""

    p50: float
    p95: float
    p99: float
    max: float
    mean: float
    """Not an SLO figure: the mean hides the tail."""
    verdict: dict[str, Literal["pass", "breach", "inconclusive"]]
    """Per SLO percentile; `inconclusive` when the log holds too few requests for it."""
    breach_rate_per_min: float | None
    """Requests per minute slower than the highest SLO target, at the log's own traffic."""
    count: int
    errors: int
    duration_min: float | None


class CdfPoint(_Model):
    """One point of the end-to-end quantile function."""

    q: float
    ms: float


class StageRow(_Model):
    """Per-stage percentiles and share of the end-to-end p99."""

    name: str
    p50: float
    p95: float
    p99: float
    mean: float
    share_of_p99: float
    budget: dict[str, float] | None = None


class Overlap(_Model):
    """Requests whose stages add up to more than their total (nested or parallel calls)."""

    share: float
    nested: bool


class Delta(_Model):
    """Mean of one stage in the slow group minus the fast group."""

    stage: str
    mean_slow: float
    mean_fast: float
    delta: float


class Tail(_Model):
    """Slow-vs-fast comparison; the driver is the stage with the largest delta."""

    driver: str | None
    deltas: list[Delta]
    slow_range_ms: list[float]
    fast_range_ms: list[float]
    n_slow: int
    n_fast: int
    weak: bool = False
    """Fewer than MIN_SLOW_REQUESTS requests in the slow group: the driver is a weak finding."""

    @property
    def gap_ms(self) -> float:
        """The slow-vs-fast gap: the sum of the stages' positive deltas."""
        return sum(max(0.0, d.delta) for d in self.deltas)

    @property
    def top_delta(self) -> Delta | None:
        """The stage with the largest delta, None when no stage is slower in slow requests."""
        return max(self.deltas, key=lambda d: d.delta) if self.gap_ms > 0 else None

    def share_of_gap(self, d: Delta) -> float | None:
        """`d`'s share of the slow-vs-fast gap (None for a stage faster in slow requests)."""
        return d.delta / self.gap_ms if self.gap_ms > 0 and d.delta > 0 else None


class ProfilePoint(_Model):
    """One bin of a covariate: its mean x and the stage's latency there."""

    x: float
    n: int
    mean_ms: float
    p50_ms: float
    p95_ms: float


class ShapeRow(_Model):
    """Linear fit of a stage's latency on a covariate."""

    stage: str
    covariate: str
    r2: float
    slope: float
    intercept: float
    flag: bool
    profile: list[ProfilePoint] = Field(default_factory=list)


class CohortRow(_Model):
    """One value of a cohort dimension."""

    dim: str
    value: str
    n: int
    share: float
    p99: float
    delta_vs_global: float
    share_of_slow: float
    flag: bool
    weak: bool = False
    """Fewer than MIN_SLOW_REQUESTS of this cohort's requests are in the slow group."""


class TimelinePoint(_Model):
    """One minute of traffic."""

    t: str
    p99: float
    n: int


class EventPoint(_Model):
    """A scale-up or deploy."""

    t: str
    event: str


class ColdStart(_Model):
    """p99 with and without the requests just after each event."""

    window_min: float
    unfiltered_p99: float
    filtered_p99: float | None
    verdict: Literal["cold_start", "not_cold_start", "no_events"]
    n_cold: int = 0
    timeline: list[TimelinePoint] = Field(default_factory=list)
    events: list[EventPoint] = Field(default_factory=list)

    @property
    def change_ms(self) -> float | None:
        """p99 without the cold windows minus p99 of every request (None when not tested)."""
        if self.filtered_p99 is None:
            return None
        return self.filtered_p99 - self.unfiltered_p99

    @property
    def change_share(self) -> float | None:
        """`change_ms` as a share of the p99 of every request."""
        change = self.change_ms
        return None if change is None or not self.unfiltered_p99 else change / self.unfiltered_p99


class Hypothesis(_Model):
    """A suspected cause with its evidence in words and numbers."""

    kind: HypothesisKind
    stage: str | None
    evidence: str
    covariate: str | None = None
    figures: dict[str, float] = Field(default_factory=dict)
    weak: bool = False
    """Drawn from fewer than MIN_SLOW_REQUESTS requests (slow group, or cold windows)."""
    objective: str | None = None
    """The breached objective this cause drives ('ttft.p95'); None for the e2e tail."""
    undetermined: bool = False
    """The log's figures cannot tell this cause from the others (TTFT without start times,
    prompt lengths or a baseline): a candidate to check, not a finding."""


class RankedFix(_Model):
    """A candidate fix with its counterfactual p99 saving and cost."""

    fix: str
    stage: str | None
    p99_saved_ms: float
    hours: float
    risk: Literal["low", "medium", "high"]
    reversible: bool
    score: float
    """p99 ms saved per engineering hour."""
    kind: HypothesisKind
    counterfactual: str
    p99_after_ms: float
    objective: str | None = None
    """For a fix of a breached objective ('ttft.p95'): the score is that objective's ms
    saved per engineering hour, and the figures below say what it becomes."""
    objective_before_ms: float | None = None
    objective_after_ms: float | None = None
    goodput_before: float | None = None
    goodput_after: float | None = None
    replicas: int | None = None
    """add_capacity: the fewest replicas meeting every gated objective at the log's load,
    from a simulation fitted on the log (`tailbudget capacity`); None when not simulated."""

    def goodput_words(self) -> str:
        """`goodput 93.0% -> 96.0%`, or that it stays (another threshold still fails)."""
        before, after = self.goodput_before, self.goodput_after
        if before is None or after is None:
            return ""
        if f"{before:.1%}" == f"{after:.1%}":
            return f"goodput stays {before:.1%} (requests still miss another threshold)"
        return f"goodput {before:.1%} -> {after:.1%}"


class Recommendation(_Model):
    """What to do first."""

    choice: Choice
    text: str
    weak: bool = False
    """The slow group is too small to rank fixes on; the text says so."""


class Goodput(_Model):
    """Share of requests that are not errors and meet every per-request threshold."""

    share: float
    target: str | None
    """The end-to-end percentile whose target is the e2e threshold (None: no e2e objective)."""
    target_ms: float | None
    by_target: dict[str, float]
    error_share: float
    min: float | None = None
    """The goodput objective's minimum share (None: reported, not gated)."""
    thresholds: dict[str, float] = Field(default_factory=dict)
    """Per-request thresholds {metric: ms} a good request meets."""
    verdict: Literal["pass", "breach", "inconclusive", "no_minimum"] = "no_minimum"
    good: int | None = None
    requests: int | None = None
    """Denominator: requests in the log plus those that failed without a latency."""


class ObjectiveRow(_Model):
    """One objective measured on the log (exact percentile on the engine)."""

    metric: str
    """e2e | ttft | tpot | itl | a stage name."""
    percentile: str
    target_ms: float
    measured_ms: float | None
    verdict: Literal["pass", "breach", "inconclusive", "no_data"]
    """The one verdict rule (tailbudget._verdict.judge): breach when an exact one-sided
    binomial test proves more than 1 - q of requests over the target at 95%, however few;
    pass when the figure meets the target on enough requests (100 for p99); else
    inconclusive."""
    gated: bool
    n: int
    """Requests (gaps, for itl) the percentile is computed from."""
    over: int | None = None
    """How many of them are over the target (the verdict's k)."""
    confidence: float | None = None
    """The exact test's confidence in the side the data lean to (breach or pass)."""
    more: int | None = None
    """Inconclusive: how many more requests at the share over seen would settle it."""
    output_tokens: int | None = None
    note: str = ""
    driver: str = ""
    """For a breached e2e objective: where its gap lies on the requests above the
    percentile (the stage holding their time; long answers or slow tokens), as rebudget's
    gaps[] says it."""


class ClassGoodput(_Model):
    """A class's goodput: the share of its requests that are good, against its minimum."""

    share: float
    min: float | None = None
    verdict: Literal["pass", "breach", "inconclusive", "no_minimum"] = "no_minimum"
    good: int = 0
    requests: int = 0


class ClassRow(_Model):
    """One class of requests (a tier, tenant or priority) measured on its own requests."""

    name: str
    requests: int
    objectives: list[ObjectiveRow]
    """The class's objectives, each judged on the class's requests by the audit's rule."""
    driver: str | None
    """The stage with the largest slow-vs-fast delta among the class's own requests."""
    goodput: ClassGoodput
    share: float = 0.0
    """The class's share of the log's requests."""
    listed: bool = True
    """False: a class the budget does not list, shown against the service-wide objectives
    (not gated: its requests are judged with the whole service)."""
    priority: int | None = None
    driver_delta_ms: float | None = None
    """The driver's mean slow-minus-fast delta (ms) within the class."""
    weak: bool = False
    """Too few of the class's requests in its slow group: the driver is a lead, not a finding."""
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    cdf: list[CdfPoint] = Field(default_factory=list)
    """The class's end-to-end quantile function (approximate, for the chart)."""
    note: str = ""


class BaselineRow(_Model):
    """Change of one percentile against a baseline log, with a bootstrap interval."""

    percentile: str
    before: float
    after: float
    change: float
    ci_low: float
    ci_high: float

    @property
    def relative_change(self) -> float | None:
        """The change as a share of the before figure (None when before is 0)."""
        return self.change / self.before if self.before else None


class Culprit(_Model):
    """A stage likely to slow the tail, with the evidence behind its score."""

    stage: str
    score: float
    """0..1, higher = more likely; combines the figures below."""
    evidence: str
    figures: dict[str, float] = Field(default_factory=dict)
    """delta_ms (slow - fast mean), growth_ms and its interval (vs --baseline or before an
    event), path_share (share of the slow requests' time), explained_share (nesting)."""
    weak: bool = False
    """True when the slow group is too small to attribute by itself."""
    inside: str | None = None
    """The stage whose time contains this one (nested RPC columns)."""
    contains: list[str] = Field(default_factory=list)


class Nesting(_Model):
    """One stage whose time contains another's (nested RPC columns)."""

    outer: str
    inner: str
    how: Literal["co-movement", "name"]
    share_within: float
    """Share of requests where outer >= inner."""
    slope: float
    """Slope of outer on inner (1 when inner is inside outer and nothing else moves)."""


CanaryVerdict = Literal["regression", "improvement", "no_change", "inconclusive"]


class ObjectiveChange(_Model):
    """One objective: baseline (before) and canary (after), the change and its evidence."""

    metric: str
    percentile: str
    gated: bool
    before_ms: float | None
    after_ms: float | None
    change_ms: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    """One-sided Mann-Whitney U: canary values larger than baseline values."""
    n_before: int
    n_after: int
    verdict: CanaryVerdict


class GoodputChange(_Model):
    """Goodput of the canary minus the baseline's, with a 95% interval."""

    before: float
    after: float
    change: float
    ci_low: float
    ci_high: float
    n_before: int
    n_after: int
    verdict: CanaryVerdict


class Canary(_Model):
    """The canary verdict: regression when a gated objective or goodput regresses."""

    objectives: list[ObjectiveChange]
    goodput: GoodputChange | None
    min_requests: int
    alpha: float
    verdict: Literal["pass", "regression", "inconclusive"]
    text: str


class AuditReport(_Model, ReportBase):
    """Everything `tailbudget audit` finds; serialises to the JSON contract."""

    provenance: Provenance
    rows: RowCounts
    slo: Percentiles
    snapshot: Snapshot
    cdf: list[CdfPoint]
    stages: list[StageRow]
    overlap: Overlap
    tail: Tail
    shape: list[ShapeRow]
    cohorts: list[CohortRow]
    cold_start: ColdStart | None
    hypotheses: list[Hypothesis]
    ranking: list[RankedFix]
    refusals: list[str]
    recommendation: Recommendation
    goodput: Goodput
    baseline: list[BaselineRow] | None
    gated: list[str]
    culprits: list[Culprit] = Field(default_factory=list)
    nesting: list[Nesting] = Field(default_factory=list)
    service: str | None = None
    """The service's name when a budget gave one."""

    def name(self) -> str:
        """What the report is about: the service, else the log's file name."""
        source = self.provenance.source.rstrip("/").rsplit("/", 1)[-1]
        return self.service or source or "latency log"

    objectives: list[ObjectiveRow] = Field(default_factory=list)
    """Every objective, end-to-end ones included (`snapshot` stays the e2e figures)."""
    distributions: dict[str, list[CdfPoint]] = Field(default_factory=dict)
    """Quantile functions of ttft and tpot (approximate, for charts) when they have objectives."""
    canary: Canary | None = None
    """With --baseline: every objective's change, its interval and p-value, and the verdict."""
    class_by: str | None = None
    """The column holding each request's class (budget `classes.by`, `--class-by`)."""
    classes: list[ClassRow] | None = None
    """Objectives per class, each measured on its own requests (None: no class_by)."""

    @model_serializer(mode="wrap")
    def _without_classes(self, handler: SerializerFunctionWrapHandler) -> Any:
        # The class keys appear only when classes were asked for: every other document
        # stays as it was.
        data = handler(self)
        if self.classes is None and isinstance(data, dict):
            for key in ("class_by", "classes"):
                data.pop(key, None)
        return data

    def class_breaches(self) -> list[tuple[ClassRow, ObjectiveRow]]:
        """Every gated class objective that breaches, with its class."""
        return [
            (c, o)
            for c in self.classes or []
            for o in c.objectives
            if c.listed and o.gated and o.verdict == "breach"
        ]

    def breaches_gate(self) -> bool:
        """True when a gated objective (or a goodput minimum) breaches (`--fail-on-breach`)."""
        if any(self.snapshot.verdict.get(p) == "breach" for p in self.gated):
            return True
        if any(o.gated and o.verdict == "breach" for o in self.objectives):
            return True
        if self.class_breaches():
            return True
        if any(c.listed and c.goodput.verdict == "breach" for c in self.classes or []):
            return True
        return self.goodput.verdict == "breach"

    def regresses(self) -> bool:
        """True when the canary gate does not pass: a gated regression, or too little data
        to tell (`--fail-on-regression`)."""
        return self.canary is not None and self.canary.verdict != "pass"
