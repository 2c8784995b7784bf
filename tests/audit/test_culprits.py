"""Culprits on real fault data (Nezha Train-Ticket, DeLag E-Shopper) and on built logs."""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tailbudget.audit import AuditConfig, run_audit
from tailbudget.audit.culprits import WEAK_SLOW
from tailbudget.logs import ReadOptions, read_log
from tests._data import DATA

FAULTS = DATA / "nezha_faults"
BASELINE = DATA / "nezha_trainticket_baseline_spans.csv"
DELAG = DATA / "delag_eshopper_000.csv"
needs_data = pytest.mark.skipif(not FAULTS.is_dir(), reason="../shared/data is not here")


def _fault(minute: str) -> dict[str, str]:
    """The fault injected last before the minute's first span (from the fault lists)."""
    with open(FAULTS / f"{minute}_trace.csv", newline="") as fh:
        first = min(int(r["StartTimeUnixNano"]) for r in csv.DictReader(fh))
    start = datetime.fromtimestamp(first / 1e9, tz=UTC)
    faults = []
    for path in FAULTS.glob("*-fault_list.json"):
        for entries in json.loads(path.read_text()).values():
            faults += entries
    before = [
        f
        for f in faults
        if (t := datetime.fromisoformat(f["inject_time"]).replace(tzinfo=UTC)) <= start
        and start - t < timedelta(minutes=10)
    ]
    return max(before, key=lambda f: f["inject_time"])


def _service(pod: str) -> str:
    return pod.rsplit("-", 2)[0]  # the stage keeps the service's own name


def _audit_minute(minute: str, baseline: Path = BASELINE):
    # span_profile: what the CLI and the API read when a baseline is given (contention)
    options = ReadOptions(span_stage="service", span_profile=True)
    log = read_log(str(FAULTS / f"{minute}_trace.csv"), options)
    base = read_log(str(baseline), options.with_(span_keep=log.stages))
    return run_audit(log, AuditConfig.of_e2e({"p99": 500.0}, baseline=base))


@needs_data
@pytest.mark.parametrize(
    ("minute", "baseline"),
    [
        ("2023-01-29_14_51", "nezha_trainticket_baseline_spans.csv"),
        ("2023-01-30_12_01", "nezha_faults/baseline_2023-01-30_11_39_trace.csv"),
    ],
)
def test_cpu_contention_minutes_name_the_faulted_service_first(minute, baseline):
    # Each against its own day's fault-free minute, as the data's README pairs them.
    fault = _fault(minute)
    assert fault["inject_type"] == "cpu_contention"
    report = _audit_minute(minute, DATA / baseline)
    top = report.culprits[0]
    assert top.stage == _service(fault["inject_pod"])
    assert top.figures["contention"] > 0.5
    assert "contention, not one slow call" in top.evidence


@needs_data
@pytest.mark.parametrize("minute", ["2023-01-30_12_38", "2023-01-30_13_01", "2023-01-30_13_54"])
def test_network_delay_minutes_name_the_faulted_service_first(minute):
    fault = _fault(minute)
    assert fault["inject_type"] == "network_delay"
    report = _audit_minute(minute)
    top = report.culprits[0]
    assert top.stage == _service(fault["inject_pod"])
    # A minute holds a few dozen traces: the slow group is tiny, the baseline carries it.
    assert top.weak and report.tail.n_slow < WEAK_SLOW
    assert top.figures["growth_low_ms"] > 0
    assert top.stage in report.recommendation.text
    # Critical-path stages add up to the total: nothing is counted twice.
    assert not report.overlap.nested


@needs_data
def test_exception_minute_says_what_the_spans_show():
    minute = "2023-01-29_10_58"
    fault = _fault(minute)
    assert fault["inject_type"] == "exception"
    report = _audit_minute(minute)
    faulted = _service(fault["inject_pod"])
    # The exception does not slow the faulted service, and this span table carries no
    # status: the culprits are the services that did slow down, and the report says why
    # the faulted one cannot be seen.
    assert faulted not in [c.stage for c in report.culprits]
    assert report.culprits and report.culprits[0].weak
    notes = " ".join(report.provenance.notes)
    assert "no status column" in notes and "fewer than 20" in notes


