"""`tailbudget serve` per class on loopback (a real uvicorn process): labelled observations
and OTLP traces whose root span carries the class; premium's own breach sheds batch (the
lowest priority) live, the shed survives kill -9, and premium's recovery restores it."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tailbudget.budget import parse_budget
from tailbudget.control.backpressure import PriorityShedder
from tests._net import free_port, serve_in_thread
from tests.classes.test_serve_class_shedding import BUDGET
from tests.integration.test_serve import TOKEN, Server

pytestmark = pytest.mark.integration


def _until(srv: Server, ok: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
    """Poll the status until `ok` holds (posting one second of traffic each turn)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = srv.status()
        if ok(status):
            return status
        time.sleep(0.2)
    pytest.fail(f"{what}: not within 60 s; last status {status.get('classes')}")


def _traffic(srv: Server, premium_ms: float) -> None:
    now = time.time()
    items: list[dict[str, object]] = [
        {"ts": now, "total_ms": premium_ms, "class": "premium"} for _ in range(10)
    ]
    items += [{"ts": now, "total_ms": 200.0, "class": c} for c in ("standard", "batch", "x")] * 4
    assert srv.post(items).status_code == 200


def _otlp(srv: Server, tier: str, ms: float, k: int) -> None:
    t0 = time.time_ns()
    span = {
        "traceId": f"{k:032x}",
        "spanId": "01" * 8,
        "name": "root",
        "kind": 2,
        "startTimeUnixNano": str(t0),
        "endTimeUnixNano": str(t0 + int(ms * 1e6)),
        "attributes": [{"key": "tier", "value": {"stringValue": tier}}],
    }
    body = orjson.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    got = httpx.post(f"{srv.url}/v1/traces", content=body, headers=headers, timeout=10)
    assert got.status_code == 200, got.text


def _start(root: Path) -> Server:
    token, budget = root / "token", root / "budget.yaml"
    token.write_text(TOKEN + "\n")
    budget.write_text(BUDGET)
    extra = ("--traces", "--trace-grace", "0s")
    return Server(root / "state", token_file=token, budget=budget, extra=extra).start()


def _shed(status: dict[str, Any], name: str) -> bool:
    return bool(status.get("classes", {}).get(name, {}).get("shed"))


def _pump(srv: Server, premium_ms: float, ok: Callable[[dict[str, Any]], bool], what: str):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        _traffic(srv, premium_ms)
        status = srv.status()
        if ok(status):
            return status
        time.sleep(0.3)
    pytest.fail(f"{what}: not within 60 s; last classes {srv.status().get('classes')}")


def test_premium_breach_sheds_batch_live_and_the_shed_survives_kill_9(tmp_path) -> None:
    srv = _start(tmp_path)
    try:
        for k in range(1, 4):  # a trace's class is its root span's `tier` attribute
            _otlp(srv, "premium", 50.0, k)
        _until(
            srv,
            lambda s: s["classes"].get("premium", {}).get("observations_total", 0) >= 3,
            "traces",
        )
        status = _pump(srv, 1000.0, lambda s: _shed(s, "batch"), "premium's breach sheds")
        assert not _shed(status, "standard") and not _shed(status, "premium")
        assert status["classes"]["other"]["observations_total"] > 0  # `x` folds into other
        fired = [d for d in status["last_decisions"] if d.get("action") == "shed_load"]
        assert fired[-1]["sheds"] == "batch" and fired[-1]["trigger"] == "premium"
        metrics = httpx.get(f"{srv.url}/metrics", timeout=10).text
        assert 'tailbudget_class_shed{class="batch"} 1.0' in metrics
        assert 'tailbudget_class_shed{class="standard"} 0.0' in metrics
        srv.stop(signal.SIGKILL)
        srv = Server(srv.state_dir, token_file=srv.token_file, budget=srv.budget, extra=srv.extra)
        srv.start()
        status = srv.status()
        assert _shed(status, "batch"), status["classes"]
        assert status["classes"]["premium"]["rules"]["shed_p99"]["engaged"] is True
        _pump(srv, 100.0, lambda s: not _shed(s, "batch"), "premium's recovery restores batch")
        stops = [d for d in srv.status()["last_decisions"] if d.get("action") == "stop_shedding"]
        assert stops[-1]["sheds"] == "batch"
    finally:
        srv.stop()


def _follows(shedder: PriorityShedder, shedding: tuple[str, ...], what: str) -> None:
    deadline = time.monotonic() + 60
    while shedder.shedding != shedding and time.monotonic() < deadline:
        time.sleep(0.1)  # the webhook runs after the decision is journaled
    assert shedder.shedding == shedding, what


def test_an_in_process_shedder_follows_serves_webhook_by_class(tmp_path) -> None:
    shedder = PriorityShedder(classes=parse_budget(BUDGET))

    async def hook(request: Request) -> JSONResponse:
        shedder.follow(orjson.loads(await request.body()))
        return JSONResponse({"ok": True})

    port = free_port()
    receiver = Starlette(routes=[Route("/hook", hook, methods=["POST"])])
    actions = tmp_path / "actions.yaml"
    actions.write_text(
        f"webhooks:\n  - {{url: 'http://127.0.0.1:{port}/hook', "
        "actions: [shed_load, stop_shedding], backoff_s: 0.1}\n"
    )
    token, budget = tmp_path / "token", tmp_path / "budget.yaml"
    token.write_text(TOKEN + "\n")
    budget.write_text(BUDGET)
    with serve_in_thread(receiver, port, "webhook receiver"):
        srv = Server(tmp_path / "state", token_file=token, budget=budget, actions=actions)
        srv.start()
        try:
            _pump(srv, 1000.0, lambda s: _shed(s, "batch"), "premium's breach sheds")
            _follows(shedder, ("batch",), "the shed_load webhook")
            assert not shedder.admit("batch").allowed
            assert shedder.admit("premium").allowed and shedder.admit("x").allowed
            _pump(srv, 100.0, lambda s: not _shed(s, "batch"), "premium recovers")
            _follows(shedder, (), "the stop_shedding webhook")
            assert shedder.admit("batch").allowed
        finally:
            srv.stop()
