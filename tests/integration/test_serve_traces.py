"""`serve --traces` on loopback: the real OpenTelemetry SDK and its OTLP HTTP exporters.

A three-service pipeline (gateway -> ranker -> store), the store slowed in 10% of
the traces. Ground truth per trace is written from the layout the test itself
builds: on the critical path the gateway holds its own time, the ranker its own
plus the gateway->ranker network, the store its own plus the ranker->store network.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.integration.test_serve import Server

pytestmark = pytest.mark.integration

TOKEN = "tr4ces"
N = 2000
BUDGET = """\
service: pipeline
slo: {p99: 2000}
pipeline:
  - stage: gateway
    budget: {p99: 100}
  - stage: ranker
    budget: {p99: 300}
  - stage: store
    budget: {p99: 500}
policy:
  window: 10m
  evaluate_every: 5s
  min_samples: 5
  rules:
    - {name: scale_p95, metric: p95, threshold: 1900, action: scale_up}
"""


class TraceServer(Server):
    """`serve --traces` (spans named by service, a 2 s trace grace) on a free loopback port."""

    def __init__(self, root: Path) -> None:
        (root / "token").write_text(TOKEN)
        (root / "budget.yaml").write_text(BUDGET)
        super().__init__(
            root / "state",
            token_file=root / "token",
            budget=root / "budget.yaml",
            extra=("--traces", "--span-stage", "service", "--trace-grace", "2s"),
        )

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def status(self) -> dict[str, Any]:
        return dict(httpx.get(f"{self.url}/v1/status", timeout=30).json())


def _providers(url: str, protocol: str) -> dict[str, Any]:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if protocol == "protobuf":
        from opentelemetry.exporter.otlp.proto.http import Compression
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.common.http import Compression  # type: ignore[no-redef]
        from opentelemetry.exporter.otlp.json.http.trace_exporter import (  # type: ignore[no-redef]
            OTLPSpanExporter,
        )
    gzip = getattr(Compression, "Gzip", None) or Compression["GZIP"]
    plain = getattr(Compression, "NoCompression", None) or Compression["NONE"]
    out = {}
    for i, service in enumerate(("gateway", "ranker", "store")):
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        exporter = OTLPSpanExporter(
            endpoint=f"{url}/v1/traces",
            headers={"Authorization": f"Bearer {TOKEN}"},
            compression=gzip if i != 1 else plain,
        )
        provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=N * 4))
        out[service] = provider
    return out


def _send(providers: dict[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """N traces; returns each service's true critical-path ms per trace."""
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind

    gw = providers["gateway"].get_tracer("t")
    rk = providers["ranker"].get_tracer("t")
    st = providers["store"].get_tracer("t")
    truth: dict[str, list[float]] = {"gateway": [], "ranker": [], "store": []}
    base = time.time_ns() - 60 * 10**9
    ms = 10**6
    for k in range(N):
        t0 = base + k * 10 * ms
        pre, post = rng.uniform(2, 8), rng.uniform(1, 5)
        r_pre, r_post = rng.uniform(5, 40), rng.uniform(2, 10)
        n1, n2 = rng.uniform(0.5, 2), rng.uniform(0.5, 2)
        work = rng.lognormal(3.0, 0.3) + (150.0 if k % 10 == 3 else 0.0)
        c2 = 2 * n2 + work
        c1 = 2 * n1 + r_pre + c2 + r_post
        total = pre + c1 + post

        def at(x: float, t0: int = t0) -> int:
            return t0 + int(x * ms)

        root = gw.start_span("GET /search", kind=SpanKind.SERVER, start_time=at(0))
        ctx = trace.set_span_in_context(root)
        call = gw.start_span("call ranker", ctx, kind=SpanKind.CLIENT, start_time=at(pre))
        ctx = trace.set_span_in_context(call)
        r = rk.start_span("rank", ctx, kind=SpanKind.SERVER, start_time=at(pre + n1))
        ctx = trace.set_span_in_context(r)
        c = rk.start_span("call store", ctx, kind=SpanKind.CLIENT, start_time=at(pre + n1 + r_pre))
        ctx = trace.set_span_in_context(c)
        s = st.start_span("fetch", ctx, kind=SpanKind.SERVER, start_time=at(pre + n1 + r_pre + n2))
        s.end(end_time=at(pre + n1 + r_pre + n2 + work))
        c.end(end_time=at(pre + n1 + r_pre + c2))
        r.end(end_time=at(pre + c1 - n1))
        call.end(end_time=at(pre + c1))
        root.end(end_time=at(total))
        # As the test rounds times to whole ns, so does the truth (the path is exact).
        truth["gateway"].append((at(total) - at(pre + c1) + at(pre) - at(0)) / ms)
        truth["ranker"].append(
            (at(pre + c1) - at(pre) - (c2_end := at(pre + n1 + r_pre + c2)) + at(pre + n1 + r_pre))
            / ms
        )
        truth["store"].append((c2_end - at(pre + n1 + r_pre)) / ms)
    for provider in providers.values():
        assert provider.force_flush(120_000), "the exporter could not deliver every span"
    return {k: np.array(v) for k, v in truth.items()}


def _wait(server: TraceServer, key: str, n: int, timeout: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        status = server.status()
        if status[key] >= n or time.monotonic() > deadline:
            return status
        time.sleep(0.5)


@pytest.mark.parametrize("protocol", ["protobuf", "json"])
def test_live_traces_find_the_slowed_stage_and_survive_kill_9(tmp_path, protocol):
    server = TraceServer(tmp_path).start()
    try:
        providers = _providers(server.url, protocol)
        truth = _send(providers, np.random.default_rng(5))
        for provider in providers.values():
            provider.shutdown()
        # Every span is acknowledged; most traces are still open (2 s grace): kill -9.
        server.kill()
        server.start()
        status = _wait(server, "observations_total", N)
        assert status["observations_total"] == N
        assert status["traces"]["recovered_spans"] > 0
        for stage, values in truth.items():
            want = float(np.quantile(values, 0.99))
            got = status["stages"][stage]["p99"]
            assert got == pytest.approx(want, rel=0.02), (stage, got, want)
        # Culprits over the window after the restart: the traces it finished.
        time.sleep(1.0)
        status = server.status()
        assert status["culprits"], status["traces"]
        assert status["culprits"][0]["stage"] == "store"
        assert "slow vs fast" in status["culprits"][0]["evidence"]
        assert status["traces"]["incomplete"] == {}
        metrics = httpx.get(f"{server.url}/metrics", timeout=30).text
        assert 'tailbudget_stage_budget_burn{quantile="0.99",stage="store"}' in metrics
    finally:
        server.stop()
