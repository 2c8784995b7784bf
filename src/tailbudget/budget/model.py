"""The budget file model: SLO, stages and parallel groups, LLM blocks, log mapping.

Records are frozen pydantic models so a loaded budget can be shared across
threads and layers without copies.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from tailbudget._names import name_problem
from tailbudget.budget.blocks import PercentileBlock
from tailbudget.budget.classes import ClassesSpec, ClassSet, class_set
from tailbudget.budget.llm_spec import LLMSpec as LLMSpec
from tailbudget.budget.llm_spec import Spread as Spread
from tailbudget.budget.measured import MeasuredRequests as MeasuredRequests
from tailbudget.budget.objectives import GATES as GATES
from tailbudget.budget.objectives import Objectives
from tailbudget.budget.slo import SLO as SLO

Environment = Literal["dev", "qa", "uat", "prd"]

Ms = Annotated[float, Field(gt=0, strict=True, allow_inf_nan=False)]
NonNegMs = Annotated[float, Field(ge=0, strict=True, allow_inf_nan=False)]
_NAME = re.compile(r"^[^\s\x00-\x1f\x7f](?:[^\x00-\x1f\x7f]{0,198}[^\s\x00-\x1f\x7f])?\Z")
"""A stage keeps the name its log gives it (span operations such as `/api/v1/{id}` or
`/*` included): any text up to 200 characters without control characters or outer
spaces (exports quote and escape it)."""


NAME_RULE = (
    "a name may hold any character but control characters (C0, DEL, C1 such as NEL), "
    "line/paragraph separators (U+2028, U+2029), surrogates, noncharacters and "
    "bidirectional controls; remove it"
)


def _shown(value: str) -> str:
    text = ascii(value)
    return text if len(text) <= 80 else text[:77] + "..."


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Percentiles(PercentileBlock):
    """Milliseconds at p50/p95/p99; at least one, and non-decreasing."""

    NONE_GIVEN = "give at least one of p50, p95, p99 (milliseconds)"

    p50: Ms | None = None
    p95: Ms | None = None
    p99: Ms | None = None


class Stage(_Frozen):
    """One timed step of a request, with its latency slice and/or an LLM block."""

    stage: str
    budget: Percentiles | None = None
    llm: LLMSpec | None = None
    column: str | None = None
    """Log column holding this stage's latency (default `<stage>_ms`)."""
    optional: bool = False
    """The request can be answered without this stage (a fallback when it is slow), so a
    re-budget may propose cutting it off at a timeout."""

    @field_validator("stage")
    @classmethod
    def _name(cls, v: str) -> str:
        problem = name_problem(v)
        if problem is not None:
            raise ValueError(f"stage name {_shown(v)} {problem}: {NAME_RULE}")
        if not _NAME.match(v):
            raise ValueError(
                "stage name must be 1 to 200 characters without line breaks, control "
                f"characters or leading/trailing spaces, got {_shown(v)}"
            )
        return v

    @model_validator(mode="after")
    def _has_slice(self) -> Stage:
        if self.budget is None and self.llm is None:
            raise ValueError(
                f"stage {self.stage!r} needs a budget: {{p50, p95, p99}} or an llm: block"
            )
        return self

    @property
    def name(self) -> str:
        """The stage name."""
        return self.stage

    @property
    def log_column(self) -> str:
        """The log column for this stage."""
        return self.column or f"{self.stage}_ms"


def _item_tag(value: object) -> str | None:
    if isinstance(value, BaseModel):
        return {Stage: "stage", Parallel: "parallel", Sequence: "sequence"}.get(type(value))
    if isinstance(value, dict):
        for tag in ("stage", "parallel", "sequence"):
            if tag in value:
                return tag
    return None


class Parallel(_Frozen):
    """Branches that run at once; the group takes as long as its slowest branch."""

    parallel: Annotated[list[PipelineItem], Field(min_length=1)]


class Sequence(_Frozen):
    """Items that run one after another (a branch of a parallel group).

    With `caller`, a stage and the calls made inside it (written `calls:` under the stage):
    the first item is the caller with its own time as its slice, the rest run inside it,
    so the caller's log column holds them all and is read as its own time (the column less
    its calls'). Composition is a sequence's: own time plus the calls."""

    sequence: Annotated[list[PipelineItem], Field(min_length=1)]
    caller: str | None = None

    @model_validator(mode="after")
    def _caller_first(self) -> Sequence:
        first = self.sequence[0]
        if self.caller is not None and not (isinstance(first, Stage) and first.name == self.caller):
            raise ValueError(
                f"caller {self.caller!r} must be the first stage of its sequence; write the "
                "calls under it: `- stage: NAME` with `calls: [...]`"
            )
        return self

    def calls(self) -> list[PipelineItem]:
        """The items run inside the caller (empty without a caller)."""
        return self.sequence[1:] if self.caller is not None else []


