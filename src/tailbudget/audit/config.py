"""What an audit needs besides the log: the SLO, groups, events, baseline, catalog overrides."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tailbudget._units import PERCENTILES, quantile_of
from tailbudget.budget.model import Budget, LLMSpec
from tailbudget.errors import TailbudgetError
from tailbudget.logs.table import LogTable


@dataclass(frozen=True)
class AuditConfig:
    """Settings of one audit; `AuditConfig.from_budget` fills them from a budget file."""

    slo: dict[str, float]
    """Given SLO percentiles in ms, e.g. {"p95": 2800, "p99": 5200}."""
    gated: tuple[str, ...] = ("p99",)
    """Percentiles whose breach fails a CI gate (`--fail-on-breach`)."""
    slow: str | float = "p95"
    """Slow group: "p95" = [p95, p99] of total, "p99" = [p99, max], a number = [ms, max]."""
    events: tuple[tuple[datetime, str], ...] = ()
    """(UTC time, event) of scale-ups and deploys, for the cold-start check."""
    cold_window_min: float = 5.0
    baseline: LogTable | None = None
    stage_budgets: dict[str, dict[str, float]] = field(default_factory=dict)
    llm: dict[str, LLMSpec] = field(default_factory=dict)
    """LLM blocks of the budget by stage name (TTFT and tokens/s targets)."""
    fixes: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Overrides of the fix catalog: {fix: {hours, risk, reversible}}."""
    service: str | None = None
    """The service's name (the budget's `service:`), shown in every report title."""
    seed: int = 0
    progress: Callable[[str], None] | None = None
    """Called with a short label before each pass over the log (for a progress bar)."""

    def __post_init__(self) -> None:
        if not self.slo:
            raise TailbudgetError(
                "no SLO to audit against: give --slo p99=MS (e.g. --slo p95=2800,p99=5200) "
                "or --budget FILE with an slo: block"
            )
        for name, value in self.slo.items():
            if name not in PERCENTILES:
                raise TailbudgetError(f"SLO percentile must be one of p50, p95, p99, got {name!r}")
            if not value > 0:
                raise TailbudgetError(f"SLO {name} must be a positive number of ms, got {value!r}")
        if isinstance(self.slow, str):
            if self.slow not in ("p95", "p99"):
                raise TailbudgetError(
                    f"--slow must be p95, p99 or a number of ms, got {self.slow!r}"
                )
            quantile_of(self.slow)
        elif not self.slow > 0:
            raise TailbudgetError(f"--slow must be a positive number of ms, got {self.slow!r}")
        if not 0 < self.cold_window_min <= 24 * 60:
            raise TailbudgetError(
                f"--cold-window-min must be in (0, 1440] minutes, got {self.cold_window_min!r}"
            )

    @classmethod
    def from_budget(cls, budget: Budget, **overrides: Any) -> AuditConfig:
        """SLO, gates, stage budgets, LLM blocks and fix overrides from a budget file."""
        stage_budgets: dict[str, dict[str, float]] = {}
        llm: dict[str, LLMSpec] = {}
        for _, stage in budget.stages():
            if stage.budget is not None:
                stage_budgets[stage.name] = stage.budget.given()
            if stage.llm is not None:
                llm[stage.name] = stage.llm
        values: dict[str, Any] = {
            "slo": budget.slo.given(),
            "gated": budget.gated,
            "stage_budgets": stage_budgets,
            "llm": llm,
            "fixes": dict(budget.fixes),
            "service": budget.service,
        }
        values.update(overrides)
        return cls(**values)


def parse_slo(text: str) -> dict[str, float]:
    """'p50=1300,p95=2800,p99=5200' -> {"p50": 1300.0, ...}."""
    out: dict[str, float] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in PERCENTILES:
            raise TailbudgetError(
                f"--slo takes p50=MS,p95=MS,p99=MS (any of them), got {part.strip()!r}"
            )
        try:
            ms = float(value)
        except ValueError:
            raise TailbudgetError(
                f"--slo {name} must be a number of ms, got {value.strip()!r}"
            ) from None
        if not ms > 0 or ms != ms:
            raise TailbudgetError(
                f"--slo {name} must be a positive number of ms, got {value.strip()!r}"
            )
        out[name] = ms
    if not out:
        raise TailbudgetError("--slo is empty: give e.g. --slo p95=2800,p99=5200")
    return {p: out[p] for p in PERCENTILES if p in out}
