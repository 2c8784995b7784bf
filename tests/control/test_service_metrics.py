"""`/metrics` of the runtime: per-stage window quantiles and counts next to the end-to-end ones."""

from __future__ import annotations

import time

import numpy as np
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tailbudget import _metric_names as names
from tailbudget.budget.policy import parse_policy
from tailbudget.serve.actions import ActionsConfig
from tailbudget.serve.batch import Batch
from tailbudget.serve.metrics import make_registry
from tailbudget.serve.runtime import Runtime, RuntimeConfig
from tailbudget.serve.wal import StageColumn


def test_stage_quantiles_counts_and_totals_are_exported(tmp_path):
    policy = parse_policy({"window": "60s", "evaluate_every": "10s", "min_samples": 5})
    rt = Runtime(policy, RuntimeConfig(state_dir=tmp_path / "s", actions=ActionsConfig(log=False)))
    now = time.time()  # the collector reads the window at scrape time
    n = 200
    total = np.linspace(100, 299, n)
    stages = {
        "retrieval": StageColumn(np.arange(n, dtype=np.int64), total * 0.25),
        "llm": StageColumn(np.arange(0, n, 2, dtype=np.int64), total[::2] * 0.5),
    }
    rt.ingest(Batch(np.full(n, now - 1), total, np.zeros(n, dtype=bool), stages))
    text = generate_latest(make_registry(rt)).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    quantiles = {
        (s.labels["stage"], s.labels["quantile"]): s.value
        for s in families[names.STAGE_WINDOW_QUANTILE].samples
    }
    status = rt.status(now)["stages"]
    assert set(quantiles) == {
        (st, q) for st in ("llm", "retrieval") for q in ("0.5", "0.95", "0.99")
    }
    for stage in ("llm", "retrieval"):
        for q, key in (("0.5", "p50"), ("0.95", "p95"), ("0.99", "p99")):
            assert quantiles[(stage, q)] == status[stage][key] / 1000.0  # seconds
    assert 0.045 < quantiles[("retrieval", "0.5")] < 0.055
    counts = {s.labels["stage"]: s.value for s in families[names.STAGE_WINDOW_OBSERVATIONS].samples}
    assert counts == {"llm": 100.0, "retrieval": 200.0}
    totals = families[names.STAGE_OBSERVATIONS_TOTAL.removesuffix("_total")]
    assert totals.type == "counter"
    assert {s.labels["stage"]: s.value for s in totals.samples if s.name.endswith("_total")} == {
        "llm": 100.0,
        "retrieval": 200.0,
    }
    rt.close()


def test_no_stage_samples_without_stage_times(tmp_path):
    policy = parse_policy({"window": "60s", "evaluate_every": "10s", "min_samples": 5})
    rt = Runtime(policy, RuntimeConfig(state_dir=tmp_path / "s", actions=ActionsConfig(log=False)))
    rt.ingest(Batch(np.full(10, time.time()), np.full(10, 50.0), np.zeros(10, dtype=bool)))
    text = generate_latest(make_registry(rt)).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families[names.STAGE_WINDOW_QUANTILE].samples == []
    assert families[names.WINDOW_QUANTILE].samples  # the end-to-end window is there
    rt.close()
