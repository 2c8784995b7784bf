"""PrometheusSource against a real Prometheus server scraping a test app on loopback."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from tailbudget._metric_names import REQUEST_DURATION, REQUESTS_TOTAL
from tailbudget.budget.policy import parse_policy
from tailbudget.control.engine import Controller
from tailbudget.serve.actions import ActionsConfig
from tailbudget.serve.prometheus_source import PrometheusSource
from tailbudget.serve.runtime import Runtime, RuntimeConfig
from tests._net import free_port
from tests._prometheus import running_prometheus

pytestmark = pytest.mark.integration

BUCKETS = tuple(round(0.1 * i, 1) for i in range(1, 11))  # 100 ms resolution up to 1 s
CYCLE = [0.01 * i for i in range(1, 101)]  # uniform 10..1000 ms: true p95 = 950 ms
ERROR_EVERY = 50  # 2% errors


@pytest.fixture
def app_port() -> Iterator[int]:
    """A test app exposing the Measure metrics, observing a known distribution steadily."""
    registry = CollectorRegistry()
    hist = Histogram(
        REQUEST_DURATION,
        "request time",
        ["service", "route"],
        buckets=BUCKETS,
        registry=registry,
    )
    total = Counter(REQUESTS_TOTAL, "requests", ["service", "route", "outcome"], registry=registry)
    stop = threading.Event()

    def traffic() -> None:
        h = hist.labels("svc", "/chat")
        ok, err = total.labels("svc", "/chat", "ok"), total.labels("svc", "/chat", "error")
        while not stop.wait(0.05):
            for i, value in enumerate(CYCLE):
                h.observe(value)
                (err if i % ERROR_EVERY == 0 else ok).inc()

    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    worker = threading.Thread(target=traffic, daemon=True)
    worker.start()
    yield port
    stop.set()
    worker.join(5)
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def prometheus(tmp_path: Path, app_port: int) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    config = (
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: app\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{app_port}']}}]\n"
    )
    with running_prometheus(tmp_path, config) as running:
        yield running


def test_source_reads_quantiles_and_errors_then_unknown_when_down(prometheus, tmp_path):
    proc, url = prometheus
    source = PrometheusSource(url, "svc", "5s", min_samples=10)
    deadline = time.monotonic() + 60
    stats = source.stats()
    while not stats.known and time.monotonic() < deadline:
        time.sleep(0.5)
        stats = source.stats()
    assert stats.known, f"PromQL never answered with data: {source.last_error}"
    # Uniform 10..1000 ms: p95 is 950 ms, p50 505 ms; buckets are 100 ms wide.
    assert stats.p95 is not None and abs(stats.p95 - 950.0) <= 100.0
    assert stats.p50 is not None and abs(stats.p50 - 505.0) <= 100.0
    assert stats.p99 is not None and stats.p95 <= stats.p99 <= 1000.0
    assert stats.count >= 10 and stats.errors > 0
    assert abs(stats.errors / stats.count - 1 / ERROR_EVERY) < 0.005
    assert (
        stats.error_rate_upper is not None and stats.error_rate_upper >= stats.errors / stats.count
    )

    # The engine acts on these stats exactly as on its own window.
    policy = parse_policy(
        {
            "window": "5s",
            "evaluate_every": "1s",
            "min_samples": 10,
            "rules": [{"name": "scale", "metric": "p95", "threshold": 900, "action": "scale_up"}],
        }
    )
    decisions = Controller(policy).evaluate(time.time(), stats)
    assert [(d.action, d.rule) for d in decisions] == [("scale_up", "scale")]

    # The service runtime reads its window from Prometheus when given a source.
    runtime = Runtime(
        policy,
        RuntimeConfig(
            state_dir=tmp_path / "state", actions=ActionsConfig(log=False), prometheus=source
        ),
    )
    runtime.evaluate()
    verdict = runtime.verdict()
    assert verdict["verdict"] == "healthy" and verdict["window"]["source"].startswith("prometheus")
    assert runtime.replicas.desired == 2  # the scale_up above was executed
    runtime.close()

    # Another service has no series: unknown, not healthy.
    assert not PrometheusSource(url, "nosuch", "5s").stats().known

    proc.terminate()
    proc.wait(10)
    down = source.stats()
    assert not down.known and down.p95 is None and down.error_rate_upper is None
    assert source.last_error is not None
    assert Controller(policy).evaluate(time.time(), down) == []  # unknown never acts
