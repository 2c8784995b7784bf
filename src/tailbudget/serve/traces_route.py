"""POST /v1/traces (OTLP/HTTP) for `serve --traces`; the receiver lives in serve/traces."""

from __future__ import annotations

import asyncio
import logging

from starlette.requests import Request
from starlette.responses import Response

from tailbudget.serve.http_answers import error as _error
from tailbudget.serve.http_answers import not_durable as _not_durable
from tailbudget.serve.http_answers import read_batch as _read_batch
from tailbudget.serve.traces.otlp_body import BadTraces
from tailbudget.serve.traces.receiver import TraceReceiver

__all__ = ["traces"]

log = logging.getLogger(__name__)


async def traces(request: Request) -> Response:
    """POST /v1/traces: the body limits and timeout of observations; 2xx once durable."""
    receiver: TraceReceiver | None = request.app.state.traces
    if receiver is None:
        return _error(404, "traces are not enabled; start serve with traces on")
    body = await _read_batch(request)
    if isinstance(body, Response):
        return body
    try:
        content, media = await asyncio.to_thread(
            receiver.receive,
            body,
            request.headers.get("content-type"),
            request.headers.get("content-encoding"),
            request.app.state.limits,
        )
    except BadTraces as exc:
        if exc.status == 503:  # OTLP exporters retry a 503, after Retry-After if given
            return _error(503, str(exc), **{"Retry-After": "1"})
        return _error(exc.status, str(exc))
    except OSError as exc:
        return _not_durable("the spans", exc)
    return Response(content, media_type=media)


async def trace_status(request: Request, body: dict[str, object]) -> None:
    """Adds `traces` and `culprits` to a status body when traces are enabled."""
    receiver: TraceReceiver | None = request.app.state.traces
    if receiver is not None:
        body.update(await asyncio.to_thread(receiver.status))
