"""The `simulate` and `capacity` JSON documents as typed records, field for key.

The simulation's own results (`RunResult`, `Floor`, `ServiceModel`...) hold arrays and
the objectives they were measured against; each gives its part of the document here
(`.record()`), rounded as the contract states. A record refuses keys it does not know,
so the document cannot gain a key no field names.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    JsonValue,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from tailbudget.control.replay_record import ShedStep

__all__ = [
    "ArrivalsRecord",
    "CapacityDocument",
    "CapacityPointRecord",
    "FitRowRecord",
    "FloorRecord",
    "GoodputRecord",
    "LoadLevel",
    "LogFigureRecord",
    "ModelRecord",
    "ObjectiveRecord",
    "ParamRecord",
    "RequestsRecord",
    "RunRecord",
    "ScaleAt",
    "ScaleNever",
    "SimClassRecord",
    "SimDecisionRecord",
    "SimDocument",
    "TimelinePointRecord",
    "TimelineRecord",
]

Verdict = Literal["pass", "breach", "inconclusive"]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ParamRecord(_Record):
    """One model parameter: its value, unit, and how it was obtained."""

    name: str
    value: float
    unit: str
    source: Literal["fitted", "measured", "default", "stated"]
    note: str


class LoadLevel(_Record):
    """One input log's rate, mean concurrency (Little's law) and percentiles."""

    source: str
    requests: int
    rate_per_s: float | Literal["all at once"] | None
    duration_s: float | None
    mean_in_flight: float | None
    mean_ms: float
    p50_ms: float
    p99_ms: float
    prefix_hit_rate: float | None = None
    """The fitted share of its prompt tokens served from a prefix cache (LLM model)."""


class ModelRecord(_Record):
    """The `model` block: what the simulation ran and how each parameter was obtained."""

    kind: Literal["queue", "llm"]
    sources: list[str]
    requests: int
    work: str
    stages: list[str]
    parameters: list[ParamRecord]
    unidentified: list[str]
    load_levels: list[LoadLevel]
    fit_quality: dict[str, JsonValue]
    """The fit's own diagnostics (residuals, r2 per line), as the fitter names them."""
    notes: list[str]


class ObjectiveRecord(_Record):
    """The audit's objective shape, plus attainment and minutes in breach."""

    metric: str
    percentile: str
    target_ms: float
    measured_ms: float | None
    verdict: Verdict
    gated: bool
    attainment: float | None
    """Share of the minutes with served requests not in breach."""
    minutes_in_breach: int
    """Minutes whose own requests prove a breach (the one verdict rule)."""
    minutes_inconclusive: int = 0
    """Minutes the rule leaves inconclusive (too few requests to pass, or over the target
    by less than they prove): neither met nor in breach."""
    n: int | None
    over: int | None = None
    """Simulated requests over the target (the verdict rule's k)."""
    confidence: float | None = None
    """The verdict rule's confidence in the side the requests lean to."""
    note: str


class SimClassRecord(_Record):
    """One class's simulated requests (each copies a logged request and keeps its class),
    judged by the class's objectives."""

    name: str
    requests: int
    objectives: list[ObjectiveRecord]
    breach_minutes: int
    """The most minutes in breach of any gated class objective."""
    note: str = ""
    listed: bool = True
    """False: a class-column value the budget does not list, judged by the service-wide
    objectives, ungated."""


class FitRowRecord(_Record):
    """One figure of one fitted run: predicted on the run's own arrivals vs measured."""

    source: str
    load: str
    figure: str
    measured_ms: float
    predicted_ms: float
    error: float
    """predicted / measured - 1."""


class LogFigureRecord(_Record):
    """An objective measured on the log itself, as the audit measures it (beside the
    simulated figures: the model's prediction against what the log recorded)."""

    objective: str
    measured_ms: float | None
    verdict: Literal["pass", "breach", "inconclusive", "not_measured"]


class GoodputRecord(_Record):
    """Share of arrivals served without error within every per-request threshold."""

    share: float | None
    min: float | None
    thresholds: dict[str, float]
    verdict: Literal["pass", "breach", "inconclusive"] | None
    """The audit's goodput rule (`judge_share`): a shortfall the arrivals prove is a
    breach, one they do not is inconclusive."""


class RequestsRecord(_Record):
    """What happened to the arrivals."""

    arrived: int
    served: int
    shed: int
    unfinished: int


class SimDecisionRecord(_Record):
    """One decision the policy took, in simulated time."""

    t: str
    t_offset_s: float
    action: str
    metric: str
    value: float | None
    threshold: float | None
    reason: str
    rule: str | None
    replicas: int | None


