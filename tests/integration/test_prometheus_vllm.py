"""A TTFT breach on vLLM-named histograms, seen by a real Prometheus, `serve` and the exports.

A test app exports vLLM's histograms (its names, its `model_name` label, its
bucket bounds) through prometheus_client; a real Prometheus scrapes it every
second and evaluates the rule file `tailbudget export --metrics vllm` wrote
(checked by promtool). Driven from fast first tokens into a TTFT breach, the
`serve --prometheus --metrics vllm` runtime scales up at the first evaluation
that sees the breach and sheds at the first evaluation after `for`; the
exported alert fires and the KEDA query reads above its threshold, on the
same expression. With Prometheus down, everything is unknown.
"""

from __future__ import annotations

import random
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest

from tailbudget._fleet import PRESETS
from tailbudget.budget import load_budget
from tailbudget.export import ExportOptions, export
from tailbudget.serve.runner import ServeOptions, build_runtime
from tests._net import free_port
from tests._prometheus import PROMETHEUS, PROMTOOL, require, running_prometheus
from tests.fleet_exports import fleet_expressions

pytestmark = pytest.mark.integration

MODEL = "chat-llm"
SCALE_S, SHED_S, SHED_FOR_S, EVERY_S = 0.45, 0.5, 6, 2

BUDGET = f"""
service: {MODEL}
slo: {{p95: 6000, p99: 9000}}
pipeline:
  - stage: llm
    budget: {{p95: 5000, p99: 8000}}
policy:
  window: 10s
  evaluate_every: {EVERY_S}s
  min_samples: 10
  replicas: {{min: 1, max: 5, step: 1}}
  rules:
    - {{name: scale_ttft, metric: ttft.p95, threshold: {SCALE_S * 1000:g}, action: scale_up}}
    - {{name: shed_ttft, metric: ttft.p95, threshold: {SHED_S * 1000:g}, for: {SHED_FOR_S}s,
       action: shed_load}}
"""


class VllmApp:
    """vLLM's request histograms with its own bounds; `slow` switches TTFT to a breach."""

    def __init__(self) -> None:
        vllm = PRESETS["vllm"].series
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]

        def hist(metric: str) -> Any:
            s = vllm[metric]
            return Histogram(
                s.histogram, metric, labels, buckets=s.buckets, registry=self.registry
            ).labels(MODEL, "0")

        self.ttft, self.e2e, self.itl = hist("ttft"), hist("e2e"), hist("itl")
        self.slow = threading.Event()
        self.stop = threading.Event()
        self.port = free_port()

    def traffic(self) -> None:
        rng = random.Random(7)
        while not self.stop.wait(0.05):
            for _ in range(10):  # ~200 requests per second
                lo, hi = (0.6, 1.0) if self.slow.is_set() else (0.05, 0.15)
                ttft = rng.uniform(lo, hi)
                self.ttft.observe(ttft)
                self.itl.observe(rng.uniform(0.01, 0.03))
                self.e2e.observe(ttft + 2.0)

    def __enter__(self) -> VllmApp:
        registry = self.registry

        class Metrics(BaseHTTPRequestHandler):
            # Always the text format, as vLLM's names appear in it (colons kept): the
            # client's OpenMetrics output would escape them to underscores.
            def do_GET(self) -> None:
                body = generate_latest(registry)
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Metrics)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.worker = threading.Thread(target=self.traffic, daemon=True)
        self.worker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.worker.join(5)
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def budget_path(tmp_path: Path) -> Path:
    path = tmp_path / "budget.yaml"
    path.write_text(BUDGET)
    return path


@pytest.fixture
def app() -> Iterator[VllmApp]:
    with VllmApp() as running:
        yield running


@pytest.fixture
def prometheus(tmp_path: Path, app: VllmApp, budget_path: Path) -> Iterator[tuple[Any, str, Path]]:
    require(PROMETHEUS, PROMTOOL)
    rules = tmp_path / "rules.yaml"
    opts = ExportOptions(metrics="vllm", rule_interval_s=1.0)
    rules.write_text(export(load_budget(budget_path), "prometheus-rules", opts))
    check = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    config = (
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{rules}']\n"
        "scrape_configs:\n"
        "  - job_name: vllm\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{app.port}']}}]\n"
    )
    with running_prometheus(tmp_path, config) as (proc, url):
        yield proc, url, rules


