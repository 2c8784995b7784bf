"""The generated rules loaded into a real Prometheus server scraping a test app on loopback.

The app exports the tailbudget histograms and counter (prometheus_client, the
buckets `latency_buckets` recommends) and keeps observing a known mix; the test
polls Prometheus' HTTP API until the recording rules produce series, and checks
the percentiles land in the buckets the mix puts them in.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from tailbudget import _metric_names as names
from tailbudget.budget import Budget, load_budget, parse_budget
from tailbudget.export import ExportOptions, argo, flagger, keda, openslo, prometheus_rules
from tailbudget.export.common import (
    error_ratio_rule,
    latency_buckets,
    request_quantile_rule,
    stage_quantile_rule,
)
from tests._net import free_port
from tests._prometheus import require, running_prometheus

pytestmark = pytest.mark.integration

RAG = (
    Path(__file__).resolve().parents[2] / "src" / "tailbudget" / "budget" / "templates" / "rag.yaml"
)

CANARY_POD, PRIMARY_POD = "rag-7d9f8c6b5-x2k4q", "rag-primary-6c8d7b9f4-abcde"
FAST_S, SLOW_S = 0.6, 2.4  # 90% / 10% of observations
ERROR_EVERY = 50  # 2% errors
DEADLINE_S = 40.0


class App:
    """A test app exporting the tailbudget metrics, observing a fixed mix until stopped."""

    def __init__(self, budget: Budget) -> None:
        self.registry = CollectorRegistry()
        buckets = latency_buckets(budget)
        self.stage = Histogram(
            names.STAGE_DURATION,
            "stage",
            ["service", "stage"],
            buckets=buckets,
            registry=self.registry,
        )
        self.request = Histogram(
            names.REQUEST_DURATION,
            "request",
            ["service", "route"],
            buckets=buckets,
            registry=self.registry,
        )
        self.requests = Counter(
            names.REQUESTS_TOTAL.removesuffix("_total"),
            "requests",
            ["service", "route", "outcome"],
            registry=self.registry,
        )
        self.service = budget.service
        self.port = free_port()
        self.server, self.thread = start_http_server(
            self.port, addr="127.0.0.1", registry=self.registry
        )
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._run, daemon=True)
        self._worker.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(0.05):
            for _ in range(20):
                n += 1
                slow = n % 10 == 0
                self.stage.labels(self.service, "llm").observe(SLOW_S if slow else FAST_S)
                self.stage.labels(self.service, "embedding").observe(0.05)
                self.request.labels(self.service, "/chat").observe(
                    (SLOW_S if slow else FAST_S) + 0.05
                )
                outcome = "error" if n % ERROR_EVERY == 0 else "ok"
                self.requests.labels(self.service, "/chat", outcome).inc()

    def close(self) -> None:
        self._stop.set()
        self._worker.join(timeout=5)
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def rag() -> Budget:
    return load_budget(RAG)


@pytest.fixture(scope="module")
def prometheus(rag: Budget, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, App]]:
    """One Prometheus server and test app for the module (starting one takes seconds)."""
    tmp_path = tmp_path_factory.mktemp("prometheus")
    require()
    app = App(rag)
    rules = tmp_path / "rules.yaml"
    rules.write_text(prometheus_rules.render(rag, ExportOptions(rule_interval_s=1)))
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        # The app is scraped twice, as a Flagger canary pod and as a primary pod (as
        # Kubernetes service discovery labels them): every ratio and quantile is unchanged.
        "scrape_configs": [
            {
                "job_name": job,
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{app.port}"],
                        "labels": {
                            "namespace": "prod",
                            "pod": pod,
                            "rollouts_pod_template_hash": pod.rsplit("-", 2)[1],
                        },
                    }
                ],
            }
            for job, pod in (("canary", CANARY_POD), ("primary", PRIMARY_POD))
        ],
    }
    try:
        with running_prometheus(tmp_path, yaml.safe_dump(config)) as (_, url):
            yield url, app
    finally:
        app.close()


def _query(client: httpx.Client, base: str, promql: str) -> list[dict[str, Any]]:
    try:
        r = client.get(f"{base}/api/v1/query", params={"query": promql})
    except httpx.TransportError:
        return []  # not up yet
    if r.status_code != 200:
        return []
    result: list[dict[str, Any]] = r.json()["data"]["result"]
    return [x for x in result if x["value"][1] not in ("NaN", "+Inf", "-Inf")]


def _wait_for(
    client: httpx.Client,
    base: str,
    promql: str,
    start: float,
    ok: Callable[[float], bool] = lambda _: True,
) -> dict[str, Any]:
    """The first series of `promql` whose value satisfies `ok`, polling until the deadline.

    Early windows hold few scrapes (and a loaded machine observes unevenly), so a value
    is given until the deadline to settle; the failure names the last one seen.
    """
    last: list[dict[str, Any]] = []
    while time.monotonic() - start < DEADLINE_S:
        last = _query(client, base, promql) or last
        if last and ok(float(last[0]["value"][1])):
            return last[0]
        time.sleep(0.5)
    seen = last[0]["value"][1] if last else "no series"
    pytest.fail(f"{promql}: {seen} after {DEADLINE_S:g} s")


def _bucket_of(value_s: float, buckets: tuple[float, ...]) -> tuple[float, float]:
    i = bisect.bisect_left(buckets, value_s)
    return (buckets[i - 1] if i else 0.0), buckets[i]


def test_recording_rules_produce_percentiles_in_the_right_buckets(
    rag: Budget, prometheus: tuple[str, App]
) -> None:
    base, _app = prometheus
    start = time.monotonic()
    buckets = latency_buckets(rag)

    def within(value_s: float) -> Callable[[float], bool]:
        low, high = _bucket_of(value_s, buckets)
        return lambda v: low <= v <= high

    with httpx.Client(timeout=5.0) as client:
        # 10% slow: the p95 lies inside the slow value's bucket, the p50 in the fast one's.
        llm = '{stage="llm"}'
        p95 = _wait_for(client, base, stage_quantile_rule("p95", 60) + llm, start, within(SLOW_S))
        assert p95["metric"]["service"] == "rag-chat"
        _wait_for(client, base, stage_quantile_rule("p50", 60) + llm, start, within(FAST_S))
        _wait_for(client, base, request_quantile_rule("p99", 60), start, within(SLOW_S + 0.05))
        _wait_for(
            client, base, error_ratio_rule(60), start, lambda v: abs(v - 1 / ERROR_EVERY) < 0.005
        )
        # p95 end to end (~2.3 s) is over the 1.8 s scale-up point with 100s of samples.
        alert = _wait_for(client, base, 'ALERTS{alertname="TailbudgetScaleUpP95"}', start)
        assert alert["metric"]["action"] == "scale_up"
        # 2% errors with thousands of requests: the Wilson lower bound is over 1%.
        _wait_for(
            client,
            base,
            "service:tailbudget_requests:error_ratio_wilson_lower1m",
            start,
            lambda v: 0.01 < v < 1 / ERROR_EVERY,
        )


def test_keda_and_openslo_queries_answer_on_the_same_server(
    rag: Budget, prometheus: tuple[str, App]
) -> None:
    base, _app = prometheus
    start = time.monotonic()
    buckets = latency_buckets(rag)
    low, high = _bucket_of(SLOW_S + 0.05, buckets)
    query = keda.build(rag)[0]["spec"]["triggers"][0]["metadata"]["query"]
    slos = {d["metadata"]["annotations"]["tailbudget.dev/objective"]: d for d in openslo.build(rag)}

    def ratio(p: str) -> str:
        spec = slos[p]["spec"]["indicator"]["spec"]["ratioMetric"]
        good = spec["good"]["metricSource"]["spec"]["query"]
        total = spec["total"]["metricSource"]["spec"]["query"]
        return f"({good}) / ({total})"

    with httpx.Client(timeout=5.0) as client:
        # KEDA needs a single value: the end-to-end p95, inside the slow requests' bucket.
        found = _wait_for(client, base, query, start, lambda v: low <= v <= high)
        assert found["metric"] == {}
        assert len(_query(client, base, query)) == 1
        # The OpenSLO SLIs: 90% of requests (the fast ones) are under slo.p50 = 1.3 s,
        # all of them under slo.p95 = 2.8 s and slo.p99 = 5.2 s.
        _wait_for(client, base, ratio("p50"), start, lambda v: abs(v - 0.9) < 0.02)
        _wait_for(client, base, ratio("p99"), start, lambda v: v == 1.0)
        _wait_for(client, base, ratio("error_rate"), start, lambda v: abs(v - 0.98) < 0.005)
    assert time.monotonic() - start < DEADLINE_S


def test_flagger_templates_answer_and_pass_while_unknown(
    rag: Budget, prometheus: tuple[str, App]
) -> None:
    base, _app = prometheus
    start = time.monotonic()
    templates = {t["metadata"]["name"]: t["spec"]["query"] for t in flagger.build(rag)[0]}

    def filled(query: str, target: str) -> str:
        for var, value in {"{{ namespace }}": "prod", "{{ target }}": target}.items():
            query = query.replace(var, value)
        return query.replace("{{ interval }}", "1m")

    with httpx.Client(timeout=5.0) as client:
        # The Wilson lower bound of 2% errors over thousands of requests (as the policy).
        error = filled(templates["rag-chat-error-rate"], "rag")
        _wait_for(client, base, error, start, lambda v: 0.01 < v < 1 / ERROR_EVERY)
        # The same data under both pod names: the canary's p99 is the primary's.
        ratio = filled(templates["rag-chat-p99-vs-primary"], "rag")
        _wait_for(client, base, ratio, start, lambda v: abs(v - 1.0) < 1e-9)
        # A target with no pods has no data: 0, a pass, rather than Flagger's failed check.
        for name, query in templates.items():
            (only,) = _query(client, base, filled(query, "absent"))
            assert float(only["value"][1]) == 0.0, name


def test_argo_rollback_queries_read_the_canary_pods_only(prometheus: tuple[str, App]) -> None:
    base, _app = prometheus
    start = time.monotonic()
    # `for: 0` so that the queries need no minutes of history; 2% errors over a 1% limit.
    data = yaml.safe_load(RAG.read_text())
    data["policy"] = {
        "rules": [
            {"metric": "error_rate", "threshold": 0.01, "action": "rollback", "for": "0s"},
            {"metric": "p99", "threshold": 100, "action": "rollback", "for": "0s"},
        ]
    }
    budget = parse_budget(data)
    doc, _ = argo.build(budget)
    queries = {
        m["name"]: m["provider"]["prometheus"]["query"]
        for m in doc["spec"]["metrics"]
        if "prometheus" in m["provider"]
    }
    assert len(queries) == 2

    def canary(query: str, pod_hash: str) -> str:
        return query.replace("{{args.canary-hash}}", pod_hash)

    low, high = _bucket_of(SLOW_S + 0.05, latency_buckets(budget))
    with httpx.Client(timeout=5.0) as client:
        for name, query in queries.items():
            hashed = canary(query, CANARY_POD.rsplit("-", 2)[1])
            if "histogram_quantile" in query:
                found = _wait_for(client, base, hashed, start, lambda v: low <= v <= high)
            else:  # the Wilson lower bound of 2% errors over thousands of requests
                found = _wait_for(client, base, hashed, start, lambda v: 0.01 < v < 0.02)
            assert found["metric"] == {"service": "rag-chat"}, name
            # Another hash (the stable pods of an earlier rollout) has no series: no data,
            # which the successCondition passes.
            assert _query(client, base, canary(query, "5f4e3d2c1")) == [], name