class TimelinePointRecord(_Record):
    """One policy evaluation: the fleet and the watched percentile over the last minute."""

    t_offset_s: float
    ready: int
    alive: int
    shed: bool
    trim: bool
    value_ms: float | None


class TimelineRecord(_Record):
    """The timeline, and the objective it plots (the tightest gated one)."""

    watched: str
    points: list[TimelinePointRecord]


class RunRecord(_Record):
    """One policy's run."""

    policy: str
    start_replicas: int
    objectives: list[ObjectiveRecord]
    goodput: GoodputRecord
    replica_hours: float
    replica_hours_vs_floor: float | None
    peak_replicas: int
    requests: RequestsRecord
    cold_starts: int
    minutes_in_breach: int
    decisions: list[SimDecisionRecord]
    timeline: TimelineRecord
    classes: list[SimClassRecord] | None = None
    """With a budget listing classes and a log holding the class column."""
    shedding: list[ShedStep] | None = None
    """With classes: each shed_load and stop_shedding with the class it sheds or restores
    and whose rule fired (replay's `shedding[]`); absent without classes."""

    @model_serializer(mode="wrap")
    def _without_classes(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = _drop_classes(self.classes, handler(self))
        if self.shedding is None and isinstance(data, dict):
            data.pop("shedding", None)
        return data


class ArrivalsRecord(_Record):
    """Where the arrivals came from, how many, at what multiple of the log's load."""

    source: str
    requests: int
    load: float


class FloorRecord(_Record):
    """The hindsight floor: replicas each minute needs, and what paying for them costs."""

    replica_hours: float
    replicas_per_minute: list[int | None]
    provision_delay_s: float
    method: str


class SimDocument(_Record):
    """`simulate --format json`: the first policy's figures at the top, every run in `runs`."""

    objectives: list[ObjectiveRecord]
    goodput: GoodputRecord
    replica_hours: float
    requests: RequestsRecord
    decisions: list[SimDecisionRecord]
    policy: str
    model: ModelRecord
    arrivals: ArrivalsRecord
    duration_s: float
    seed: int
    runs: list[RunRecord]
    floor: FloorRecord | None
    notes: list[str]
    log_measured: list[LogFigureRecord] = []
    """With one LOG: each objective as the audit measures it on that log."""
    classes: list[SimClassRecord] | None = None
    """The first policy's per-class figures (with classes only)."""
    fit: list[FitRowRecord] = []
    """Every fitted run's figures, predicted on its own arrivals vs measured."""
    reproduces: bool | None = None
    """Medians within 10% and tails within 20% in `fit` (None: no run could be replayed);
    false: no policy verdict is given."""

    @model_serializer(mode="wrap")
    def _without_classes(self, handler: SerializerFunctionWrapHandler) -> Any:
        return _drop_classes(self.classes, handler(self))


def _drop_classes(classes: Any, data: Any) -> Any:
    # The class key appears only when classes were simulated: other documents stay as they were.
    if classes is None and isinstance(data, dict):
        data.pop("classes", None)
    return data


class CapacityPointRecord(_Record):
    """A curve entry: the replicas a load needs, and the objectives measured with them."""

    load: float
    replicas: int | None
    utilization: float | None
    objectives: list[ObjectiveRecord]
    classes: list[SimClassRecord] | None = None
    """With classes: each class's objectives on its own requests at these replicas."""
    set_by: str | None = None
    """With classes: the class that sets the count (or "service")."""

    @model_serializer(mode="wrap")
    def _without_classes(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = _drop_classes(self.classes, handler(self))
        if self.classes is None and isinstance(data, dict):
            data.pop("set_by", None)
        return data


class ScaleAt(_Record):
    """Scale before the load at which the tightest gated objective reaches its share."""

    objective: str
    load: float
    replicas: int
    share_of_target: float


class ScaleNever(_Record):
    """The tightest gated objective stays below its share up to the note's load."""

    objective: str
    load: None
    replicas: int
    note: str | None


class CapacityDocument(_Record):
    """`capacity --format json`."""

    curve: list[CapacityPointRecord]
    scale_before_breach: ScaleAt | ScaleNever | None
    arrivals: str
    model: ModelRecord
    notes: list[str]
    fit: list[FitRowRecord] = []
    """Every fitted run's figures, predicted on its own arrivals vs measured."""
    reproduces: bool | None = None
    """Medians within 10% and tails within 20% in `fit` (None: no run could be replayed)."""
