"""The evaluation's heartbeat: when the last good evaluation ran, and why the last one failed.

A gate that says "healthy" when it could not judge is worse than no gate
(Argo Rollouts, Flagger and Kayenta all take missing data as inconclusive). So
the verdict is `unknown`, with the reason, when the last evaluation failed
(an exception, an upstream that did not answer in time or answered nonsense),
or when the last good one is older than `STALE_PERIODS` evaluation periods (the
evaluation thread is stuck, or nothing runs it). Failures are counted by kind
for `/metrics`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

__all__ = ["STALE_PERIODS", "Heartbeat"]

STALE_PERIODS = 2.0
"""A verdict older than this many evaluation periods is `unknown`."""


@dataclass
class Heartbeat:
    """Evaluation health, read and written under the runtime's lock."""

    period_s: float
    started_s: float
    last_good_s: float | None = None
    """When the last evaluation that judged fresh inputs finished (wall clock)."""
    failure: str | None = None
    """Why the last evaluation did not judge (None: it did)."""
    failure_kind: str | None = None
    errors: Counter[str] = field(default_factory=Counter)
    """Failed or overrun evaluations by kind (deadline, timeout, bad_answer, ...)."""
    scheduled: bool = False
    """True once something (the service's evaluator) runs evaluations on a schedule:
    only then does a missing evaluation make the verdict stale."""

    def good(self, now_s: float) -> None:
        """An evaluation judged fresh inputs at `now_s`."""
        self.last_good_s = now_s
        self.failure = self.failure_kind = None

    def failed(self, kind: str, reason: str) -> None:
        """An evaluation did not judge: count it, keep the reason for the verdict."""
        self.errors[kind] += 1
        self.failure, self.failure_kind = reason, kind

    def age_s(self, now_s: float) -> float:
        """Seconds since the last good evaluation (since the start when none yet)."""
        return max(0.0, now_s - (self.last_good_s or self.started_s))

    def unknown_because(self, now_s: float) -> str | None:
        """Why the verdict cannot stand now, or None when the last evaluation is good."""
        if self.failure is not None:
            return f"the last evaluation failed: {self.failure}"
        age = self.age_s(now_s)
        limit = STALE_PERIODS * self.period_s
        if self.scheduled and age > limit:
            return (
                f"no good evaluation for {age:.0f} s (more than {STALE_PERIODS:g} periods "
                f"of {self.period_s:g} s)"
            )
        return None

    def view(self, now_s: float) -> dict[str, object]:
        """The `evaluation` block of `/v1/status`."""
        return {
            "period_s": self.period_s,
            "last_good_s": self.last_good_s,
            "age_s": round(self.age_s(now_s), 3),
            "stale_after_s": STALE_PERIODS * self.period_s,
            "last_error": self.failure,
            "last_error_kind": self.failure_kind,
            "errors": dict(self.errors),
        }
