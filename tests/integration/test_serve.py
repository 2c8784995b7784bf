"""`tailbudget serve` on loopback: a real uvicorn server in a subprocess."""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from typer.testing import CliRunner

from tailbudget.cli import app
from tests._net import free_port, serve_in_thread

pytestmark = pytest.mark.integration

SRC = Path(__file__).resolve().parents[2] / "src"
TOKEN = "s3cret-token"

BUDGET = """\
service: test-svc
environment: prd
slo: {p50: 300, p95: 800, p99: 1500, error_rate: 0.01}
pipeline:
  - stage: model
    budget: {p50: 200, p95: 600, p99: 1200}
policy:
  window: 2s
  evaluate_every: 1s
  min_samples: 5
  rules:
    - {name: rollback_errors, metric: error_rate, threshold: 5%, for: 2s, action: rollback}
    - {name: scale_p95, metric: p95, threshold: 90% of p95, action: scale_up, cooldown: 30s}
"""


class Server:
    """One `python -m tailbudget serve` process on a free loopback port."""

    def __init__(
        self,
        state_dir: Path,
        *,
        token_file: Path | None,
        budget: Path | None,
        actions: Path | None = None,
        open_files: int | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.state_dir, self.token_file, self.budget = state_dir, token_file, budget
        self.extra = extra
        """Further `serve` options (e.g. `--prometheus URL`)."""
        self.actions = actions
        self.open_files = open_files
        """RLIMIT_NOFILE (soft and hard) for the server process, as on a box with a low one."""
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.log = state_dir.parent / f"serve-{state_dir.name}.log"

    def start(self) -> Self:
        port = free_port()
        argv = [sys.executable, "-m", "tailbudget", "serve", "--port", str(port)]
        argv += ["--state-dir", str(self.state_dir)]
        if self.token_file is not None:
            argv += ["--token-file", str(self.token_file)]
        if self.budget is not None:
            argv += ["--budget", str(self.budget)]
        if self.actions is not None:
            argv += ["--actions", str(self.actions)]
        argv += self.extra
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        # The server's log goes to a file: a pipe nobody reads could fill and block it.
        limit = self.open_files

        def limits() -> None:
            if limit is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                argv, env=env, stdout=log, stderr=log, preexec_fn=limits if limit else None
            )
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.log.read_text(errors="replace")
                pytest.fail(f"serve exited {self.proc.returncode}: {err[-800:]}")
            try:
                if httpx.get(f"{self.url}/v1/status", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        pytest.fail("serve did not answer within 90 s")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(30)

    def post(
        self,
        items: list[dict[str, object]] | bytes,
        token: str | None = TOKEN,
        content_type: str | None = None,
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if content_type is not None:
            headers["Content-Type"] = content_type
        body = items if isinstance(items, bytes) else json.dumps(items).encode()
        return httpx.post(f"{self.url}/v1/observations", content=body, headers=headers, timeout=30)

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = httpx.get(f"{self.url}/v1/status", timeout=10).json()
        return body

    def peak_rss_mib(self) -> float:
        """The server process's peak resident set (VmHWM), MiB."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmHWM in /proc status")


def _files(root: Path, budget_text: str = BUDGET) -> tuple[Path, Path]:
    token = root / "token"
    token.write_text(TOKEN + "\n")
    budget = root / "budget.yaml"
    budget.write_text(budget_text)
    return token, budget


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    return _files(tmp_path)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the request-level tests (each test works with count deltas)."""
    root = tmp_path_factory.mktemp("serve")
    # a 30 s window, so what a test posted is still in it when it looks
    token, budget = _files(root, BUDGET.replace("window: 2s", "window: 30s"))
    srv = Server(root / "state", token_file=token, budget=budget).start()
    yield srv
    srv.stop()


def _total(srv: Server) -> int:
    return int(srv.status()["observations_total"])


def _obs(n: int, ms: float = 100.0, error: bool = False) -> list[dict[str, object]]:
    now = time.time()
    return [
        {"ts": now, "total_ms": ms + i % 7, "error": error, "stages": {"model": ms / 2}}
        for i in range(n)
    ]


def test_auth_401_403_and_accepted_count(shared):
    server = shared
    before = _total(server)
    assert server.post(_obs(3), token=None).status_code == 401
    wrong = server.post(_obs(3), token="nope")
    assert wrong.status_code == 403 and "wrong bearer token" in wrong.json()["error"]
    ok = server.post(_obs(3))
    assert ok.status_code == 200 and ok.json() == {"accepted": 3}
    base = httpx.post(f"{server.url}/v1/baseline", json={"p99_ms": 900}, timeout=10)
    assert base.status_code == 401
    assert _total(server) == before + 3


def test_413_for_big_bodies_declared_or_streamed(shared):
    server = shared
    before = _total(server)
    big = b"[" + b'{"total_ms": 1.0},' * 60_000 + b'{"total_ms": 1.0}]'
    assert len(big) > 1024 * 1024
    assert server.post(big).status_code == 413

    def chunks() -> Iterator[bytes]:  # chunked: no Content-Length, refused while streaming
        yield b"["
        for _ in range(200):
            yield b'{"total_ms": 1.0},' * 400
        yield b'{"total_ms": 1.0}]'

    r = httpx.post(
        f"{server.url}/v1/observations",
        content=chunks(),
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=30,
    )
    assert r.status_code == 413
    assert _total(server) == before


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'[{"total_ms": 1.0},', "invalid JSON"),
        (b'[{"ts": 1700000000}]', "item 0: total_ms must be a number"),
        (b'{"total_ms": 5}\n{"total_ms": -1}\n', "item 1: total_ms must be a number >= 0"),
        (b'[{"total_ms": 5, "error": "maybe"}]', "item 0: error must be"),
        (b'[{"total_ms": 5, "ts": "yesterday"}]', "item 0: ts must be"),
        (b"", "empty body"),
        # hostile bodies: each a 400 with the reason, and the server stays up
        (b"[" * 30_000 + b"]" * 30_000, "nested too deep"),
        (b'[{"total_ms": ' + b"7" * 400 + b"}]", "a number with 400 digits"),
        (b'[{"total_ms": 5, "ts": ' + b"9" * 400 + b"}]", "a number with 400 digits"),
        (b'[{"total_ms": 1e400}]', "item 0: total_ms must be a number"),
        (b'[{"total_ms": 5, "ts": "0001-01-01T00:00:00Z"}]', "days before the server clock"),
        (b'[{"total_ms": 5, "stages": {"a\\n": 1}}]', "control character"),
    ],
    ids=[
        "truncated",
        "no-total",
        "negative",
        "error",
        "ts",
        "empty",
        "deep",
        "digits",
        "ts-digits",
        "1e400",
        "year-1",
        "newline-stage",
    ],
)
def test_400_malformed_with_a_one_line_reason(shared, body, reason):
    server = shared
    before = _total(server)
    r = server.post(body)
    assert r.status_code == 400
    message = r.json()["error"]
    assert reason in message and "\n" not in message
    assert _total(server) == before
    assert server.proc is not None and server.proc.poll() is None


