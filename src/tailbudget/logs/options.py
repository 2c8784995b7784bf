"""How to read a latency log: column mapping, units, format and engine query."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Literal, TypedDict, Unpack

from tailbudget.errors import LogError

if TYPE_CHECKING:
    from tailbudget.budget.model import Budget

__all__ = ["FORMATS", "SEND_TIME_FORMATS", "ReadOptions", "ReadSettings", "Unit"]

Unit = Literal["ms", "s", "us"]
FORMATS = (
    "parquet",
    "csv",
    "jsonl",
    "otlp",
    "jaeger",
    "spans",
    "vllm",
    "llmperf",
    "aiperf",
    "guidellm",
    "sglang",
    "engine",
)
SEND_TIME_FORMATS = ("vllm", "llmperf", "aiperf", "guidellm", "sglang")
"""Formats whose timestamp is each request's send (start) time: the LLM load generators.
A live service sees such a request only when it completes (send time + e2e)."""
_UNITS = ("ms", "s", "us")


class ReadSettings(TypedDict, total=False):
    """ReadOptions' fields, as `ReadOptions.with_` takes them."""

    total: str | None
    stages: tuple[str, ...] | Mapping[str, str] | None
    stages_glob: str | None
    timestamp: str | None
    request_id: str | None
    error: str | None
    unit: Unit | None
    shape: tuple[str, ...]
    cohorts: tuple[str, ...]
    format: str | None
    query: str | None
    span_stage: Literal["operation", "service"]
    max_stages: int
    span_attribution: Literal["critical_path", "self"]
    span_keep: tuple[str, ...]
    span_profile: bool
    calls: Mapping[str, tuple[tuple[str, ...], ...]] | None


@dataclass(frozen=True)
class ReadOptions:
    """Overrides for reading a log; every field left None is detected from the log.

    `stages` is a tuple of columns (stage name = column without `_ms`) or a
    mapping {stage name: column}. `unit` applies to the total and stage
    columns of tabular logs (None = milliseconds); formats that define their
    own units (spans, LLM benchmarks) ignore it unless a span duration has none.
    """

    total: str | None = None
    stages: tuple[str, ...] | Mapping[str, str] | None = None
    stages_glob: str | None = None
    timestamp: str | None = None
    request_id: str | None = None
    error: str | None = None
    unit: Unit | None = None
    shape: tuple[str, ...] = ()
    cohorts: tuple[str, ...] = ()
    format: str | None = None
    query: str | None = None
    span_stage: Literal["operation", "service"] = "operation"
    max_stages: int = 12
    """Span tables: keep at least this many stages by total time; beyond them only
    stages that are negligible everywhere (overall and in the slowest traces) are
    summed into `other`."""
    span_attribution: Literal["critical_path", "self"] = "critical_path"
    """Span tables with start times: a stage's time is its time on the critical path
    (each ms once, network gaps on the callee) or its self time."""
    span_keep: tuple[str, ...] = ()
    """Span tables: stage names never folded into `other` (e.g. another log's stages)."""
    span_profile: bool = False
    """Span tables: keep per-operation samples (self time, call gaps) for culprits that
    hold on CPU contention; the audit asks for it when a baseline is given."""
    calls: Mapping[str, tuple[tuple[str, ...], ...]] | None = None
    """{caller stage: its direct calls}, each call the stages whose slowest is its time: a
    budget's `calls:` (nested RPC columns). The caller's column holds its calls' time, so
    it is read as its own time: the column less its calls', never below 0."""

    def __post_init__(self) -> None:
        if self.unit is not None and self.unit not in _UNITS:
            raise LogError(f"unit must be one of ms, s, us, got {self.unit!r}", param="unit")
        if self.format is not None and self.format not in FORMATS:
            raise LogError(f"unknown log format {self.format!r}; use one of {', '.join(FORMATS)}")
        if self.span_stage not in ("operation", "service"):
            raise LogError(f"span_stage must be 'operation' or 'service', got {self.span_stage!r}")
        if self.span_attribution not in ("critical_path", "self"):
            raise LogError(
                f"span_attribution must be 'critical_path' or 'self', got {self.span_attribution!r}"
            )
        if self.max_stages < 1:
            raise LogError(f"max_stages must be at least 1, got {self.max_stages}")
        # Accept lists from callers (YAML, CLI) but keep the record immutable.
        for name in ("shape", "cohorts", "span_keep"):
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, (value,))
            elif not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        if isinstance(self.stages, str):
            object.__setattr__(self, "stages", (self.stages,))
        elif self.stages is not None and not isinstance(self.stages, tuple | Mapping):
            object.__setattr__(self, "stages", tuple(self.stages))

    def stage_map(self) -> dict[str, str] | None:
        """The explicit stages as {stage name: column}, or None when not given."""
        if self.stages is None:
            return None
        if isinstance(self.stages, Mapping):
            return {str(k): str(v) for k, v in self.stages.items()}
        return {_strip_ms(c): c for c in self.stages}

    def with_(self, **changes: Unpack[ReadSettings]) -> ReadOptions:
        """A copy with some fields changed."""
        return replace(self, **changes)

    @classmethod
    def from_budget(cls, budget: Budget | None, **overrides: object) -> ReadOptions:
        """Options from a budget file's `log:` block; non-None overrides win (each named
        as a field, LogError otherwise; ReadOptions checks their values)."""
        values: dict[str, Any] = {}
        if budget is not None:
            log = budget.log
            values.update(
                total=log.total,
                timestamp=log.timestamp,
                request_id=log.request_id,
                error=log.error,
                # "ms" is the model's default: passing it on would override the
                # units span and benchmark formats define themselves.
                unit=None if log.unit == "ms" else log.unit,
                stages_glob=log.stages_glob,
                shape=tuple(log.shape),
                cohorts=tuple(log.cohorts),
                span_stage=log.span_stage,
            )
            callers = budget.callers()
            if callers:
                values["calls"] = {b: tuple(map(tuple, terms)) for b, terms in callers.items()}
            if isinstance(log.stages, dict):
                values["stages"] = dict(log.stages)
            elif log.stages:
                values["stages"] = tuple(log.stages)
            else:
                # Stages that name their own log column map all stages explicitly.
                leaves = [stage for _, stage in budget.stages()]
                if any(stage.column for stage in leaves):
                    values["stages"] = {s.name: s.log_column for s in leaves}
        known = {f.name for f in fields(cls)}
        for key, value in overrides.items():
            if key not in known:
                raise LogError(f"unknown read option {key!r}; known: {', '.join(sorted(known))}")
            if value is None or (isinstance(value, tuple | list | dict) and not value):
                continue
            values[key] = value
        return cls(**values)


def _strip_ms(column: str) -> str:
    return column[:-3] if column.endswith("_ms") and len(column) > 3 else column
