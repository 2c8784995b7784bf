"""Objectives on real vLLM results: figures equal those from the raw arrays (vLLM's
definitions), goodput equals the count within every threshold, and the all-at-once run's
TTFT breach is found to be queueing against the low-load run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tailbudget.audit import AuditConfig, run_audit
from tailbudget.budget.objectives import parse_objectives
from tailbudget.cli import app
from tailbudget.logs import ReadOptions, read_log
from tests.conftest import SHARED_DATA

GRID = "vllm_grid/vllm_llama33-70b_04_tp4_pp2_IB_qps_{}.json"
FILES = [
    "vllm_llama33-70b_tp8_sharegpt_qps_inf.json",
    *(GRID.format(r) for r in ("01", "04", "inf")),
]
SLO = "p99=30000,ttft.p50=300,ttft.p95=500,tpot.p90=45,tpot.p99=60,itl.p99.9=150,goodput=0.9"
runner = CliRunner()


def _raw(path: Path) -> dict[str, np.ndarray]:
    d = json.loads(path.read_text())
    ttft = np.array(d["ttfts"], dtype=float)
    out = np.array(d["output_lens"], dtype=float)
    e2e = ttft + np.array([sum(g) for g in d["itls"]])
    tpot = np.where(out > 1, (e2e - ttft) / np.maximum(out - 1, 1), 0.0)
    gaps = np.concatenate([np.asarray(g, dtype=float) for g in d["itls"]])
    maxgap = np.array([max(g) if g else 0.0 for g in d["itls"]])
    return {
        "ttft": ttft * 1000,
        "tpot": tpot * 1000,
        "tpot_pct": tpot[out > 1] * 1000,  # vLLM's percentiles leave one-token answers out
        "e2e": e2e * 1000,
        "itl": gaps * 1000,
        "maxgap": maxgap * 1000,
    }


def _audit(path: Path, slo: str = SLO, baseline: Path | None = None):
    log = read_log(str(path), ReadOptions())
    base = read_log(str(baseline), ReadOptions()) if baseline is not None else None
    objs = parse_objectives(slo)
    cfg = AuditConfig(objs, baseline=base)
    return run_audit(log, cfg)


@pytest.mark.parametrize("name", FILES)
def test_percentiles_and_goodput_equal_the_raw_arrays(name: str) -> None:
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"{path} not found")
    raw = _raw(path)
    report = _audit(path)
    got = {(o.metric, o.percentile): o.measured_ms for o in report.objectives}
    want = {
        ("e2e", "p99"): np.percentile(raw["e2e"], 99),
        ("ttft", "p50"): np.percentile(raw["ttft"], 50),
        ("ttft", "p95"): np.percentile(raw["ttft"], 95),
        ("tpot", "p90"): np.percentile(raw["tpot_pct"], 90),
        ("tpot", "p99"): np.percentile(raw["tpot_pct"], 99),
        ("itl", "p99.9"): np.percentile(raw["itl"], 99.9),
    }
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-9), key
    good = (
        (raw["e2e"] <= 30000) & (raw["ttft"] <= 500) & (raw["tpot"] <= 60) & (raw["maxgap"] <= 150)
    )
    assert report.goodput.good == int(good.sum())
    assert report.goodput.share == pytest.approx(good.mean())
    assert report.goodput.thresholds == {"e2e": 30000, "ttft": 500, "tpot": 60, "itl": 150}


def test_all_at_once_ttft_breach_is_queueing_against_the_low_load_run() -> None:
    burst, calm = SHARED_DATA / GRID.format("inf"), SHARED_DATA / GRID.format("01")
    if not burst.exists():
        pytest.skip("vllm_grid not found")
    report = _audit(burst, "ttft.p95=500,p99=60000", baseline=calm)
    (ttft,) = [o for o in report.objectives if o.metric == "ttft"]
    assert ttft.verdict == "breach" and ttft.measured_ms > 1000
    (cause,) = [h for h in report.hypotheses if h.objective == "ttft.p95"]
    assert cause.kind == "llm_queueing"
    assert "breach is queueing" in cause.evidence
    # The evidence is in numbers from both logs: the same prompts, ten times the TTFT.
    base_mean = float(np.mean(_raw(calm)["ttft"]))
    assert cause.figures["baseline_ttft_mean_ms"] == pytest.approx(base_mean, rel=1e-6)
    assert cause.figures["queue_ms"] > 0.5 * cause.figures["ttft_mean_ms"]
    fix = next(f for f in report.ranking if f.objective == "ttft.p95")
    assert fix.fix == "add_llm_replicas" and fix.kind == "llm_queueing"
    assert fix.objective_after_ms < ttft.target_ms < fix.objective_before_ms
    assert fix.goodput_after is not None and fix.goodput_before is not None
    assert fix.goodput_after > fix.goodput_before
    assert report.recommendation.choice == "add_capacity"
    assert "queueing" in report.recommendation.text


def test_without_baseline_or_timestamps_the_cause_says_what_is_missing() -> None:
    burst = SHARED_DATA / GRID.format("inf")
    if not burst.exists():
        pytest.skip("vllm_grid not found")
    report = _audit(burst, "ttft.p95=500")
    (cause,) = [h for h in report.hypotheses if h.objective == "ttft.p95"]
    assert (
        "undetermined" in cause.evidence
        and "no baseline" in cause.evidence
        and "--" not in cause.evidence
    )


@pytest.mark.parametrize(
    ("slo", "needle"),
    [
        ("ttft.p100=5", "'p100' is not a percentile"),
        ("tpot.p95=-1", "tpot.p95 must be a positive number of ms"),
        ("goodput=1.5", "must be in (0, 1]"),
        ("ttfb.p95=300", "'ttfb': not a metric (e2e, ttft, tpot, itl)"),
        ("retrieval.p99=800", "'retrieval': not a metric (e2e, ttft, tpot, itl)"),
        ("p99=inf", "finite"),
        ("p95=900,p99=800", "must not be lower"),
    ],
)
def test_bad_objectives_exit_2_with_one_line(slo: str, needle: str) -> None:
    path = SHARED_DATA / GRID.format("01")
    if not path.exists():
        pytest.skip("vllm_grid not found")
    res = runner.invoke(app, ["audit", str(path), "--slo", slo])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]


def test_cli_gates_on_objectives_and_writes_the_contract(tmp_path: Path) -> None:
    path = SHARED_DATA / GRID.format("inf")
    if not path.exists():
        pytest.skip("vllm_grid not found")
    out = tmp_path / "r.json"
    res = runner.invoke(
        app, ["audit", str(path), "--slo", "ttft.p95=500", "-f", "json", "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    (obj,) = data["objectives"]
    assert set(obj) >= {"metric", "percentile", "target_ms", "measured_ms", "verdict", "gated"}
    assert set(data["goodput"]) >= {"share", "min", "thresholds", "verdict"}
    res = runner.invoke(app, ["audit", str(path), "--slo", "ttft.p95=500", "--fail-on-breach"])
    assert res.exit_code == 1
    assert res.output.startswith("# Latency audit: ") and "\n## Objectives" in res.output
    ok = runner.invoke(app, ["audit", str(path), "--slo", "ttft.p95=5000", "--fail-on-breach"])
    assert ok.exit_code == 0, ok.output


def test_html_opens_with_objectives_and_draws_ttft_tpot_against_targets(tmp_path: Path) -> None:
    path = SHARED_DATA / GRID.format("inf")
    if not path.exists():
        pytest.skip("vllm_grid not found")
    out = tmp_path / "r.html"
    slo = "ttft.p95=500,ttft.p99=2000,tpot.p99=60"
    res = runner.invoke(app, ["audit", str(path), "--slo", slo, "-f", "html", "-o", str(out)])
    assert res.exit_code == 0, res.output
    html = out.read_text()
    assert html.index('id="objectives"') < html.index('id="provenance"')
    for gid in ("tb-ttft-cdf-curve", "tb-ttft-cdf-target-1", "tb-tpot-cdf-target-0"):
        assert gid in html