def test_ndjson_metrics_and_status(shared):
    server = shared
    before = server.status()
    ndjson = b"\n".join(json.dumps(o).encode() for o in _obs(40, ms=700.0, error=False))
    assert server.post(ndjson).json() == {"accepted": 40}
    assert server.post(_obs(10, ms=700.0, error=True)).json() == {"accepted": 10}
    time.sleep(2.5)  # two evaluations
    status = server.status()
    assert status["observations_total"] == before["observations_total"] + 50
    assert status["errors_total"] == before["errors_total"] + 10
    assert status["stage_observations"]["model"] >= 50
    window = status["window"]
    assert window["known"] and window["count"] >= 50 and 690 <= window["p50"] <= 720
    assert status["last_evaluated_s"] is not None and status["policy"]["window_s"] == 30
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    obs = families["tailbudget_observations"]
    assert obs.type == "counter" and obs.samples[0].value == status["observations_total"]
    quantiles = {
        s.labels["quantile"]: s.value for s in families["tailbudget_window_latency_seconds"].samples
    }
    assert set(quantiles) == {"0.5", "0.95", "0.99"} and 0.69 <= quantiles["0.5"] <= 0.72
    # the posted stage times have their own window: model took half of each request
    model = status["stages"]["model"]
    assert model["known"] and model["count"] >= 50 and 345 <= model["p50"] <= 355
    stage_q = {
        (s.labels["stage"], s.labels["quantile"]): s.value
        for s in families["tailbudget_stage_window_latency_seconds"].samples
    }
    assert 0.345 <= stage_q[("model", "0.5")] <= 0.355
    counts = families["tailbudget_stage_window_observations"].samples
    assert [(c.labels["stage"], c.value) for c in counts] == [("model", model["count"])]
    stage_totals = {
        s.labels["stage"]: s.value
        for s in families["tailbudget_stage_observations"].samples
        if s.name.endswith("_total")
    }
    assert stage_totals == {"model": status["stage_observations"]["model"]}
    assert "tailbudget_desired_replicas" in families
    assert "tailbudget_action_active" in families
    assert "tailbudget_decisions" in families
    thresholds = {s.labels["rule"]: s.value for s in families["tailbudget_rule_threshold"].samples}
    assert thresholds["rollback_errors"] == pytest.approx(0.05)
    assert thresholds["scale_p95"] == pytest.approx(0.9 * 0.8)  # 90% of the 800 ms SLO p95
    assert all(s.name.startswith("tailbudget_") for f in families.values() for s in f.samples)


