"""The HTTP surface of `tailbudget serve` (Starlette).

- `POST /v1/observations`  JSON array or NDJSON; bearer token when configured;
  > 1 MiB -> 413 (counted while streaming); malformed -> 400; 200 only once durable;
  a body not received within `BODY_TIMEOUT_S` -> 408.
- `GET /metrics`           Prometheus text, from a registry of its own.
- `GET /v1/status`         JSON status.
- `GET /v1/verdict`        healthy | rollback | unknown. For Flagger's webhooks
  (which fail on non-2xx): `?mode=flagger` answers 503 on rollback only (a rollout
  hook: unknown never counts as a failed check), `?mode=flagger-promotion` 503
  unless healthy (a confirm-promotion hook: promotion waits for evidence).
- `POST /v1/verdict/clear` {"reason": "..."}: disengages the rollback rules (after the
  rollback is done and the cause fixed); journaled; bearer token when configured.
- `POST /v1/baseline`      {"p99_ms": ...} or {"baselines": {"ttft.p99": ms, "goodput": share}}
                            (`baseline_body`); {"traces": true}: the window's traces become the
                            culprits' baseline; bearer token when configured.
- `POST /v1/model/refit`   refit the model policy's model (serve --model / --fit).
- `POST /v1/traces`        OTLP/HTTP traces (`serve --traces`; serve/traces_route.py).

The bearer token is checked by one middleware for every POST, so no handler
can forget it. A change that cannot be made durable (the snapshot cannot be
written, the disk is full) answers 503 and is not acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tailbudget.errors import TailbudgetError
from tailbudget.serve.baseline_body import EXAMPLE, BadBaseline, parse_baseline_body
from tailbudget.serve.batch import BadBatch
from tailbudget.serve.http_answers import BODY_TIMEOUT_S, JSONResponse
from tailbudget.serve.http_answers import error as _error
from tailbudget.serve.http_answers import not_durable as _not_durable
from tailbudget.serve.http_answers import read_batch as _read_batch
from tailbudget.serve.http_answers import read_json as _read_json
from tailbudget.serve.ingest import parse_observations
from tailbudget.serve.limits import MAX_BODY, BodyLimits, TooLarge
from tailbudget.serve.metrics import make_registry
from tailbudget.serve.own_time import own_times
from tailbudget.serve.runtime import Runtime
from tailbudget.serve.traces.metrics import TracesCollector
from tailbudget.serve.traces.receiver import TraceOptions, TraceReceiver
from tailbudget.serve.traces_route import trace_status, traces

__all__ = ["BODY_TIMEOUT_S", "MAX_BODY", "create_app"]


log = logging.getLogger(__name__)

# Verdicts answered with 503 per `?mode=` of GET /v1/verdict (None: no mode, always 200).
_VERDICT_MODES: dict[str | None, frozenset[str]] = {
    None: frozenset(),
    "flagger": frozenset({"rollback"}),
    "flagger-promotion": frozenset({"rollback", "unknown"}),
}


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


class _BearerAuth(BaseHTTPMiddleware):
    """Every POST carries the bearer token (when one is configured); reads stay open."""

    def __init__(self, app: Any, token: str | None) -> None:
        super().__init__(app)
        self.expected = token.encode() if token else None

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        if self.expected is None or request.method != "POST":
            return await call_next(request)
        if request.url.path == "/v1/verdict":  # Flagger's webhook POST reads the verdict
            return await call_next(request)
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            return _error(
                401,
                "missing bearer token (Authorization: Bearer <token>)",
                **{"WWW-Authenticate": 'Bearer realm="tailbudget"'},
            )
        if not hmac.compare_digest(given.strip().encode(), self.expected):
            return _error(403, "wrong bearer token")
        return await call_next(request)


def _ingest(runtime: Runtime, body: bytes, content_type: str | None, limits: BodyLimits) -> int:
    # Parsing and the write-ahead-log fsync run off the event loop; the 200 is
    # sent only after the fsync, so an acknowledged batch survives kill -9.
    batch = parse_observations(body, now_s=time.time(), content_type=content_type, limits=limits)
    # a caller's reported time holds its calls; its slice is its own time (`calls:`)
    return runtime.ingest(own_times(batch, dict(runtime.config.calls)))


async def observations(request: Request) -> Response:
    """POST /v1/observations."""
    body = await _read_batch(request)
    if isinstance(body, Response):
        return body
    try:
        accepted = await asyncio.to_thread(
            _ingest,
            _runtime(request),
            body,
            request.headers.get("content-type"),
            request.app.state.limits,
        )
    except TooLarge as exc:
        return _error(413, str(exc))
    except BadBatch as exc:
        return _error(400, str(exc))
    except OSError as exc:  # disk full, I/O error: not durable, so not accepted
        return _not_durable("the batch", exc)
    return JSONResponse({"accepted": accepted})


async def metrics(request: Request) -> Response:
    """GET /metrics."""
    registry: CollectorRegistry = request.app.state.registry
    text = await asyncio.to_thread(generate_latest, registry)
    return Response(text, media_type=CONTENT_TYPE_LATEST)


async def status(request: Request) -> Response:
    """GET /v1/status."""
    body = await asyncio.to_thread(_runtime(request).status)
    await trace_status(request, body)
    return JSONResponse(body)


async def verdict(request: Request) -> Response:
    """GET (or Flagger's POST) /v1/verdict."""
    mode = request.query_params.get("mode")
    if mode not in _VERDICT_MODES:
        return _error(400, f"mode must be one of flagger, flagger-promotion; got {mode!r}")
    body = await asyncio.to_thread(_runtime(request).verdict)
    failing = _VERDICT_MODES[mode]
    return JSONResponse(body, status_code=503 if body["verdict"] in failing else 200)


async def clear_verdict(request: Request) -> Response:
    """POST /v1/verdict/clear."""
    value = await _read_json(request, '{"reason": "rolled back, fix deployed"}')
    if isinstance(value, Response):
        return value
    reason = value.get("reason") if isinstance(value, dict) else None
    if not isinstance(reason, str) or not reason.strip() or len(reason) > 500:
        return _error(
            400,
            'say why in reason (1 to 500 characters), e.g. {"reason": "rolled back, fix deployed"}',
        )
    try:
        rules = await asyncio.to_thread(_runtime(request).clear_verdict, reason.strip())
    except OSError as exc:
        return _not_durable("the clear (it is journaled and in effect until a restart)", exc)
    return JSONResponse({"cleared": rules, "verdict": _runtime(request).verdict()["verdict"]})


async def baseline(request: Request) -> Response:
    """POST /v1/baseline."""
    value = await _read_json(request, EXAMPLE)
    if isinstance(value, Response):
        return value
    if value == {"traces": True} and request.app.state.traces is not None:
        try:
            n = await asyncio.to_thread(request.app.state.traces.set_baseline)
        except OSError as exc:
            return _not_durable("the baseline", exc)
        return JSONResponse({"baseline_traces": n})
    runtime = _runtime(request)
    try:
        with runtime.lock:
            stages = {*runtime.policy.series, *runtime.stage_observations}
            kept = set(runtime.controller.baselines)
        wanted = parse_baseline_body(value, stages, kept)
    except BadBaseline as exc:
        return _error(400, str(exc))
    try:
        await asyncio.to_thread(runtime.set_baselines, wanted)
    except OSError as exc:
        return _not_durable("the baseline", exc)
    body = {"baseline_p99_ms": wanted.pop("p99", None), "baselines": wanted}
    return JSONResponse({k: v for k, v in body.items() if v})


async def model_refit(request: Request) -> Response:
    """POST /v1/model/refit: refit the model policy's model (serve --model / --fit)."""
    runtime = _runtime(request)
    try:
        how = await asyncio.to_thread(runtime.refit_model)
    except TailbudgetError as exc:
        return _error(409, str(exc))
    model = runtime.model
    fitted = None if model is None else model.fitted_at
    return JSONResponse({"refit": how, "fitted_at": fitted})


async def _evaluator(runtime: Runtime) -> None:
    # A fixed schedule (not sleep-after-work), so a slow evaluation does not drift
    # the cadence the rules' `for` spans are counted in. Each evaluation has one
    # period to finish: a thread cannot be stopped, so one that overruns is left to
    # finish while the verdict says unknown, and no second one starts beside it.
    period = runtime.policy.evaluate_every_s
    loop = asyncio.get_running_loop()
    due = loop.time() + period
    running: asyncio.Future[Any] | None = None
    started = 0.0
    runtime.heartbeat.scheduled = True
    while True:
        await asyncio.sleep(max(0.0, due - loop.time()))
        due = max(due + period, loop.time())
        if running is not None and not running.done():
            runtime.overran(loop.time() - started, period)
            continue
        started = loop.time()
        running = asyncio.ensure_future(asyncio.to_thread(runtime.evaluate))
        done, _ = await asyncio.wait({running}, timeout=period)
        if not done:
            runtime.overran(loop.time() - started, period)


@contextlib.asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    runtime: Runtime = app.state.runtime
    task = asyncio.create_task(_evaluator(runtime)) if app.state.evaluate else None
    try:
        yield
    finally:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if app.state.traces is not None:
            await asyncio.to_thread(app.state.traces.close)
        await asyncio.to_thread(runtime.close)


_ROUTES = [
    Route("/v1/observations", observations, methods=["POST"]),
    Route("/metrics", metrics, methods=["GET"]),
    Route("/v1/status", status, methods=["GET"]),
    # Flagger calls its webhooks with POST (a JSON body we do not need).
    Route("/v1/verdict", verdict, methods=["GET", "POST"]),
    Route("/v1/verdict/clear", clear_verdict, methods=["POST"]),
    Route("/v1/baseline", baseline, methods=["POST"]),
    Route("/v1/model/refit", model_refit, methods=["POST"]),
    Route("/v1/traces", traces, methods=["POST"]),
]


def create_app(
    runtime: Runtime,
    *,
    token: str | None = None,
    evaluate: bool = True,
    traces: TraceOptions | None = None,
    limits: BodyLimits | None = None,
) -> Starlette:
    """The ASGI app over a runtime; `evaluate` runs the periodic policy evaluation task;
    `traces` enables POST /v1/traces (OTLP/HTTP); `limits` bounds what bodies decode to
    (`serve --max-decoded-bytes`)."""
    app = Starlette(
        routes=_ROUTES,
        middleware=[Middleware(_BearerAuth, token=token)],
        lifespan=_lifespan,
    )
    app.state.runtime = runtime
    app.state.registry = make_registry(runtime)
    app.state.evaluate = evaluate
    app.state.traces = None
    if traces is not None:
        app.state.traces = TraceReceiver(runtime, traces)
        app.state.registry.register(TracesCollector(app.state.traces))
    app.state.limits = limits or BodyLimits()
    return app
