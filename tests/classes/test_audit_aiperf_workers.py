"""A real file with a natural class: the AIPerf export's worker id (`metadata.worker_id`,
the reader's `worker_id` column), audited per class with `--class-by worker_id`."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
from typer.testing import CliRunner

import tailbudget as tb
from tailbudget.cli import app
from tests._data import DATA

PATH = DATA / "aiperf_profile_export.jsonl"


def _latencies() -> dict[str, list[float]]:
    """Each worker's request latencies (ms) from the raw file: requests with a latency."""
    out: dict[str, list[float]] = {}
    for line in PATH.read_text().splitlines():
        rec = json.loads(line)
        lat = rec["metrics"].get("request_latency")
        if lat is None:
            continue  # cancelled before a latency: a failure, not a latency row
        scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1000.0}[lat["unit"]]
        out.setdefault(rec["metadata"]["worker_id"], []).append(lat["value"] * scale)
    return out


def test_each_worker_is_a_class_measured_on_its_own_requests() -> None:
    raw = _latencies()
    doc = json.loads(tb.audit(PATH, "p99=5000", class_by="worker_id").to_json())
    assert doc["class_by"] == "worker_id"
    shown = doc["classes"]
    # Unlisted values: the 12 with most requests, against the service's p99, ungated.
    assert len(shown) == min(12, len(raw))
    counts = Counter({w: len(v) for w, v in raw.items()})
    assert sorted(c["requests"] for c in shown) == sorted(n for _, n in counts.most_common(12))
    for c in shown:
        mine = sorted(raw[c["name"]])
        assert c["requests"] == len(mine) and not c["listed"]
        (o,) = c["objectives"]
        # The p99 of a handful of requests lies between its two largest.
        assert mine[-2] <= o["measured_ms"] <= mine[-1] * 1.0001
        assert o["verdict"] == "breach"  # every request over 5 s: a proven breach


def test_a_listed_worker_is_gated_on_its_own_p99() -> None:
    raw = _latencies()
    worker = max(raw, key=lambda w: (len(raw[w]), w))
    top = float(np.max(raw[worker]))
    slo = f"p99=20000,{worker}:p99={top * 0.9:.0f}"
    result = CliRunner().invoke(
        app,
        ["audit", str(PATH), "--class-by", "worker_id", "--slo", slo, "--fail-on-breach",
         "--format", "json"],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    # The service's p99 of 20 s is not breached (89 requests: too few to prove a pass).
    assert doc["objectives"][0]["verdict"] == "inconclusive"
    (c,) = [c for c in doc["classes"] if c["name"] == worker]
    assert c["listed"] and c["objectives"][0]["verdict"] == "breach"
    assert doc["recommendation"]["text"].startswith(f"Class {worker} ")
    text = CliRunner().invoke(app, ["audit", str(PATH), "--class-by", "worker_id", "--slo", slo])
    assert f"**Breach: class {worker} e2e.p99 over target" in text.stdout
