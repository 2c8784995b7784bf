"""FastAPI under a real uvicorn on loopback, instrumented, driven by httpx; the
Parquet it writes has every request and shows the planted slow stage as the tail driver.

The tail driver is computed here with a DuckDB query (slow = total >= p95 vs
the rest, mean per stage), the audit's slow-vs-fast definition; when
`tailbudget.audit` is importable (after the branches merge) the real audit is
run on the same file as well.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.integration

N = 2000
CONCURRENCY = 8
SLOW_EVERY = 12  # 1 request in 12 (8.3%) is slow in retrieval: the whole p95+ tail
STAGES = ("embedding", "retrieval", "llm")


APP = """
import asyncio, os, sys

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from prometheus_client import CollectorRegistry
import uvicorn

from tailbudget import Recorder
from tailbudget.measure import DEADLINE_HEADER, propagate_deadline_async
from tailbudget.measure.asgi import TailbudgetMiddleware

# No explicit close: the atexit hook must flush the Parquet when uvicorn exits.
rec = Recorder(sink=sys.argv[1], registry=CollectorRegistry(), service="chat")
app = FastAPI()
app.add_middleware(TailbudgetMiddleware, recorder=rec)
state = {}


@app.get("/chat")
async def chat(request: Request, i: int, slow: int = 0):
    req = request.state.tailbudget
    req.set(seq_len=100 + i % 50)
    async with req.stage("embedding"):
        await asyncio.sleep(0)
    async with req.stage("retrieval"):
        await asyncio.sleep(0.25 if slow else 0.001)

    async def tokens():
        for k in range(5):
            await asyncio.sleep(0)
            yield f"tok{k} "

    async def body():
        async with req.stage("llm"):
            async for tok in req.stream(tokens(), model="fake-llm"):
                yield tok

    return StreamingResponse(body(), media_type="text/plain")


@app.get("/proxy")
async def proxy(request: Request):
    client = state.get("client")
    if client is None:
        client = state["client"] = httpx.AsyncClient(
            event_hooks={"request": [propagate_deadline_async]}
        )
    async with request.state.tailbudget.stage("downstream"):
        r = await client.get(f"http://127.0.0.1:{request.url.port}/echo")
    return r.json()


@app.get("/echo")
async def echo(request: Request):
    return {
        "deadline": request.headers.get(DEADLINE_HEADER),
        "remaining_ms": request.state.tailbudget.remaining_ms,
    }