def test_state_survives_sigterm_and_kill_9(tmp_path, files):
    state = tmp_path / "state"
    srv = Server(state, token_file=files[0], budget=files[1]).start()
    acked = sum(srv.post(_obs(25)).json()["accepted"] for _ in range(4))
    # uvicorn re-raises SIGTERM after its graceful shutdown; the flush emptied the log.
    assert srv.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
    assert (state / "observations.wal").stat().st_size == 0
    assert (state / "snapshot.json").exists()
    srv = Server(state, token_file=files[0], budget=files[1]).start()
    assert srv.status()["observations_total"] == acked == 100
    headers = {"Authorization": f"Bearer {TOKEN}"}
    bad = httpx.post(f"{srv.url}/v1/baseline", json={"p99_ms": -3}, headers=headers, timeout=10)
    assert bad.status_code == 400
    ok = httpx.post(f"{srv.url}/v1/baseline", json={"p99_ms": 850}, headers=headers, timeout=10)
    assert ok.status_code == 200 and srv.status()["baseline_p99_ms"] == 850
    llm = {"baselines": {"ttft.p99": 420, "goodput": 0.97}}
    more = httpx.post(f"{srv.url}/v1/baseline", json=llm, headers=headers, timeout=10)
    assert more.status_code == 200 and srv.status()["baselines"] == llm["baselines"]
    wrong = {"baselines": {"goodput": 3}}
    bad = httpx.post(f"{srv.url}/v1/baseline", json=wrong, headers=headers, timeout=10)
    assert bad.status_code == 400 and "baselines.goodput" in bad.text
    # kill -9 right after an acknowledgement: nothing acknowledged may be lost.
    for _ in range(20):
        acked += srv.post(_obs(13)).json()["accepted"]
    assert acked == 360
    # ... and kill -9 in the middle of a stream of posts: every acknowledged batch
    # survives; at most the one in flight (durable but not yet acknowledged) is extra.
    errors: list[Exception] = []

    def stream() -> None:
        nonlocal acked
        with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            while True:  # until kill -9 cuts the connection
                try:
                    r = client.post(f"{srv.url}/v1/observations", content=json.dumps(_obs(7)))
                except httpx.HTTPError as exc:
                    errors.append(exc)
                    return
                acked += r.json()["accepted"]

    worker = threading.Thread(target=stream)
    worker.start()
    deadline = time.monotonic() + 30
    while acked < 360 + 7 * 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    srv.stop(signal.SIGKILL)
    worker.join(30)
    assert errors, "the stream should have been cut by kill -9"
    srv = Server(state, token_file=files[0], budget=files[1]).start()
    try:
        status = srv.status()
        assert acked <= status["observations_total"] <= acked + 7
        # stage times are in the log too: the replay restores their counts with the rest
        assert acked <= status["stage_observations"]["model"] <= acked + 7
        assert status["baseline_p99_ms"] == 850
        assert status["baselines"] == {"ttft.p99": 420, "goodput": 0.97}
    finally:
        srv.stop()


