"""`Decision`: one thing the controller decided, with the evidence for it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Decision"]


@dataclass(frozen=True, slots=True)
class Decision:
    """An action at time `t_s`, the measured value, the threshold and the rule behind it."""

    t_s: float
    action: str
    """scale_up, scale_down, trim_logging, restore_logging, shed_load, stop_shedding, rollback"""
    metric: str
    value: float | None
    """The measured value (ms for latency, a ratio for error_rate / p99_vs_baseline)."""
    threshold: float | None
    """The trigger threshold (or the clear threshold, for a recovery action)."""
    rule: str
    reason: str
    dry_run: bool = False
    bound: float | None = None
    """The confidence bound compared with the threshold, when one was used."""
    bound_kind: str | None = None
    """What `bound` is, e.g. 'wilson_lower@0.975' or 'p99_lower@0.975'."""
    count: int | None = None
    """Requests in the window the decision was made on."""
    replicas: int | None = None
    """Desired replicas after a scale_up / scale_down."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form."""
        return asdict(self)
