"""Figures gathered by the passes over the log, handed to the hypothesis rules and ranking."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tailbudget.audit.report import ColdStart, ShapeRow, Snapshot, StageRow, Tail
from tailbudget.audit.shape import Covariate


@dataclass(frozen=True)
class Evidence:
    """Everything the rules may cite; every figure comes from the log. Built once, after
    the passes, and never changed."""

    snapshot: Snapshot
    stages: tuple[StageRow, ...]
    grids: Mapping[str, list[float]]
    """Per stage, the quantiles at stages.STAGE_QS."""
    tail: Tail
    shape: tuple[ShapeRow, ...]
    covariates: tuple[Covariate, ...]
    cold: ColdStart | None
    cold_stage_means: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """Per stage (mean in cold windows, mean outside), when events were given."""
    cold_total_means: tuple[float, float] | None = None
    timeline: tuple[Mapping[str, Any], ...] = ()
    names: tuple[str, ...] = ()
    """Stage names measured (incl. unattributed when derived), in timeline column order."""
    tokens_per_s: tuple[float, float] | None = None
    """(p5, p50) of output tokens per second of decode, when the log has both."""

    def stage(self, name: str) -> StageRow | None:
        """The stage row called `name`."""
        return next((s for s in self.stages if s.name == name), None)

    def delta_share(self, name: str) -> float:
        """The stage's share of the summed positive slow-fast deltas."""
        pos = sum(max(d.delta, 0.0) for d in self.tail.deltas)
        d = next((d.delta for d in self.tail.deltas if d.stage == name), 0.0)
        return max(d, 0.0) / pos if pos > 0 else 0.0