def _arrow_obs(n: int, ttft_ms: float = 80.0) -> bytes:
    """n LLM observations with a stage as an Arrow IPC stream, as a pyarrow client sends."""
    import pyarrow as pa

    now = time.time()
    table = pa.table(
        {
            "ts": pa.array([now] * n),
            "total_ms": pa.array([300.0 + i % 5 for i in range(n)]),
            "ttft_ms": pa.array([ttft_ms] * n),
            "output_tokens": pa.array([40] * n, pa.int32()),
            "stages": pa.array([{"model": 150.0}] * n),
        }
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


ARROW = "application/vnd.apache.arrow.stream"


def test_arrow_bodies_are_acknowledged_and_survive_kill_9(tmp_path):
    # a 5-minute window: what was posted is still in it after the restart
    files = _files(tmp_path, BUDGET.replace("window: 2s", "window: 5m"))
    state = tmp_path / "state"
    srv = Server(state, token_file=files[0], budget=files[1]).start()
    try:
        assert srv.post(_arrow_obs(5), content_type=ARROW).json() == {"accepted": 5}
        # The same bytes without the Arrow type are not JSON: refused, one line.
        r = srv.post(_arrow_obs(5))
        assert r.status_code == 400 and "\n" not in r.json()["error"]
        cut = srv.post(_arrow_obs(5)[:-30], content_type=ARROW)
        assert cut.status_code == 400 and "not a valid Arrow IPC stream" in cut.json()["error"]
        acked = 5 + sum(
            srv.post(_arrow_obs(50), content_type=ARROW).json()["accepted"] for _ in range(6)
        )
        status = srv.status()
        assert status["observations_total"] == acked == 305
        assert status["stage_observations"]["model"] == acked
    finally:
        srv.stop(signal.SIGKILL)
    srv = Server(state, token_file=files[0], budget=files[1]).start()
    try:
        status = srv.status()
        assert status["observations_total"] == acked
        assert status["stage_observations"]["model"] == acked
        assert status["series"]["ttft"]["count"] == status["series"]["tpot"]["count"] == acked
    finally:
        srv.stop()


def test_concurrent_posts_are_all_durable_across_kill_9(tmp_path, files):
    """Many clients at once (their batches share fsyncs): every 200 survives kill -9."""
    state = tmp_path / "state"
    srv = Server(state, token_file=files[0], budget=files[1]).start()
    acked = [0] * 12
    failures: list[BaseException] = []

    def client(k: int) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        try:
            with httpx.Client(timeout=60, headers=headers) as http:
                for i in range(15):
                    r = http.post(f"{srv.url}/v1/observations", content=json.dumps(_obs(1 + i % 4)))
                    r.raise_for_status()
                    acked[k] += r.json()["accepted"]
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(len(acked))]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not failures
        status = srv.status()
        wal = status["wal"]
        assert status["observations_total"] == sum(acked) == 12 * sum(1 + i % 4 for i in range(15))
        assert wal["batches"] == 12 * 15 and 1 <= wal["fsyncs"] <= wal["batches"]
    finally:
        srv.stop(signal.SIGKILL)  # no final snapshot: the log is replayed
    srv = Server(state, token_file=files[0], budget=files[1]).start()
    try:
        status = srv.status()
        assert status["observations_total"] == sum(acked)
        assert status["stage_observations"] == {"model": sum(acked)}
    finally:
        srv.stop()


@pytest.fixture
def receiver() -> Iterator[tuple[list[tuple[str, dict[str, object]]], str]]:
    """A real webhook receiver on loopback (uvicorn in a thread) recording every POST."""
    posts: list[tuple[str, dict[str, object]]] = []

    async def hook(request: Request) -> JSONResponse:
        posts.append((request.headers.get("idempotency-key", ""), json.loads(await request.body())))
        return JSONResponse({"ok": True})

    port = free_port()
    app_ = Starlette(routes=[Route("/hook", hook, methods=["POST"])])
    with serve_in_thread(app_, port, "webhook receiver"):
        yield posts, f"http://127.0.0.1:{port}/hook"