PipelineItem = Annotated[
    Annotated[Stage, Tag("stage")]
    | Annotated[Parallel, Tag("parallel")]
    | Annotated[Sequence, Tag("sequence")],
    Discriminator(_item_tag),
]


class LogMapping(_Frozen):
    """How a log names things, when it does not use tailbudget's defaults."""

    timestamp: str | None = None
    total: str | None = None
    request_id: str | None = None
    error: str | None = None
    unit: Literal["ms", "s", "us"] = "ms"
    stages: list[str] | dict[str, str] | None = None
    """Stage columns: a list of columns, or {stage name: column}."""
    stages_glob: str | None = None
    shape: list[str] = Field(default_factory=list)
    cohorts: list[str] = Field(default_factory=list)
    span_stage: Literal["operation", "service"] = "operation"
    """Span tables and traces: a stage is a span's operation or its service."""


class Composition(_Frozen):
    """Settings of the Monte Carlo composition of stage distributions."""

    samples: Annotated[int, Field(ge=1000, le=50_000_000, strict=True)] = 200_000
    seed: Annotated[int, Field(ge=0, lt=2**63, strict=True)] = 0
    correlation: Annotated[float, Field(ge=-1, le=1)] = 0.0
    """Pairwise correlation between stages (Gaussian copula); 0 = independent; below 0 at
    least -1/(k-1) for k stages (checked with the pipeline)."""
    default_sigma: Annotated[float, Field(gt=0, le=3)] = 0.5
    """Log-space spread assumed for a stage with a single percentile given."""
    measured: MeasuredRequests | None = None
    """The log's whole requests, end to end (optional; see MeasuredRequests)."""


def _wrap_lists(items: Any) -> Any:  # YAML as read: a list comes back a list
    # A bare YAML list inside a pipeline is a sequence; accept it for convenience.
    if isinstance(items, list):
        return [{"sequence": _wrap_lists(i)} if isinstance(i, list) else _nested(i) for i in items]
    return items


def _nested(item: object) -> object:
    if isinstance(item, dict):
        if "stage" in item and "calls" in item:
            # `calls:` under a stage: the stage (its own time) then what runs inside it.
            own = {k: v for k, v in item.items() if k != "calls"}
            calls = item["calls"]
            if not isinstance(calls, list) or not calls:
                return item  # the Stage model names the bad key
            return {"sequence": [own, *_wrap_lists(calls)], "caller": item["stage"]}
        for key in ("parallel", "sequence"):
            if key in item and isinstance(item[key], list):
                return {**item, key: _wrap_lists(item[key])}
    return item


