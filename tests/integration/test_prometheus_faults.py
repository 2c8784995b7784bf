"""`serve --prometheus` under a misbehaving Prometheus: unknown with the reason, never a 500.

A small fake Prometheus on loopback drips, overflows, answers the wrong shape or
100 MB; the source, the runtime and a real `tailbudget serve` are each run
against it.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tailbudget.budget.policy import parse_policy
from tailbudget.serve.actions import ActionsConfig
from tailbudget.serve.prometheus_source import PrometheusSource
from tailbudget.serve.runtime import Runtime, RuntimeConfig
from tests._fake_prometheus import FakePrometheus, fake_prometheus
from tests._json import strict_json
from tests.integration.test_serve import Server, _files

pytestmark = pytest.mark.integration

BAD_ANSWERS = [
    ("overflow", "bad_figure", "p99 = 1e306 is not a latency"),
    ("negative", "bad_figure", "p99 = -1e308 is not a latency"),
    ("list", "bad_answer", "the answer is a JSON list, not an object"),
    ("string", "bad_answer", "the answer is a JSON str, not an object"),
    ("data-string", "bad_answer", "data is a str, not an object"),
    ("null", "bad_answer", "value[1] must be a number in a string, got null"),
    ("error", "bad_answer", "tsdb is closing"),
    ("huge", "bad_answer", "passed 1,048,576 bytes"),
    ("drip", "deadline", "no full answer within the 1.5 s deadline"),
]


@pytest.mark.parametrize(("mode", "kind", "says"), BAD_ANSWERS, ids=[m for m, _, _ in BAD_ANSWERS])
def test_the_source_says_unknown_and_why(mode, kind, says):
    with fake_prometheus(mode) as fake:
        source = PrometheusSource(fake.url, "svc", "2s", deadline_s=1.5)
        started = time.monotonic()
        stats, series = source.read()
        took = time.monotonic() - started
        assert not stats.known and stats.p99 is None and series == {}
        assert source.last_error_kind == kind, source.last_error
        assert source.last_error is not None and says in source.last_error
        assert took < 1.5 + 1.0, f"the read took {took:.1f} s past its 1.5 s deadline"
        fake.mode = "ok"  # recovered: known again, the error gone
        again = source.read()[0]
        assert again.known and again.p99 == 400.0 and source.last_error is None


POLICY = {
    "window": "2s",
    "evaluate_every": "1s",
    "min_samples": 5,
    "rules": [
        {"name": "scale", "metric": "p99", "threshold": 300, "action": "scale_up"},
        {"name": "errors", "metric": "error_rate", "threshold": "5%", "action": "rollback"},
    ],
}


def test_the_runtime_never_stores_a_figure_it_cannot_trust(tmp_path):
    policy = parse_policy(POLICY)
    with fake_prometheus("overflow") as fake:
        source = PrometheusSource(fake.url, "svc", "2s", deadline_s=1.5)
        config = RuntimeConfig(
            state_dir=tmp_path / "state", actions=ActionsConfig(log=False), prometheus=source
        )
        rt = Runtime(policy, config)
        assert rt.evaluate() == []  # a p99 of 1e306 s is no reason to scale up
        judged = rt.verdict()
        assert judged["verdict"] == "unknown" and "1e306" in judged["reason"]
        status = rt.status()
        strict_json(json.dumps(status))
        assert status["evaluation"]["errors"] == {"bad_figure": 1}
        assert "1e306" in status["last_error"]
        fake.mode = "list"
        rt.evaluate()
        assert "JSON list" in rt.verdict()["reason"]
        assert rt.status()["evaluation"]["errors"] == {"bad_figure": 1, "bad_answer": 1}
        fake.mode = "ok"
        rt.evaluate()
        assert rt.verdict()["verdict"] == "healthy" and rt.verdict()["reason"] is None
        rt.close()
        # Nothing non-finite was stored: the snapshot and journal are strict JSON.
        strict_json((tmp_path / "state" / "snapshot.json").read_text())
        for line in (tmp_path / "state" / "journal.jsonl").read_text().splitlines():
            strict_json(line)


def test_an_evaluation_that_raises_is_caught_counted_and_unknown(tmp_path, monkeypatch):
    policy = parse_policy(POLICY)
    config = RuntimeConfig(state_dir=tmp_path / "state", actions=ActionsConfig(log=False))
    rt = Runtime(policy, config)
    now = time.time()
    monkeypatch.setattr(rt.controller, "evaluate", _boom)
    assert rt.evaluate(now) == []
    judged = rt.verdict(now)
    assert judged["verdict"] == "unknown"
    assert "ZeroDivisionError: the rules broke" in judged["reason"]
    assert rt.status(now)["evaluation"]["errors"] == {"internal": 1}
    rt.close()


def _boom(*_: object, **__: object) -> list[object]:
    raise ZeroDivisionError("the rules broke")


BUDGET = """\
service: svc
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
    - {name: scale_p99, metric: p99, threshold: 1000, action: scale_up, cooldown: 30s}
