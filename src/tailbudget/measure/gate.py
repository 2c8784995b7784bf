"""The admission protocol between the ASGI middleware and backpressure primitives.

Defined here, on the measure side, so the middleware needs nothing from the
control layer; rate limiters, load shedders and concurrency limits in
`tailbudget.control` implement `Gate`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Admission:
    """Whether a request may proceed; when not, the HTTP status and Retry-After to send."""

    allowed: bool
    status: int = 200
    """503 when shed, 429 when rate limited."""
    retry_after_s: float = 0.0
    reason: str = ""


ADMIT = Admission(True)
"""The admission every request gets when no gate is installed."""


@runtime_checkable
class Gate(Protocol):
    """Decides per request; must be cheap, thread-safe and never raise."""

    def try_acquire(self, priority: int = 0) -> Admission:
        """Admit or refuse a request; higher priority is shed last."""

    def release(self, admission: Admission, *, latency_s: float, ok: bool) -> None:
        """Report an admitted request's outcome (adaptive limits learn from it)."""
