"""What an audit needs besides the log: the SLO, groups, events, baseline, catalog overrides."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TypedDict, Unpack

from tailbudget._units import PERCENTILES, quantile_of
from tailbudget.budget.classes import ClassSet
from tailbudget.budget.model import Budget, LLMSpec
from tailbudget.budget.objectives import Objective, Objectives, parse_objectives
from tailbudget.errors import TailbudgetError
from tailbudget.logs.table import LogTable


class AuditSettings(TypedDict, total=False):
    """AuditConfig's fields besides `objectives`, as `AuditConfig.of_e2e` takes them."""

    slow: str | float
    events: tuple[tuple[datetime, str], ...]
    cold_window_min: float
    baseline: LogTable | None
    stage_budgets: dict[str, dict[str, float]]
    llm: dict[str, LLMSpec]
    fixes: dict[str, dict[str, object]]
    service: str | None
    seed: int
    in_memory_rows: int
    progress: Callable[[str], None] | None
    classes: ClassSet | None


class AuditOverrides(AuditSettings, total=False):
    """What `AuditConfig.from_budget` takes over the budget's own: any field."""

    objectives: Objectives


@dataclass(frozen=True)
class AuditConfig:
    """Settings of one audit; `AuditConfig.from_budget` fills them from a budget file,
    `AuditConfig.of_e2e` from end-to-end targets alone."""

    objectives: Objectives
    """Every objective (e2e, ttft, tpot, itl, stages, goodput): the audit's one SLO;
    `slo` and `gated` are views of it."""
    slow: str | float = "p95"
    """Slow group: "p95" = [p95, p99] of total, "p99" = [p99, max], a number = [ms, max]."""
    events: tuple[tuple[datetime, str], ...] = ()
    """(UTC time, event) of scale-ups and deploys, for the cold-start check."""
    cold_window_min: float = 5.0
    baseline: LogTable | None = None
    stage_budgets: dict[str, dict[str, float]] = field(default_factory=dict)
    llm: dict[str, LLMSpec] = field(default_factory=dict)
    """LLM blocks of the budget by stage name (TTFT and tokens/s targets)."""
    fixes: dict[str, dict[str, object]] = field(default_factory=dict)
    """Overrides of the fix catalog: {fix: {hours, risk, reversible}}."""
    service: str | None = None
    """The service's name (the budget's `service:`), shown in every report title."""
    seed: int = 0
    in_memory_rows: int = 500_000
    """Logs up to this many rows get exact percentiles from the engine's own quantile (which
    holds every value in memory); larger ones from a histogram and a select (quantiles.py)."""
    progress: Callable[[str], None] | None = None
    """Called with a short label before each pass over the log (for a progress bar)."""
    classes: ClassSet | None = None
    """Objectives per class (budget `classes:`, `--class-by`): each class is measured on
    its own requests besides the whole service."""

    @classmethod
    def of_e2e(
        cls,
        slo: Mapping[str, float],
        gated: Iterable[str] = ("p99",),
        **settings: Unpack[AuditSettings],
    ) -> AuditConfig:
        """End-to-end p50/p95/p99 targets in ms (e.g. {"p95": 2800, "p99": 5200}), those in
        `gated` failing a CI gate (`--fail-on-breach`), as the audit's objectives."""
        return cls(objectives=e2e_objectives(slo, gated), **settings)

    @property
    def slo(self) -> dict[str, float]:
        """End-to-end p50/p95/p99 targets in ms (the report's `slo`)."""
        e2e = self.objectives.e2e()
        return {p: e2e[p] for p in PERCENTILES if p in e2e}

    @property
    def gated(self) -> tuple[str, ...]:
        """End-to-end percentiles whose breach fails a CI gate (`--fail-on-breach`)."""
        return self.objectives.gated_percentiles("e2e")

    def __post_init__(self) -> None:
        if not isinstance(self.objectives, Objectives):
            raise TailbudgetError(
                f"objectives must be Objectives (Objectives.coerce reads an SLO), "
                f"got {self.objectives!r}",
                param="objectives",
            )
        if not len(self.objectives):
            raise TailbudgetError(NONE_TO_AUDIT, param="slo")
        if isinstance(self.slow, str):
            if self.slow not in ("p95", "p99"):
                raise TailbudgetError(
                    f"slow must be p95, p99 or a number of ms, got {self.slow!r}", param="slow"
                )
            quantile_of(self.slow)
        elif not self.slow > 0:
            raise TailbudgetError(
                f"slow must be a positive number of ms, got {self.slow!r}", param="slow"
            )
        if self.in_memory_rows < 0:
            raise TailbudgetError(
                f"in_memory_rows must be >= 0, got {self.in_memory_rows!r}", param="in_memory_rows"
            )
        if not 0 < self.cold_window_min <= 24 * 60:
            raise TailbudgetError(
                f"cold_window_min must be in (0, 1440] minutes, got {self.cold_window_min!r}",
                param="cold_window_min",
            )

    @classmethod
    def from_budget(cls, budget: Budget, **overrides: Unpack[AuditOverrides]) -> AuditConfig:
        """SLO, gates, stage budgets, LLM blocks and fix overrides from a budget file;
        `overrides` (objectives among them) win."""
        stage_budgets: dict[str, dict[str, float]] = {}
        llm: dict[str, LLMSpec] = {}
        for _, stage in budget.stages():
            if stage.budget is not None:
                stage_budgets[stage.name] = stage.budget.given()
            if stage.llm is not None:
                llm[stage.name] = stage.llm
        config = cls(
            overrides.pop("objectives", budget.objectives),
            stage_budgets=stage_budgets,
            llm=llm,
            fixes=dict(budget.fixes),
            service=budget.service,
            classes=budget.class_set,
        )
        return replace(config, **overrides) if overrides else config


NONE_TO_AUDIT = (
    "slo: none to audit against; give slo as p99=MS (e.g. p95=2800,p99=5200) "
    "or a budget file with an slo: block"
)


def e2e_objectives(slo: Mapping[str, float], gated: Iterable[str] = ("p99",)) -> Objectives:
    """Objectives of end-to-end p50/p95/p99 targets in ms, those in `gated` gating."""
    if not slo:
        raise TailbudgetError(NONE_TO_AUDIT, param="slo")
    for name, value in slo.items():
        if name not in PERCENTILES:
            raise TailbudgetError(
                f"slo: a percentile must be one of p50, p95, p99, got {name!r}", param="slo"
            )
        if not value > 0:
            raise TailbudgetError(
                f"slo {name} must be a positive number of ms, got {value!r}", param="slo"
            )
    gates = set(gated)
    return Objectives(
        tuple(Objective("e2e", p, float(ms), gated=p in gates) for p, ms in slo.items())
    )


def parse_slo(text: str) -> dict[str, float]:
    """End-to-end p50/p95/p99 targets of an `--slo` string: 'p95=2800,p99=5200' -> {...}.

    The full grammar (ttft.p95=500, goodput=0.95, ...) is `parse_objectives`; this
    helper refuses what it cannot return rather than dropping it."""
    objectives = parse_objectives(text)
    out = objectives.e2e()
    other = [o.key for o in objectives if o.metric != "e2e" or o.percentile not in PERCENTILES]
    if other or objectives.goodput is not None or not out:
        what = other[0] if other else "goodput" if objectives.goodput is not None else text
        raise TailbudgetError(
            f"slo {what}: only p50, p95 and p99 of end-to-end latency fit here; "
            "read the full objectives with parse_objectives",
            param="slo",
        )
    return out