class Budget(_Frozen):
    """A whole budget file."""

    service: Annotated[str, Field(min_length=1, max_length=200)] = "service"
    environment: Environment | None = None
    """Which percentiles gate (GATES); without it every stated objective gates."""
    slo: SLO
    headroom: Annotated[float, Field(ge=0, lt=1, strict=True)] = 0.0
    overhead_ms: NonNegMs = 0.0
    pipeline: Annotated[list[PipelineItem], Field(min_length=1)]
    log: LogMapping = Field(default_factory=LogMapping)
    composition: Composition = Field(default_factory=Composition)
    policy: str | dict[str, Any] = "default"
    """`default` (the default reactive-scaling rules) or a rules block; see tailbudget.control."""
    fixes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Overrides of the audit's fix catalog (hours, risk, reversible) by fix name."""
    classes: ClassesSpec | None = None
    """Objectives per class (tier, tenant, priority); see tailbudget.budget.classes."""

    @field_validator("pipeline", mode="before")
    @classmethod
    def _lists_are_sequences(cls, v: Any) -> Any:
        return _wrap_lists(v)

    @field_validator("service")
    @classmethod
    def _service_name(cls, v: str) -> str:
        # The name goes into PromQL selectors, YAML manifests, alert templates and
        # reports, which escape it (tailbudget._names); a line break or control character
        # would still split or fold it.
        problem = name_problem(v)
        if problem is not None:
            raise ValueError(f"service name {_shown(v)} {problem}: {NAME_RULE}")
        return v

    @model_validator(mode="after")
    def _check(self) -> Budget:
        seen: set[str] = set()
        for _, stage in self.stages():
            if stage.name in seen:
                raise ValueError(f"stage name {stage.name!r} appears twice; names must be unique")
            seen.add(stage.name)
        rho, k = self.composition.correlation, len(seen)
        if rho < 0 and (k < 2 or rho < -1.0 / (k - 1) - 1e-12):
            least = -1.0 / (k - 1) if k > 1 else 0.0
            raise ValueError(
                f"composition.correlation {rho:g}: {k} stage(s) can be correlated down to "
                f"{least:g} at most (equal pairwise correlation); raise it to {least:g} or above"
            )
        tokens = self.slo.e2e.output_tokens if self.slo.e2e is not None else None
        if tokens is not None and not any(s.llm is not None for _, s in self.stages()):
            raise ValueError(
                "slo.e2e.output_tokens needs a stage with an llm: block (ttft_ms, "
                "tokens_per_s) to scale to that answer length"
            )
        if self.environment is not None and not self.objectives.gated():
            gates = GATES[self.environment]
            raise ValueError(
                f"environment {self.environment!r} gates {', '.join(gates)} and no objective "
                f"is at {gates[-1]}; add slo.{gates[-1]} (milliseconds), or drop environment: "
                "to gate every stated objective"
            )
        self._check_classes(seen)
        return self

    def _check_classes(self, stages: set[str]) -> None:
        if self.classes is None:
            return
        for name, spec in self.classes.specs().items():
            unknown = [s for s in spec.skip if s not in stages]
            if unknown:
                raise ValueError(
                    f"classes.{name}.skip: {unknown[0]!r} is not a stage of the pipeline "
                    f"(stages: {', '.join(sorted(stages))})"
                )

    @property
    def class_set(self) -> ClassSet | None:
        """The classes with their objectives gated by this budget's environment."""
        return None if self.classes is None else class_set(self.classes, self.environment)

    @property
    def objectives(self) -> Objectives:
        """Every objective of the `slo:` block, gated by this budget's environment."""
        return Objectives.coerce(self.slo, environment=self.environment)

    @property
    def gated(self) -> tuple[str, ...]:
        """The gated end-to-end percentiles (e.g. ('p95', 'p99')), lowest first."""
        return self.objectives.gated_percentiles("e2e")

    def stages(self) -> Iterator[tuple[str, Stage]]:
        """Every leaf stage with its path in the file, in pipeline order."""
        yield from _walk(self.pipeline, "pipeline")

    def stage(self, name: str) -> Stage | None:
        """The stage called `name`, if any."""
        return next((s for _, s in self.stages() if s.name == name), None)

    def callers(self) -> dict[str, list[list[str]]]:
        """{caller: its direct calls, each a list of the stages whose slowest is its time
        (one for a stage or a nested caller, a parallel group's branches)}: the log's
        caller column holds these, and is read less them as the caller's own time."""
        out: dict[str, list[list[str]]] = {}
        _callers(self.pipeline, out)
        return out

    def calls_of(self, name: str) -> set[str]:
        """Every stage run inside `name`, at any depth (empty for a stage that calls none)."""
        found: set[str] = set()
        todo = [name]
        calls = self.callers()
        while todo:
            for term in calls.get(todo.pop(), []):
                for s in term:
                    if s not in found:
                        found.add(s)
                        todo.append(s)
        return found


def _head(item: Stage | Parallel | Sequence) -> list[str]:
    # The stages whose time is an item's, as the log's columns hold it: a stage's own, a
    # caller's column (its calls inside), a group's branches (the slowest is the group's).
    if isinstance(item, Stage):
        return [item.name]
    if isinstance(item, Parallel):
        return [s for branch in item.parallel for s in _head(branch)]
    if item.caller is not None:
        return [item.caller]
    return [s for i in item.sequence for s in _head(i)]


def _callers(items: list[PipelineItem], out: dict[str, list[list[str]]]) -> None:
    for item in items:
        if isinstance(item, Parallel):
            _callers(item.parallel, out)
        elif isinstance(item, Sequence):
            if item.caller is not None:
                out[item.caller] = [_head(i) for i in item.calls()]
            _callers(item.sequence, out)


def _walk(items: list[PipelineItem], path: str) -> Iterator[tuple[str, Stage]]:
    for i, item in enumerate(items):
        here = f"{path}[{i}]"
        if isinstance(item, Stage):
            yield here, item
        elif isinstance(item, Parallel):
            yield from _walk(item.parallel, f"{here}.parallel")
        else:
            yield from _walk(item.sequence, f"{here}.sequence")


Parallel.model_rebuild()
Sequence.model_rebuild()
Budget.model_rebuild()