@needs_data
def test_delag_innermost_rpc_is_the_first_culprit():
    with open(DELAG, newline="") as fh:
        rows = list(csv.DictReader(fh))

    def shift(col: str) -> float:
        bad = [float(r[col]) for r in rows if int(r["anomaly"]) > 0]
        good = [float(r[col]) for r in rows if int(r["anomaly"]) == 0]
        return statistics.median(bad) - statistics.median(good)

    assert shift("ProductsControllerFindproductrandom") == pytest.approx(101.0)
    assert shift("GatewayGet") == pytest.approx(104.5)
    log = read_log(str(DELAG), ReadOptions(total="Latency", stages_glob="*Controller*,Gateway*"))
    report = run_audit(log, AuditConfig.of_e2e({"p99": 450.0}))
    first = report.culprits[0]
    assert first.stage == "ProductsControllerFindproductrandom"
    assert first.inside == "GatewayGet"
    assert not first.weak
    gateway = next(c for c in report.culprits if c.stage == "GatewayGet")
    assert "ProductsControllerFindproductrandom" in gateway.contains
    assert gateway.score < first.score and "context" in gateway.evidence
    assert {(n.outer, n.inner) for n in report.nesting} >= {
        ("GatewayGet", "ProductsControllerFindproductrandom"),
        ("GatewayGet", "ProductsControllerFindproduct"),
    }
    assert "ProductsControllerFindproductrandom (inside GatewayGet)" in report.recommendation.text
    from tailbudget.report.audit_md import audit_markdown
    from tailbudget.report.html import render_audit_html

    md = audit_markdown(report)
    assert "Culprits, most likely first" in md and "GatewayGet contains" in md
    html = render_audit_html(report)
    assert "<h3>Culprits</h3>" in html and "GatewayGet contains" in html


def _planted(tmp_path: Path) -> Path:
    """60 minutes of requests; from minute 30 on, `db` is 40 ms slower for every request."""
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    rows = []
    for i in range(3600):
        late = i >= 1800
        db = 10.0 + (i % 7) + (40.0 if late else 0.0)
        app = 20.0 + (i % 5) * 3
        rows.append(
            {
                "ts": t0 + timedelta(seconds=i),
                "app_ms": app,
                "db_ms": db,
                "total_ms": app + db,
            }
        )
    path = tmp_path / "log.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_a_window_straddling_an_event_is_split(tmp_path):
    log = read_log(str(_planted(tmp_path)))
    deploy = datetime(2026, 3, 1, 0, 30, tzinfo=UTC)
    report = run_audit(log, AuditConfig.of_e2e({"p99": 60.0}, events=((deploy, "deploy"),)))
    top = report.culprits[0]
    assert top.stage == "db"
    assert top.figures["growth_ms"] == pytest.approx(40.0, abs=0.5)
    assert "before deploy" in top.evidence


def test_cli_span_stage_and_culprits_in_json(tmp_path):
    if not FAULTS.is_dir():
        pytest.skip("../shared/data is not here")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tailbudget",
            "audit",
            str(FAULTS / "2023-01-30_13_54_trace.csv"),
            "--slo",
            "p99=500",
            "--span-stage",
            "service",
            "--baseline",
            str(BASELINE),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    doc = json.loads(out.stdout)
    assert doc["culprits"][0]["stage"] == "ts-route-service"
    assert set(doc["culprits"][0]) >= {"stage", "score", "evidence"}
    args = ["audit", str(DELAG), "--slo", "p99=5", "--span-stage", "pods"]
    bad = subprocess.run(
        [sys.executable, "-m", "tailbudget", *args],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "'pods'" in bad.stderr
