"""serve's class rules read a real Prometheus: each class's series by its `class` label
(the label PrometheusSink sets), so premium's breach on the fleet's histograms sheds batch
as the posted observations would."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from tailbudget._metric_names import REQUEST_DURATION, REQUESTS_TOTAL
from tailbudget.serve.runner import ServeOptions, build_runtime
from tests._net import free_port
from tests._prometheus import running_prometheus
from tests.classes.test_serve_class_shedding import BUDGET

pytestmark = pytest.mark.integration

BUCKETS = (0.1, 0.2, 0.5, 0.8, 1.0, 2.0, 5.0)
MS = {"premium": 0.95, "standard": 0.15, "batch": 0.15}  # premium over its 800 ms p99


@pytest.fixture
def app_port() -> Iterator[int]:
    """An app exposing tailbudget's request histogram with the class label, steadily."""
    registry = CollectorRegistry()
    labels = ["service", "route", "class"]
    hist = Histogram(REQUEST_DURATION, "t", labels, buckets=BUCKETS, registry=registry)
    total = Counter(REQUESTS_TOTAL, "n", ["service", "route", "outcome"], registry=registry)
    stop = threading.Event()

    def traffic() -> None:
        while not stop.wait(0.05):
            for cls, seconds in MS.items():
                for _ in range(5):
                    hist.labels("shed-svc", "/", cls).observe(seconds)
                    total.labels("shed-svc", "/", "ok").inc()

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


def test_class_rules_read_their_class_series_from_prometheus(tmp_path: Path, app_port) -> None:
    config = (
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: app\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{app_port}']}}]\n"
    )
    budget = tmp_path / "budget.yaml"
    budget.write_text(BUDGET.replace("window: 3s", "window: 5s"))
    with running_prometheus(tmp_path, config) as (_, url):
        options = ServeOptions(budget=budget, state_dir=tmp_path / "state", prometheus=url)
        rt = build_runtime(options)
        try:
            sources = dict(rt.config.class_prometheus)
            assert set(sources) == {"premium", "standard", "batch"}
            assert all('class="premium"' in q for q in sources["premium"].queries().values())
            shed = []
            deadline = time.monotonic() + 60
            while not shed and time.monotonic() < deadline:
                shed = [d for d in rt.evaluate() if d.action == "shed_load"]
                time.sleep(0.5)
            assert shed, rt.status()["classes"]
            (fired,) = shed
            assert (fired.trigger, fired.sheds) == ("premium", "batch")
            assert fired.value is not None and fired.value > 800  # premium's p99 from PromQL
            assert rt.status()["classes"]["batch"]["shed"] is True
        finally:
            rt.close()
