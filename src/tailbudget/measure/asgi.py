"""ASGI middleware (Starlette, FastAPI): record every request, honour deadlines, admit via a Gate.

Each HTTP request is recorded with its route template as cohort (`route`),
`method` and `status`; a 5xx answer or an exception marks it as an error.
The incoming deadline header tightens the request's deadline and is forwarded
to outgoing httpx calls made with `propagate_deadline` hooks. Handlers reach
the request through `request.state.tailbudget` or `current_request()`.
A refused admission answers 503/429 with Retry-After and is counted in
`tailbudget_shed_requests_total`, not recorded as a served request.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, MutableMapping
from time import perf_counter
from typing import TYPE_CHECKING, Any

from tailbudget.measure.deadline import DEADLINE_HEADER, REQUEST_ID_HEADER, parse_deadline
from tailbudget.measure.gate import ADMIT, Admission, Gate
from tailbudget.measure.prometheus import request_metrics
from tailbudget.measure.recorder import Recorder

if TYPE_CHECKING:
    from prometheus_client import Counter

log = logging.getLogger("tailbudget.measure")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_DEADLINE = DEADLINE_HEADER.encode()
_REQUEST_ID = REQUEST_ID_HEADER.encode()
_SHED_REASONS = {"shed", "rate_limited", "concurrency"}


def route_of(scope: Scope) -> str:
    """The matched route template (`/items/{id}`), else the endpoint name, else `unmatched`."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    endpoint = scope.get("endpoint")
    if endpoint is not None:
        return str(getattr(endpoint, "__name__", endpoint))
    return "unmatched"


class TailbudgetMiddleware:
    """`app.add_middleware(TailbudgetMiddleware, recorder=rec, gate=shedder)`."""

    def __init__(
        self,
        app: ASGIApp,
        recorder: Recorder,
        gate: Gate | None = None,
        *,
        priority: Callable[[Scope], int] | None = None,
    ) -> None:
        self.app = app
        self.recorder = recorder
        self.gate = gate
        self.priority = priority
        self.refused = 0
        self._shed: Counter | None = None

    # One frame per request on purpose: the middleware is on every request's path.
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # noqa: PLR0915
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        deadline_raw: bytes | None = None
        request_id: str | None = None
        for key, value in scope.get("headers", ()):
            if key == _DEADLINE:
                deadline_raw = value
            elif key == _REQUEST_ID:
                request_id = value.decode("latin-1")[:128]
        admission = self._admit(scope)
        if not admission.allowed:
            await self._refuse(send, admission)
            return
        status = 500
        started = False

        async def send_status(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status = int(message["status"])
                started = True
            await send(message)

        req = self.recorder.request(
            request_id=request_id,
            deadline_ms=parse_deadline(deadline_raw),
            method=str(scope.get("method", "")),
        )
        scope.setdefault("state", {})["tailbudget"] = req
        t0 = perf_counter()
        ok = False
        try:
            with req:
                try:
                    await self.app(scope, receive, send_status)
                finally:
                    req.fields["route"] = route_of(scope)
                    req.fields["status"] = status if started else 500
                    if started and status >= 500:
                        req.fail(f"http_{status}")
            ok = status < 500
        finally:
            if self.gate is not None:
                try:
                    self.gate.release(admission, latency_s=perf_counter() - t0, ok=ok)
                except Exception:
                    log.exception("tailbudget: gate.release failed")

    def _admit(self, scope: Scope) -> Admission:
        if self.gate is None:
            return ADMIT
        try:
            prio = self.priority(scope) if self.priority is not None else 0
            return self.gate.try_acquire(prio)
        except Exception:
            log.exception("tailbudget: gate failed; request admitted")
            return ADMIT

    async def _refuse(self, send: Send, admission: Admission) -> None:
        self.refused += 1
        status = admission.status if admission.status in (429, 503) else 503
        reason = admission.reason
        if reason not in _SHED_REASONS:
            if "concurrency" in reason:
                reason = "concurrency"
            else:
                reason = "rate_limited" if status == 429 else "shed"
        try:
            if self._shed is None:
                self._shed = request_metrics(self.recorder.registry).shed
            self._shed.labels(reason=reason).inc()
        except Exception:
            log.exception("tailbudget: could not count a refused request")
        retry = str(max(1, math.ceil(admission.retry_after_s)))
        body = f'{{"error":"{reason}","retry_after_s":{retry}}}'.encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"retry-after", retry.encode()),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