def test_verdict_flips_to_rollback_under_an_error_burst(tmp_path, files, receiver):
    posts, hook_url = receiver
    actions = tmp_path / "actions.yaml"
    actions.write_text(
        f"webhooks:\n  - {{url: '{hook_url}', actions: [rollback], backoff_s: 0.1}}\n"
    )
    server = Server(
        tmp_path / "state", token_file=files[0], budget=files[1], actions=actions
    ).start()
    try:
        _verdict_flow(server, posts)
    finally:
        server.stop()


def _flagger(server: Server, mode: str) -> int:
    return httpx.get(f"{server.url}/v1/verdict", params={"mode": mode}, timeout=10).status_code


def _verdict_flow(server: Server, posts: list[tuple[str, dict[str, object]]]) -> None:
    r = httpx.get(f"{server.url}/v1/verdict", timeout=10)
    assert r.status_code == 200 and r.json()["verdict"] == "unknown"
    # Unknown is no failed check (rollout hook) and no promotion (confirm-promotion hook).
    assert _flagger(server, "flagger") == 200
    assert _flagger(server, "flagger-promotion") == 503
    assert _flagger(server, "nonsense") == 400
    # healthy traffic: the 2 s window fills (polled, the machine may be slow)
    deadline = time.monotonic() + 60
    verdict = "unknown"
    while verdict != "healthy" and time.monotonic() < deadline:
        server.post(_obs(30))
        verdict = httpx.get(f"{server.url}/v1/verdict", timeout=10).json()["verdict"]
    assert verdict == "healthy"
    server.post(_obs(30))
    assert _flagger(server, "flagger") == _flagger(server, "flagger-promotion") == 200
    flagger_hook = {"name": "podinfo", "namespace": "test", "phase": "Progressing"}
    r = httpx.post(f"{server.url}/v1/verdict?mode=flagger", json=flagger_hook, timeout=10)
    assert r.status_code == 200  # Flagger's webhooks are POSTs
    deadline = time.monotonic() + 60
    verdict = "healthy"
    while verdict != "rollback" and time.monotonic() < deadline:
        server.post(_obs(30, error=True))
        time.sleep(0.5)
        verdict = httpx.get(f"{server.url}/v1/verdict", timeout=10).json()["verdict"]
    assert verdict == "rollback"
    flagger = httpx.get(f"{server.url}/v1/verdict?mode=flagger", timeout=10)
    assert flagger.status_code == 503 and flagger.json()["verdict"] == "rollback"
    assert _flagger(server, "flagger-promotion") == 503
    status = server.status()
    assert "rollback" in status["active"]
    last = [d for d in status["last_decisions"] if d["action"] == "rollback"]
    assert (
        last
        and last[-1]["rule"] == "rollback_errors"
        and last[-1]["threshold"] == pytest.approx(0.05)
    )
    journal = [
        json.loads(line) for line in (server.state_dir / "journal.jsonl").read_text().splitlines()
    ]
    rollback = next(r for r in journal if r.get("action") == "rollback" and r["kind"] == "decision")
    # The webhook ran after the decision was journaled, with the decision's key.
    deadline = time.monotonic() + 60
    while not posts and time.monotonic() < deadline:
        time.sleep(0.1)
    assert posts and posts[0][0] == rollback["id"] and posts[0][1]["action"] == "rollback"
    assert all(body["action"] == "rollback" for _, body in posts)  # filtered to rollback


def test_bad_options_exit_2_with_one_line(tmp_path):
    empty = tmp_path / "empty-token"
    empty.write_text("\n")
    result = CliRunner().invoke(
        app, ["serve", "--token-file", str(empty), "--state-dir", str(tmp_path / "s")]
    )
    assert result.exit_code == 2
    assert "token file must hold one token" in result.output
    missing = CliRunner().invoke(app, ["serve", "--budget", str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 2 and "nope.yaml" in missing.output
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        busy = CliRunner().invoke(
            app, ["serve", "--port", port, "--state-dir", str(tmp_path / "s")]
        )
    assert busy.exit_code == 2 and "cannot listen" in busy.output
    tiny = CliRunner().invoke(
        app, ["serve", "--max-decoded-bytes", "5", "--state-dir", str(tmp_path / "s")]
    )
    assert tiny.exit_code == 2
    assert "--max-decoded-bytes must be from 1,048,576 (the body limit) to 1 GiB" in tiny.output
