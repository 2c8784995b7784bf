"""serve per class: observations carry a class; /v1/status and /metrics gain a class
dimension bounded by the budget's class list (other labels fold into `other`, counted);
the class windows survive a crash, from the log and from the snapshot."""

from __future__ import annotations

import json

from tailbudget.serve.actions import ActionsConfig
from tailbudget.serve.ingest import BadBatch, parse_observations
from tailbudget.serve.runtime import Runtime, RuntimeConfig
from tests.control.runtimes import crash, policy

T0 = 1_800_000_000.0
CLASSES = (("premium", (("p95", 800.0),)), ("batch", (("p99", 6000.0),)))


def runtime(tmp_path) -> Runtime:
    config = RuntimeConfig(
        state_dir=tmp_path / "state", actions=ActionsConfig(log=False), classes=CLASSES
    )
    return Runtime(policy(), config)


def post(rt: Runtime, items: list[dict]) -> None:
    body = "\n".join(json.dumps(i) for i in items).encode()
    batch = parse_observations(body, now_s=T0 + 60)
    rt.ingest(batch)  # the runtime makes its labels class columns


def batch_of(t: float) -> list[dict]:
    items = [{"ts": t, "total_ms": 1000.0 + i, "class": "premium"} for i in range(30)]
    items += [{"ts": t, "total_ms": 200.0 + i, "class": "batch"} for i in range(30)]
    items += [{"ts": t, "total_ms": 100.0, "class": f"tenant-{i}"} for i in range(7)]
    items += [{"ts": t, "total_ms": 100.0} for _ in range(5)]  # no class: service only
    return items


def test_status_and_metrics_per_class_bounded(tmp_path) -> None:
    rt = runtime(tmp_path)
    post(rt, batch_of(T0))
    status = rt.status(T0 + 1)
    classes = status["classes"]
    assert set(classes) == {"premium", "batch", "other"}  # 7 unknown labels fold into other
    assert classes["other"]["observations_total"] == 7
    assert status["observations_total"] == 72
    premium = classes["premium"]
    assert premium["count"] == 30 and premium["p95"] > 800
    assert premium["objectives"][0]["verdict"] == "breach"
    assert classes["batch"]["objectives"][0]["verdict"] == "pass"
    assert "class" not in status["stages"] and not any(
        k.startswith("\x1f") for k in status["stages"]
    )
    from prometheus_client import generate_latest

    from tailbudget.serve.metrics import make_registry

    text = generate_latest(make_registry(rt)).decode()
    assert 'tailbudget_class_observations_total{class="other"} 7.0' in text
    # The scrape reads the window at the wall clock, which these timestamps are not in.
    assert "# TYPE tailbudget_class_window_latency_seconds gauge" in text
    assert "tenant-" not in text
    rt.close()


def test_class_windows_survive_a_crash_from_the_log_and_the_snapshot(tmp_path) -> None:
    rt = runtime(tmp_path)
    post(rt, batch_of(T0))
    rt.compact()  # in the snapshot
    post(rt, batch_of(T0 + 2))  # only in the log
    before = rt.status(T0 + 3)["classes"]
    crash(rt)
    again = runtime(tmp_path)
    after = again.status(T0 + 3)["classes"]
    assert after == before and after["premium"]["observations_total"] == 60
    assert after["premium"]["count"] == 60
    again.close()


def test_a_class_must_be_text() -> None:
    body = json.dumps([{"total_ms": 5, "class": 3}]).encode()
    try:
        parse_observations(body, now_s=T0)
    except BadBatch as exc:
        assert "item 0: class must be a string" in str(exc)
    else:
        raise AssertionError("a numeric class was accepted")


def test_serve_takes_the_budget_class_list() -> None:
    from tailbudget.budget import parse_budget
    from tailbudget.demo.tiers import BUDGET
    from tailbudget.serve.runner import _classes

    assert _classes(parse_budget(BUDGET)) == (
        ("premium", (("p95", 800.0),)),
        ("standard", (("p99", 1500.0),)),
        ("batch", (("p99", 6000.0),)),
    )


def test_the_prometheus_sink_labels_each_request_with_its_class() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from tailbudget.budget import parse_budget
    from tailbudget.demo.tiers import BUDGET
    from tailbudget.measure import PrometheusSink, Recorder

    registry = CollectorRegistry()
    rec = Recorder(sink=PrometheusSink(registry), budget=parse_budget(BUDGET), registry=registry)
    for tier in ("premium", "premium", "batch", "gold", None):
        fields = {"tier": tier} if tier is not None else {}
        with rec.request(route="chat", **fields):
            pass
    rec.close()
    text = generate_latest(registry).decode()
    count = "tailbudget_request_duration_seconds_count"
    assert f'{count}{{class="premium",route="chat",service="tiered-rag"}} 2.0' in text
    assert f'{count}{{class="other",route="chat",service="tiered-rag"}} 1.0' in text  # gold
    assert f'{count}{{class="",route="chat",service="tiered-rag"}} 1.0' in text


def test_a_columns_body_carries_classes_too(tmp_path) -> None:
    rt = runtime(tmp_path)
    body = json.dumps(
        {"ts": [T0] * 3, "total_ms": [900.0, 100.0, 50.0], "class": ["premium", "x", None]}
    ).encode()
    batch = parse_observations(body, now_s=T0 + 60)
    assert batch.labels == ["premium", "x", None]
    rt.ingest(batch)  # the runtime makes its labels class columns
    classes = rt.status(T0 + 1)["classes"]
    assert classes["premium"]["observations_total"] == 1
    assert classes["other"]["observations_total"] == 1
    rt.close()
    bad = json.dumps({"total_ms": [1.0], "class": [7]}).encode()
    try:
        parse_observations(bad, now_s=T0)
    except BadBatch as exc:
        assert "class must be a string" in str(exc)
    else:
        raise AssertionError("a numeric class was accepted")