"""


def _verdict(srv: Server) -> dict[str, Any]:
    r = httpx.get(f"{srv.url}/v1/verdict", timeout=10)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = strict_json(r.text)
    return body


def _wait_for(srv: Server, verdict: str, within_s: float) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    while True:
        body = _verdict(srv)
        took = time.monotonic() - started
        if body["verdict"] == verdict or took > within_s:
            return body, took
        time.sleep(0.1)


def _start(tmp_path: Path, fake: FakePrometheus) -> Server:
    token, budget = _files(tmp_path, BUDGET)
    extra = ("--prometheus", fake.url)
    return Server(tmp_path / "state", token_file=token, budget=budget, extra=extra).start()


def test_serve_goes_unknown_within_two_periods_and_recovers(tmp_path):
    with fake_prometheus("ok") as fake:
        srv = _start(tmp_path, fake)
        try:
            body, _ = _wait_for(srv, "healthy", 20)
            assert body["verdict"] == "healthy", body
            for mode, says in [
                ("drip", "deadline"),
                ("overflow", "1e306"),
                ("data-string", "data is a str"),
                ("null", "got null"),
                ("huge", "1,048,576 bytes"),
            ]:
                fake.mode = mode
                body, took = _wait_for(srv, "unknown", 10)
                assert body["verdict"] == "unknown", (mode, body)
                # two evaluation periods (1 s each), and the poll's own slack
                assert took <= 2 * 1.0 + 1.0, f"{mode}: unknown after {took:.1f} s"
                assert says in body["reason"], (mode, body["reason"])
                status = httpx.get(f"{srv.url}/v1/status", timeout=10)
                assert status.status_code == 200
                assert says in strict_json(status.text)["evaluation"]["last_error"]
                fake.mode = "ok"
                body, _ = _wait_for(srv, "healthy", 10)
                assert body["verdict"] == "healthy", (mode, body)
            metrics = httpx.get(f"{srv.url}/metrics", timeout=10).text
            families = {f.name: f for f in text_string_to_metric_families(metrics)}
            age = families["tailbudget_evaluation_age_seconds"].samples[0].value
            assert 0 <= age <= 2.0
            kinds = {
                s.labels["kind"]: s.value
                for s in families["tailbudget_evaluation_errors"].samples
                if s.name.endswith("_total")
            }
            assert {"deadline", "bad_figure", "bad_answer"} <= set(kinds)
            assert srv.peak_rss_mib() < 256, "a 100 MB answer must not be buffered"
            fake.mode = "overflow"
            _wait_for(srv, "unknown", 10)
            srv.stop(signal.SIGKILL)
        finally:
            srv.stop()
        # Restart clean: no 500, the snapshot strict JSON, healthy once Prometheus is.
        strict_json((tmp_path / "state" / "snapshot.json").read_text())
        srv = Server(srv.state_dir, token_file=srv.token_file, budget=srv.budget, extra=srv.extra)
        srv.start()
        try:
            assert httpx.get(f"{srv.url}/v1/status", timeout=10).status_code == 200
            assert _verdict(srv)["verdict"] == "unknown"
            fake.mode = "ok"
            assert _wait_for(srv, "healthy", 10)[0]["verdict"] == "healthy"
        finally:
            srv.stop()


def test_a_server_that_drips_its_headers_is_cut_at_the_deadline():
    # Below HTTP: a socket that takes the request and sends its status line a byte a
    # second. Each read is quick (the 10 s per-read timeout never trips); only the
    # total deadline ends the read.
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def drip() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n":
                    if stop.wait(1.0):
                        break
                    try:
                        conn.sendall(bytes([byte]))
                    except OSError:
                        break

    thread = threading.Thread(target=drip, daemon=True)
    thread.start()
    try:
        port = listener.getsockname()[1]
        source = PrometheusSource(f"http://127.0.0.1:{port}", "svc", "2s", timeout_s=10.0)
        source.deadline_s = 1.5
        started = time.monotonic()
        stats, _ = source.read()
        took = time.monotonic() - started
        assert not stats.known and source.last_error_kind == "deadline"
        assert took < 1.5 + 1.0, f"the read took {took:.1f} s past its 1.5 s deadline"
    finally:
        stop.set()
        listener.close()
        thread.join(5)
