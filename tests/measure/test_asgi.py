"""The ASGI middleware on a real FastAPI app, driven in-process through httpx."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from tailbudget import Recorder
from tailbudget.control.backpressure import ConcurrencyLimit, PriorityShedder, TokenBucket
from tailbudget.measure import DEADLINE_HEADER, current_request
from tailbudget.measure.asgi import TailbudgetMiddleware


def make_app(rec: Recorder, gate=None) -> FastAPI:
    app = FastAPI()
    app.add_middleware(TailbudgetMiddleware, recorder=rec, gate=gate)

    @app.get("/items/{item_id}")
    async def item(item_id: int, request: Request) -> dict:
        req = request.state.tailbudget
        assert current_request() is req
        async with req.stage("lookup"):
            await asyncio.sleep(0)
        return {"id": item_id, "remaining_ms": req.remaining_ms, "out": req.headers()}

    @app.get("/sync")
    def sync_endpoint() -> dict:
        req = current_request()  # threadpool endpoints see the request too
        with req.stage("cpu"):
            pass
        return {"ok": True}

    @app.get("/boom")
    async def boom() -> dict:
        raise RuntimeError("bad")

    @app.get("/unavailable")
    async def unavailable():
        from fastapi.responses import JSONResponse

        return JSONResponse({"x": 1}, status_code=503)

    @app.get("/stream")
    async def stream(request: Request):
        req = request.state.tailbudget

        async def tokens():
            for i in range(5):
                await asyncio.sleep(0)
                yield f"t{i} "

        async def body():
            async with req.stage("llm"):
                async for tok in req.stream(tokens(), model="m"):
                    yield tok

        return StreamingResponse(body(), media_type="text/plain")

    return app


async def _get(app, paths, headers=None):
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return [await client.get(p, headers=headers or {}) for p in paths]


def test_records_routes_status_errors_and_streams(tmp_path, registry, read_jsonl):
    rec = Recorder(sink=tmp_path / "r.jsonl", registry=registry)
    app = make_app(rec)
    paths = ["/items/1", "/items/2", "/sync", "/boom", "/unavailable", "/stream", "/nope"]
    responses = asyncio.run(_get(app, paths))
    assert [r.status_code for r in responses] == [200, 200, 200, 500, 503, 200, 404]
    assert responses[5].text == "t0 t1 t2 t3 t4 "
    rec.close()
    rows = read_jsonl(tmp_path / "r.jsonl")
    assert len(rows) == len(paths)
    by_route = {}
    for row in rows:
        by_route.setdefault(row["route"], []).append(row)
    assert len(by_route["/items/{item_id}"]) == 2
    assert all("lookup_ms" in r and r["status"] == 200 for r in by_route["/items/{item_id}"])
    assert "cpu_ms" in by_route["/sync"][0]
    boom = by_route["/boom"][0]
    assert boom["error"] is True and boom["error_type"] == "RuntimeError" and boom["status"] == 500
    assert by_route["/unavailable"][0]["error_type"] == "http_503"
    streamed = by_route["/stream"][0]
    assert streamed["output_tokens"] == 5 and streamed["llm_ms"] <= streamed["total_ms"]
    assert by_route["unmatched"][0]["status"] == 404 and by_route["unmatched"][0]["error"] is False


def test_deadline_header_is_honoured_and_forwarded(tmp_path, registry, read_jsonl):
    rec = Recorder(sink=tmp_path / "r.jsonl", registry=registry)
    app = make_app(rec)
    (resp,) = asyncio.run(
        _get(app, ["/items/3"], headers={DEADLINE_HEADER: "250", "x-request-id": "abc-1"})
    )
    body = resp.json()
    assert 0 < body["remaining_ms"] <= 250
    assert 0 <= float(body["out"][DEADLINE_HEADER]) <= 250
    assert body["out"]["x-request-id"] == "abc-1"
    rec.close()
    (row,) = read_jsonl(tmp_path / "r.jsonl")
    assert row["request_id"] == "abc-1"


@pytest.mark.parametrize(
    ("gate", "status", "reason"),
    [
        (TokenBucket(rate_per_s=0.001, burst=2), 429, "rate_limited"),
        (PriorityShedder(fraction=1.0, retry_after_s=2.5), 503, "shed"),
    ],
)
def test_refused_requests_get_retry_after(tmp_path, registry, read_jsonl, gate, status, reason):
    rec = Recorder(sink=tmp_path / "r.jsonl", registry=registry)
    app = make_app(rec, gate=gate)
    responses = asyncio.run(_get(app, ["/items/1"] * 4))
    refused = [r for r in responses if r.status_code == status]
    admitted = [r for r in responses if r.status_code == 200]
    assert len(refused) + len(admitted) == 4 and refused
    for r in refused:
        assert int(r.headers["retry-after"]) >= 1
        assert r.json()["error"] == reason
    rec.close()
    assert len(read_jsonl(tmp_path / "r.jsonl")) == len(admitted)
    assert registry.get_sample_value("tailbudget_shed_requests_total", {"reason": reason}) == len(
        refused
    )


def test_concurrency_limit_gets_its_slot_back(tmp_path, registry):
    gate = ConcurrencyLimit(initial=1, min_limit=1, max_limit=1)
    rec = Recorder(sink=tmp_path / "r.jsonl", registry=registry)
    app = make_app(rec, gate=gate)
    responses = asyncio.run(_get(app, ["/items/1", "/boom", "/items/2"]))
    assert [r.status_code for r in responses] == [200, 500, 200]  # sequential: never over 1
    assert gate.inflight == 0
    rec.close()