def _wait(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    pytest.fail(f"prometheus: not {what} within {timeout_s:g} s")


def _query(url: str, promql: str) -> float | None:
    body = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5).json()
    result = body["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def _firing(url: str) -> set[str]:
    alerts = httpx.get(f"{url}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
    return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}


def test_a_ttft_breach_scales_up_sheds_and_fires_the_exported_alert_and_keda_query(
    prometheus: tuple[Any, str, Path], app: VllmApp, budget_path: Path, tmp_path: Path
) -> None:
    proc, url, rules = prometheus
    rt = build_runtime(
        ServeOptions(
            budget=budget_path, state_dir=tmp_path / "state", prometheus=url, metrics="vllm"
        )
    )
    source = rt.config.prometheus
    assert source is not None
    ttft_q = source.queries()["ttft.p95"]
    assert "vllm:time_to_first_token_seconds_bucket" in ttft_q and f'model_name="{MODEL}"' in ttft_q
    _wait(lambda: source.read()[1].get("ttft") and source.read()[1]["ttft"].known, 60, "scraped")

    seen: list[tuple[float, float | None, list[str]]] = []
    app.slow.set()
    start = time.time()
    while time.time() - start < 40 and not any("shed_load" in d for _, _, d in seen):
        now = time.time()
        decisions = rt.evaluate(now)
        ttft = rt.controller.last_series.get("ttft")
        seen.append((now, None if ttft is None else ttft.p95, [d.action for d in decisions]))
        time.sleep(max(0.0, EVERY_S - (time.time() - now)))
    first_over = next(i for i, (_, p95, _) in enumerate(seen) if p95 and p95 > SCALE_S * 1000)
    # for = 0: scale_up at the very evaluation that first sees the breach
    assert "scale_up" in seen[first_over][2], seen
    assert all("scale_up" not in acts for _, _, acts in seen[:first_over])
    shed = next(i for i, (_, _, acts) in enumerate(seen) if "shed_load" in acts)
    over_shed = next(i for i, (_, p95, _) in enumerate(seen) if p95 and p95 > SHED_S * 1000)
    held = seen[shed][0] - seen[over_shed][0]
    # shed_load at the first evaluation after `for` held: within one evaluation of it
    assert SHED_FOR_S <= held + 1e-6 <= SHED_FOR_S + EVERY_S + 0.5, (held, seen)
    status = rt.status()
    assert status["prometheus"]["metrics"] == "vllm"
    assert status["objectives"][0]["metric"] == "ttft.p95"

    # The exported alert fires, and KEDA's query reads above its threshold: same expression.
    doc = yaml.safe_load(rules.read_text())
    alert = next(
        r for g in doc["groups"] for r in g["rules"] if r.get("alert", "").endswith("scale_ttft")
    )
    keda = yaml.safe_load(export(load_budget(budget_path), "keda", ExportOptions(metrics="vllm")))
    trigger = keda["spec"]["triggers"][0]["metadata"]
    value_expr = alert["expr"].split(" > ")[0]
    assert value_expr in trigger["query"]
    _wait(lambda: alert["alert"] in _firing(url), 30, "firing the scale alert")
    keda_value = _query(url, trigger["query"])
    assert keda_value is not None and keda_value > float(trigger["threshold"])
    rt.close()

    # Unreachable Prometheus: unknown, never acts.
    proc.terminate()
    proc.wait(10)
    again = build_runtime(
        ServeOptions(
            budget=budget_path, state_dir=tmp_path / "state2", prometheus=url, metrics="vllm"
        )
    )
    for _ in range(3):
        assert again.evaluate() == []
    assert again.verdict()["verdict"] == "unknown"
    assert again.status()["prometheus"]["last_error"] is not None
    again.close()


def test_vllm_bucket_resolution_is_named_in_the_export() -> None:
    budget = load_budget_text(
        BUDGET.replace("slo: {p95: 6000, p99: 9000}", "slo: {p95: 200, p99: 9000}")
    )
    text = export(budget, "prometheus-rules", ExportOptions(metrics="vllm"))
    assert "below the first bucket of vllm:e2e_request_latency_seconds (le=0.3 s)" in text
    assert 'le="0.3"' in text and "nearest bound le=0.3 s" in text


def load_budget_text(text: str) -> Any:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "b.yaml"
        path.write_text(text)
        return load_budget(path)


def test_every_fleet_export_query_runs_on_the_real_prometheus(
    prometheus: tuple[Any, str, Path], app: VllmApp
) -> None:
    """The dashboard, OpenSLO, Argo and Flagger queries of `--metrics vllm`, sent to Prometheus
    scraping vLLM-named histograms: each is accepted, and the dashboard and SLO ones read
    the app's traffic (TTFT 50-150 ms, inter-token gaps 10-30 ms)."""
    _, url, _ = prometheus
    budget = load_budget_text(
        BUDGET.replace(
            "slo: {p95: 6000, p99: 9000}",
            "slo: {e2e: {p95: 6000, p99: 9000}, ttft: {p95: 250}, itl: {p99: 50}}",
        )
    )
    exprs = fleet_expressions(budget, "vllm")
    exprs = {k: v.replace("[1h]", "[1m]").replace("[5m]", "[1m]") for k, v in exprs.items()}
    ttft = next(e for k, e in exprs.items() if k == "grafana ttft A")
    _wait(lambda: _query(url, ttft) is not None, 60, "serving TTFT")
    for name, promql in exprs.items():
        body = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5).json()
        assert body["status"] == "success", (name, body)
    p95 = _query(url, ttft)
    assert p95 is not None and 0.05 <= p95 <= 0.25
    good = _query(url, exprs["openslo chat-llm-ttft-p95 good"])
    total = _query(url, exprs["openslo chat-llm-ttft-p95 total"])
    assert good is not None and total is not None and good == pytest.approx(total, rel=0.05)
    burn = next(
        e for k, e in exprs.items() if k.startswith("grafana latency SLI burn") and k.endswith(" C")
    )
    assert _query(url, burn) == pytest.approx(0.0, abs=1e-9)  # every first token under 250 ms