uvicorn.run(app, fd=int(sys.argv[2]), log_level="warning", access_log=False, lifespan="off")
"""


class Server:
    """The app in its own process (its own GIL), on a loopback socket we bind."""

    def __init__(self, parquet: Path, workdir: Path) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        script = workdir / "app.py"
        script.write_text(APP)
        src = Path(__file__).resolve().parents[2] / "src"
        env = {**os.environ, "PYTHONPATH": str(src)}
        self.proc = subprocess.Popen(
            [sys.executable, str(script), str(parquet), str(self.sock.fileno())],
            pass_fds=[self.sock.fileno()],
            env=env,
        )

    def __enter__(self) -> Server:
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, "the app exited early"
            assert time.monotonic() < deadline, "uvicorn did not start"
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/echo", timeout=1)
                return self
            except httpx.HTTPError:
                time.sleep(0.1)

    def __exit__(self, *exc) -> None:
        self.proc.send_signal(signal.SIGINT)  # graceful: uvicorn drains, atexit flushes
        try:
            self.proc.wait(60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.sock.close()


async def _drive(port: int) -> tuple[list[int], list[str], list[dict]]:
    base = f"http://127.0.0.1:{port}"
    statuses: list[int] = []
    bodies: list[str] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(N):
        queue.put_nowait(i)
    limits = httpx.Limits(max_connections=CONCURRENCY)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as client:

        async def worker() -> None:
            while not queue.empty():
                i = queue.get_nowait()
                slow = int(i % SLOW_EVERY == 0)
                async with client.stream("GET", "/chat", params={"i": i, "slow": slow}) as r:
                    text = "".join([chunk async for chunk in r.aiter_text()])
                statuses.append(r.status_code)
                bodies.append(text)

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        proxied = [
            (await client.get("/proxy", headers={"x-tailbudget-deadline-ms": "400"})).json()
            for _ in range(3)
        ]
    return statuses, bodies, proxied


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> tuple[Path, list[dict]]:
    work = tmp_path_factory.mktemp("asgi")
    path = work / "requests.parquet"
    with Server(path, work) as server:
        statuses, bodies, proxied = asyncio.run(_drive(server.port))
    assert server.proc.returncode == 0
    assert statuses == [200] * N
    assert set(bodies) == {"tok0 tok1 tok2 tok3 tok4 "}
    return path, proxied


def test_every_request_is_in_the_parquet(served):
    import duckdb

    path, _ = served
    con = duckdb.connect()
    chats, streamed, ids = con.execute(
        f"""SELECT count(*), count(*) FILTER (output_tokens = 5), count(DISTINCT request_id)
            FROM read_parquet('{path}') WHERE route = '/chat'"""
    ).fetchone()
    assert (chats, streamed, ids) == (N, N, N)
    # Each proxied request's downstream call carried its request id (and deadline).
    proxies, echoed = con.execute(
        f"""WITH t AS (SELECT * FROM read_parquet('{path}'))
            SELECT count(*), count(*) FILTER (request_id IN
                (SELECT request_id FROM t WHERE route = '/echo'))
            FROM t WHERE route = '/proxy'"""
    ).fetchone()
    assert (proxies, echoed) == (3, 3)
    (bad,) = con.execute(
        f"""SELECT count(*) FROM read_parquet('{path}') WHERE route = '/chat' AND NOT (
              embedding_ms >= 0 AND retrieval_ms > 0 AND llm_ms > 0 AND ttft_ms > 0
              AND embedding_ms + retrieval_ms + llm_ms <= total_ms AND status = 200
              AND NOT error AND seq_len BETWEEN 100 AND 149)"""
    ).fetchone()
    assert bad == 0


def test_planted_slow_stage_is_the_tail_driver(served):
    import duckdb

    path, _ = served
    con = duckdb.connect()
    deltas = dict(
        con.execute(
            f"""WITH t AS (SELECT * FROM read_parquet('{path}') WHERE route = '/chat'),
                     q AS (SELECT quantile_cont(total_ms, 0.95) AS p95 FROM t)
                SELECT stage, avg(v) FILTER (total_ms >= p95) - avg(v) FILTER (total_ms < p95)
                FROM (UNPIVOT t ON {", ".join(f"{s}_ms" for s in STAGES)}
                      INTO NAME stage VALUE v), q
                GROUP BY stage"""
        ).fetchall()
    )
    driver = max(deltas, key=lambda s: deltas[s])
    assert driver == "retrieval_ms", deltas
    assert deltas["retrieval_ms"] > 10 * max(deltas["embedding_ms"], deltas["llm_ms"], 0.1)


def test_deadline_header_reaches_the_downstream_call(served):
    _, proxied = served
    for echo in proxied:
        # The proxy got 400 ms; the downstream sees what was left, and honours it.
        assert 0 <= float(echo["deadline"]) <= 400
        assert echo["remaining_ms"] <= 400


def test_audit_names_the_planted_stage(served):
    pytest.importorskip("tailbudget.audit", reason="tailbudget.audit is on another branch")
    from tailbudget.audit import AuditConfig, run_audit
    from tailbudget.logs import ReadOptions, read_log

    path, _ = served
    log = read_log(
        str(path),
        ReadOptions(stages=tuple(f"{s}_ms" for s in STAGES), cohorts=("route",)),
    )
    report = run_audit(log, AuditConfig.of_e2e({"p95": 50.0, "p99": 100.0}))
    assert report.tail.driver == "retrieval"
