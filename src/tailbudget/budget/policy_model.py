"""The policy model: rules and policies as frozen data (see `tailbudget.budget.policy`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tailbudget._names import name_problem
from tailbudget.budget.metric import MetricRef, parse_metric
from tailbudget.errors import PolicyError

Action = Literal["scale_up", "trim_logging", "shed_load", "rollback"]
METRICS: tuple[str, ...] = ("p50", "p95", "p99", "error_rate", "p99_vs_baseline")
"""The end-to-end metrics; any name `parse_metric` accepts is a metric too."""
TRIGGER_ACTIONS: tuple[str, ...] = ("scale_up", "trim_logging", "shed_load", "rollback")
RECOVERY: dict[str, str | None] = {
    "scale_up": "scale_down",
    "trim_logging": "restore_logging",
    "shed_load": "stop_shedding",
    "rollback": None,
}
"""The action that undoes each trigger once its clear condition has held."""
ALL_ACTIONS: tuple[str, ...] = (
    "scale_up",
    "scale_down",
    "trim_logging",
    "restore_logging",
    "shed_load",
    "stop_shedding",
    "rollback",
)

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Replicas(_Frozen):
    """Bounds and step of the desired replica count handed to the autoscaler."""

    min: Annotated[int, Field(ge=0)] = 1
    max: Annotated[int, Field(ge=1)] = 10
    step: Annotated[int, Field(ge=1)] = 1

    @model_validator(mode="after")
    def _bounds(self) -> Replicas:
        if self.max < self.min:
            raise ValueError(f"replicas.max ({self.max}) is below replicas.min ({self.min})")
        return self


class ModelMode(_Frozen):
    """The `model` policy's settings (`policy: {mode: model, model: {...}}`).

    Desired replicas come from the fitted service model at the load forecast one
    provisioning delay ahead (Holt's linear smoothing); the rules guard drift.
    """

    probability: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 0.9
    """The margin: the share of the forecast minutes the count must meet, each judged as
    the hindsight floor judges a minute (not a tightened target)."""
    headroom: Annotated[float, Field(ge=0, lt=1)] | None = None
    """The drift guard's predictions: share of every target kept free; None: the budget's
    headroom, else 10%. (Sizing uses `probability` since issue 34.)"""
    cooldown_s: Seconds = 300.0
    """Fewer replicas only once the model has said so for this long."""
    alpha: Annotated[float, Field(gt=0, le=1)] = 0.3
    """Holt's level smoothing per evaluation."""
    beta: Annotated[float, Field(gt=0, le=1)] = 0.1
    """Holt's trend smoothing per evaluation."""
    mix_window_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 300.0
    """The forecast minutes are the whole minutes of this span as they arrived (their
    bursts, prompts and answers), scaled to the forecast load."""
    peak_window_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 300.0
    """Accepted, no longer read (issue 34): the forecast minutes are the recent minutes as
    they arrived, bursts and all (`mix_window_s`)."""
    peak_span_s: Annotated[float, Field(gt=0, lt=60, allow_inf_nan=False)] = 5.0
    """Accepted, no longer read (issue 34)."""
    surge: Annotated[float, Field(ge=1, le=10, allow_inf_nan=False)] = 1.0
    """The forecast minutes carry this multiple of the forecast load (a step no forecast
    sees); 1: the forecast alone."""
    drift_error: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 0.25
    """The model's stated error: measured above predicted x (1 + this) departs."""
    drift_for_s: Seconds = 120.0
    """A departure this long is drift: the rules take over until it is back as long."""
    min_samples: Annotated[int, Field(ge=1)] = 20
    refit_every_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    """serve: refit on this schedule too (as POST /v1/model/refit); None: only when asked."""


class Rule(_Frozen):
    """One resolved rule: when `metric op threshold` holds for `for_s`, do `action`."""

    name: str
    metric: str
    """A metric name (`p95`, `ttft.p95`, `goodput`, ...), stored in canonical form."""
    op: Literal[">", ">=", "<", "<="] = ">"
    threshold: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    """ms for percentiles; a ratio for error_rate, goodput and the _vs_baseline metrics."""
    for_s: Seconds = 0.0
    action: Action
    cooldown_s: Seconds = 60.0
    clear_threshold: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    """Hysteresis: the trigger clears only when the metric is <= this."""
    clear_for_s: Seconds = 120.0
    """Stabilization: the clear condition must hold this long before recovery."""
    expr: str = ""
    """The threshold as written (e.g. '90% of p95'), for reports."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        problem = name_problem(value)
        if problem is not None:
            raise ValueError(f"rule name {ascii(value)[:80]} {problem}; remove it")
        return value

    @field_validator("metric", mode="before")
    @classmethod
    def _canonical(cls, value: Any) -> str:
        try:
            return parse_metric(value).name
        except PolicyError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _hysteresis(self) -> Rule:
        if self.rising and self.op[0] != ">":
            raise ValueError(f"a {self.metric} rule breaches upwards; use op '>' or '>='")
        if not self.rising and self.op[0] != "<":
            raise ValueError(f"a {self.metric} rule breaches when it falls; use op '<' or '<='")
        if self.rising and self.clear_threshold > self.threshold:
            raise ValueError(
                f"clear threshold ({self.clear_threshold:g}) must not exceed the trigger "
                f"threshold ({self.threshold:g}); lower clear.threshold"
            )
        if not self.rising and self.clear_threshold < self.threshold:
            raise ValueError(
                f"clear threshold ({self.clear_threshold:g}) must not be below the trigger "
                f"threshold ({self.threshold:g}) of a falling metric; raise clear.threshold"
            )
        return self

    @property
    def ref(self) -> MetricRef:
        """The parsed metric."""
        return parse_metric(self.metric)

    @property
    def rising(self) -> bool:
        """True when a higher value is worse (every metric but goodput)."""
        return self.ref.higher_is_worse

    def holds(self, value: float) -> bool:
        """Whether `value` meets the trigger condition."""
        op = self.op
        if op == ">":
            return value > self.threshold
        if op == ">=":
            return value >= self.threshold
        if op == "<":
            return value < self.threshold
        return value <= self.threshold

    def cleared(self, value: float) -> bool:
        """Whether `value` is on the healthy side of the clear threshold (hysteresis)."""
        if self.rising:
            return value <= self.clear_threshold
        return value >= self.clear_threshold

    @property
    def unit(self) -> str:
        """'ms' for latency rules, '' for ratios."""
        return "ms" if self.ref.latency else ""


MIN_EVALUATE_EVERY_S = 0.1
"""Shortest evaluation period (and sub-window) a policy may use."""


class Policy(_Frozen):
    """A whole resolved policy (see the module docstring for the file form)."""

    window_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 60.0
    evaluate_every_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 10.0
    min_samples: Annotated[int, Field(ge=1)] = 20
    baseline_p99_ms: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    baselines: dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        default_factory=dict
    )
    """Baselines of other metrics by name (`ttft.p99`: ms, `goodput`: a share)."""
    goodput: dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        default_factory=dict
    )
    """Per-request thresholds (ms) a good request meets, by series (`ttft`, `tpot`, `e2e`)."""
    rollback_for_s: Seconds = 120.0
    confidence: Annotated[float, Field(ge=0.5, lt=1)] = 0.975
    rules: list[Rule] = Field(default_factory=list)
    dry_run: bool = False
    replicas: Replicas = Field(default_factory=Replicas)
    mode: Literal["reactive", "model"] = "reactive"
    """reactive: the rules scale; model: the fitted model scales, the rules guard drift."""
    sizing: Literal["step", "breach"] = "step"
    """How a latency scale_up rule moves desired replicas. step: by `replicas.step` per
    firing, down one step once its clear threshold held. breach (the LLM default): to
    the count the breach asks for, in proportion to how far the window's percentile is
    over the threshold, and down only while the part of the percentile above the lowest
    seen (the floor no count beats), scaled to one replica fewer, stays within the
    rule's hysteresis share of the threshold (see control/transitions.py)."""
    model: ModelMode = Field(default_factory=ModelMode)
    source: str = "default"
    """How the policy was made, for reports (e.g. 'default, scaled to slo.p95 = 2800 ms')."""

    @model_validator(mode="after")
    def _ring(self) -> Policy:
        if self.evaluate_every_s < MIN_EVALUATE_EVERY_S:
            raise ValueError(
                f"evaluate_every must be at least {MIN_EVALUATE_EVERY_S:g}s, got "
                f"{self.evaluate_every_s:g}s; percentiles over shorter spans hold too few "
                "requests to act on (the default is 10s)"
            )
        subs = self.window_s / self.evaluate_every_s
        if subs < 1 or abs(subs - round(subs)) > 1e-9 or round(subs) > 720:
            raise ValueError(
                f"window ({self.window_s:g}s) must be a whole multiple (1-720x) of "
                f"evaluate_every ({self.evaluate_every_s:g}s), e.g. window 60s, evaluate_every 10s"
            )
        names = [r.name for r in self.rules]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise ValueError(f"rule name {dup!r} appears twice; names must be unique")
        return self

    @property
    def sub_windows(self) -> int:
        """Number of sub-windows in the ring."""
        return round(self.window_s / self.evaluate_every_s)

    def with_baseline(self, p99_ms: float | None) -> Policy:
        """This policy with another baseline p99 (None removes it)."""
        return self.model_copy(update={"baseline_p99_ms": p99_ms})

    def baseline(self, name: str) -> float | None:
        """The baseline of metric `name` (`p99`, `ttft.p99`, `goodput`), or None."""
        if name == "p99":
            return self.baseline_p99_ms
        return self.baselines.get(name)

    @property
    def series(self) -> dict[str, set[float]]:
        """Series the rules read (`e2e`, `ttft`, a stage) and the quantiles of each."""
        out: dict[str, set[float]] = {}
        for rule in self.rules:
            ref = rule.ref
            if ref.q is not None:
                out.setdefault(ref.series, set()).add(ref.q)
        return out


__all__ = [
    "ALL_ACTIONS",
    "METRICS",
    "RECOVERY",
    "TRIGGER_ACTIONS",
    "Action",
    "ModelMode",
    "Policy",
    "Replicas",
    "Rule",
    "Seconds",
]
