"""Deadline propagation: parse the incoming header, send the remaining time downstream.

The header carries *remaining* milliseconds (like gRPC's `grpc-timeout`), not
an absolute time, so clock skew between hosts does not matter; each hop
subtracts the time it spent before calling the next.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from tailbudget.measure.request import (
    DEADLINE_HEADER,
    REQUEST_ID_HEADER,
    Request,
    current_request,
)

__all__ = [
    "DEADLINE_HEADER",
    "REQUEST_ID_HEADER",
    "outgoing_headers",
    "parse_deadline",
    "propagate_deadline",
    "propagate_deadline_async",
]

log = logging.getLogger("tailbudget.measure")


def parse_deadline(value: str | bytes | None) -> float | None:
    """Milliseconds from a header value; None (logged) when absent or not a positive number."""
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    try:
        ms = float(text.strip())
    except ValueError:
        log.warning("tailbudget: ignored %s header %r (not a number)", DEADLINE_HEADER, text)
        return None
    if not math.isfinite(ms):
        log.warning("tailbudget: ignored %s header %r (not finite)", DEADLINE_HEADER, text)
        return None
    # An expired deadline still counts: the request is already late, stages should degrade.
    return max(ms, 0.001)


def outgoing_headers(req: Request | None = None) -> dict[str, str]:
    """Headers for a downstream call: the remaining deadline and the request id."""
    if req is None:
        req = current_request()
        if req is None:
            return {}
    return req.headers()


def propagate_deadline(request: Any) -> None:
    """httpx request hook: `httpx.Client(event_hooks={"request": [propagate_deadline]})`."""
    try:
        for key, value in outgoing_headers().items():
            if key not in request.headers:
                request.headers[key] = value
    except Exception:
        log.exception("tailbudget: could not propagate the deadline header")


async def propagate_deadline_async(request: Any) -> None:
    """httpx.AsyncClient request hook; same as `propagate_deadline`."""
    propagate_deadline(request)
