"""In-process actions: log the decision, trim/restore logging, shed load, desired replicas."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from tailbudget.control.backpressure import PriorityShedder, TokenBucket
from tailbudget.errors import PolicyError
from tailbudget.serve.journal import DecisionLike

__all__ = ["LogAction", "LoggingLevelAction", "ReplicasAction", "ShedAction"]


class LogAction:
    """Log every decision with its value, threshold and rule (logger `tailbudget.decisions`)."""

    name = "log"

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger("tailbudget.decisions")

    def handles(self, action: str) -> bool:
        """Every action."""
        return True

    def execute(self, decision: DecisionLike, key: str) -> str:
        """Write one WARNING line."""
        self.logger.warning(
            "decision %s: %s=%s %s threshold=%s rule=%s id=%s",
            decision.action,
            decision.metric,
            decision.value,
            decision.reason,
            decision.threshold,
            decision.rule,
            key,
        )
        return "logged"


def _level(value: int | str) -> int:
    if isinstance(value, int):
        return value
    level = logging.getLevelName(value.upper())
    if not isinstance(level, int):
        raise PolicyError(
            f"logging level must be DEBUG, INFO, WARNING, ERROR or CRITICAL, got {value!r}"
        )
    return level


class LoggingLevelAction:
    """trim_logging raises the named loggers' levels; restore_logging puts the old ones back.

    Only raises a level (never lowers one that is already stricter), and
    remembers what it changed, so restore is exact and repeated trims are safe.
    """

    name = "logging"

    def __init__(
        self, loggers: Iterable[str] = ("",), trim_level: int | str = logging.WARNING
    ) -> None:
        self.loggers = tuple(loggers)
        self.trim_level = _level(trim_level)
        self._saved: dict[str, int] = {}
        self._lock = threading.Lock()

    def handles(self, action: str) -> bool:
        """trim_logging and restore_logging."""
        return action in ("trim_logging", "restore_logging")

    @property
    def trimmed(self) -> bool:
        """Whether a trim is in force."""
        return bool(self._saved)

    def execute(self, decision: DecisionLike, key: str) -> str:
        """Trim or restore."""
        with self._lock:
            if decision.action == "trim_logging":
                changed = []
                for name in self.loggers:
                    logger = logging.getLogger(name)
                    if name in self._saved or logger.getEffectiveLevel() >= self.trim_level:
                        continue
                    self._saved[name] = logger.level
                    logger.setLevel(self.trim_level)
                    changed.append(name or "root")
                level = logging.getLevelName(self.trim_level)
                return f"trimmed {', '.join(changed) or 'nothing'} to {level}"
            restored = []
            for name, level_no in self._saved.items():
                logging.getLogger(name).setLevel(level_no)
                restored.append(name or "root")
            self._saved.clear()
            return f"restored {', '.join(restored) or 'nothing'}"


class ShedAction:
    """shed_load sets a shed fraction (and an optional rate limit); stop_shedding clears them.

    Drives the backpressure gates of `tailbudget.control.backpressure` when
    given: `PriorityShedder.set_fraction` (lowest priority shed first; a shedder built
    with the budget's classes follows the decision instead, refusing the classes shed) and
    `TokenBucket.set_rate` (restored to its original rate on stop_shedding).
    The values are kept here too, for the service's status and metrics.
    """

    name = "shed"

    def __init__(
        self,
        *,
        fraction: float = 0.5,
        rate_per_s: float | None = None,
        shedder: PriorityShedder | None = None,
        limiter: TokenBucket | None = None,
    ) -> None:
        if not 0.0 < fraction <= 1.0:
            raise PolicyError(f"shed fraction must be in (0, 1], got {fraction}")
        if rate_per_s is not None and rate_per_s <= 0:
            raise PolicyError(f"shed rate_per_s must be > 0 or unset, got {rate_per_s}")
        self.fraction = fraction
        self.rate_per_s = rate_per_s
        self.shedder = shedder
        self.limiter = limiter
        self._normal_rate = None if limiter is None else (limiter.rate_per_s, limiter.burst)
        self.current_fraction = 0.0
        self.current_rate: float | None = None

    def restore(
        self, fraction: float, rate_per_s: float | None, shedding: tuple[str, ...] = ()
    ) -> None:
        """Resume a shedding state from a snapshot, and push it to the gates (a class
        shedder gets the classes shed, `shedding`, instead of the fraction)."""
        self.current_fraction, self.current_rate = fraction, rate_per_s
        if self.shedder is not None and self.shedder.classes:
            self.shedder.follow({"action": "shed_load", "shedding": list(shedding)})
        elif self.shedder is not None:
            self.shedder.set_fraction(fraction)
        if self.limiter is not None and rate_per_s is not None:
            self.limiter.set_rate(rate_per_s)

    def handles(self, action: str) -> bool:
        """shed_load and stop_shedding."""
        return action in ("shed_load", "stop_shedding")

    def execute(self, decision: DecisionLike, key: str) -> str:
        """Apply or clear shedding (a class's stop_shedding while other classes stay shed
        keeps the gates shedding: `shedding` lists the classes shed after it)."""
        if self.shedder is not None and self.shedder.classes:
            self.shedder.follow(decision)  # a class shedder refuses the classes shed
        still = getattr(decision, "shedding", ())
        if decision.action == "stop_shedding" and still:
            return f"still shedding {', '.join(still)}: shed fraction {self.current_fraction:g}"
        if decision.action == "shed_load":
            self.current_fraction, self.current_rate = self.fraction, self.rate_per_s
            if self.limiter is not None and self.rate_per_s is not None:
                self.limiter.set_rate(self.rate_per_s)
        else:
            self.current_fraction, self.current_rate = 0.0, None
            if self.limiter is not None and self._normal_rate is not None:
                self.limiter.set_rate(*self._normal_rate)
        if self.shedder is not None and not self.shedder.classes:
            self.shedder.set_fraction(self.current_fraction)
        rate = "unchanged" if self.current_rate is None else f"{self.current_rate:g}/s"
        return f"shed fraction {self.current_fraction:g}, rate limit {rate}"


class ReplicasAction:
    """Desired replicas by a step policy, bounded to [min, max]; KEDA/HPA read the gauge.

    The controller's decisions carry the count it chose (`Decision.replicas`);
    this executor adopts it, so a dry-run decision (never executed) leaves the
    exported count alone. Without a count it steps by `step` itself.
    """

    name = "replicas"

    def __init__(
        self, *, minimum: int = 1, maximum: int = 10, step: int = 1, initial: int | None = None
    ) -> None:
        if not 0 <= minimum <= maximum or maximum < 1:
            raise PolicyError(
                f"replicas need 0 <= min <= max, max >= 1, got min={minimum}, max={maximum}"
            )
        if step < 1:
            raise PolicyError(f"replicas step must be >= 1, got {step}")
        self.minimum, self.maximum, self.step = minimum, maximum, step
        self.desired = self._bound(minimum if initial is None else initial)

    def _bound(self, n: int) -> int:
        return max(self.minimum, min(self.maximum, n))

    def restore(self, desired: int) -> None:
        """Resume at a count from a snapshot (bounded, in case the policy changed)."""
        self.desired = self._bound(desired)

    def handles(self, action: str) -> bool:
        """scale_up and scale_down."""
        return action in ("scale_up", "scale_down")

    def execute(self, decision: DecisionLike, key: str) -> str:
        """Adopt the engine's count (`decision.replicas`) or step; always within bounds."""
        before = self.desired
        delta = self.step if decision.action == "scale_up" else -self.step
        decided = getattr(decision, "replicas", None)
        wanted = int(decided) if isinstance(decided, int) else before + delta
        self.desired = self._bound(wanted)
        bound = ""
        if self.desired != wanted:
            bound = f" (held at {'max' if wanted > self.desired else 'min'} {self.desired})"
        return f"desired replicas {before} -> {self.desired}{bound}"
