"""A small misbehaving Prometheus on loopback: answers instant queries the way it is told.

Modes: `ok` (p50/p95/p99 of 200/300/400 ms, 100 requests, no errors), `drip` (a
valid answer one byte a second), `overflow` (p99 of 1e306 s), `negative`
(-1e308), `list`, `string`, `data-string`, `null` (wrong shapes), `huge` (a
100 MB answer, streamed), `error` (HTTP 503 with Prometheus' error JSON).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests._net import free_port, serve_in_thread

_GOOD = {"0.5": "0.2", "0.95": "0.3", "0.99": "0.4"}


def _vector(value: str) -> dict[str, object]:
    return {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1.0, value]}]},
    }


def _figure(query: str, mode: str) -> str:
    if query.startswith("histogram_quantile("):
        q = query.split("(", 1)[1].split(",", 1)[0]
        if q == "0.99" and mode == "overflow":
            return "1e306"
        if q == "0.99" and mode == "negative":
            return "-1e308"
        return _GOOD.get(q, "0.3")
    return "0" if 'outcome="error"' in query else "100"


def _shape(mode: str, query: str) -> object:
    if mode == "list":
        return [1, 2, 3]
    if mode == "string":
        return "success"
    if mode == "data-string":
        return {"status": "success", "data": "vector"}
    if mode == "null":
        body = _vector("0")
        body["data"]["result"][0]["value"] = [1.0, None]  # type: ignore[index]
        return body
    return _vector(_figure(query, mode))


@dataclass
class FakePrometheus:
    """The fake's URL, the mode it answers in (change it at will), and how often asked."""

    url: str
    mode: str = "ok"
    queries: int = 0


def _app(fake: FakePrometheus) -> Starlette:
    async def query(request: Request) -> Response:
        fake.queries += 1
        mode = fake.mode
        promql = request.query_params.get("query", "")
        if mode == "error":
            body = {"status": "error", "errorType": "unavailable", "error": "tsdb is closing"}
            return Response(json.dumps(body), status_code=503, media_type="application/json")
        text = json.dumps(_shape(mode, promql)).encode()
        if mode == "drip":
            return StreamingResponse(_drip(text), media_type="application/json")
        if mode == "huge":
            return StreamingResponse(_huge(), media_type="application/json")
        return Response(text, media_type="application/json")

    return Starlette(routes=[Route("/api/v1/query", query, methods=["GET", "POST"])])


async def _drip(text: bytes) -> AsyncIterator[bytes]:
    for i in range(len(text)):
        yield text[i : i + 1]
        await asyncio.sleep(1.0)


async def _huge() -> AsyncIterator[bytes]:
    # 100 MB: a valid answer's head, then one endless label value.
    yield b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"x":"'
    chunk = b"a" * (1024 * 1024)
    for _ in range(100):
        yield chunk
    yield b'"},"value":[1,"0.3"]}]}}'


@contextmanager
def fake_prometheus(mode: str = "ok") -> Iterator[FakePrometheus]:
    """A fake Prometheus on a free loopback port while inside."""
    port = free_port()
    fake = FakePrometheus(f"http://127.0.0.1:{port}", mode)
    with serve_in_thread(_app(fake), port, "fake prometheus"):
        yield fake
