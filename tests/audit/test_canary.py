"""Canary gate on objectives: a planted TTFT regression is caught beyond noise, the same
service again passes, small logs are inconclusive, and the goodput interval is Newcombe's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tailbudget.audit.canary import goodput_change
from tailbudget.cli import app

runner = CliRunner()
SLO = "ttft.p95=400,tpot.p99=80,p99=20000,goodput=0.9"


def _log(path: Path, n: int, seed: int, ttft_scale: float = 1.0) -> Path:
    rng = np.random.default_rng(seed)
    ttft = rng.lognormal(np.log(150), 0.4, n) * ttft_scale
    out = rng.integers(1, 600, n).astype(float)
    tpot = rng.lognormal(np.log(35), 0.2, n)
    decode = np.where(out > 1, tpot * (out - 1), 0.0)
    table = pa.table(
        {
            "total_ms": ttft + decode,
            "ttft_ms": ttft,
            "decode_ms": decode,
            "output_tokens": out,
            "input_tokens": rng.integers(20, 2000, n).astype(float),
        }
    )
    pq.write_table(table, path)
    return path


def _run(log: Path, base: Path, *extra: str):
    return runner.invoke(
        app,
        [
            "audit",
            str(log),
            "--slo",
            SLO,
            "--stage",
            "ttft_ms",
            "--stage",
            "decode_ms",
            "--shape",
            "output_tokens",
            "--shape",
            "input_tokens",
            "--baseline",
            str(base),
            *extra,
        ],
    )


def test_planted_ttft_regression_fails_the_gate(tmp_path: Path) -> None:
    base = _log(tmp_path / "base.parquet", 4000, 1)
    canary = _log(tmp_path / "canary.parquet", 4000, 2, ttft_scale=1.3)
    res = _run(canary, base, "--format", "json", "--fail-on-regression")
    assert res.exit_code == 1, res.output
    import json

    data = json.loads(res.stdout)
    rows = {(c["metric"], c["percentile"]): c for c in data["canary"]["objectives"]}
    ttft = rows[("ttft", "p95")]
    assert ttft["verdict"] == "regression" and ttft["p_value"] < 1e-6
    assert 0 < ttft["ci_low"] <= ttft["change_ms"] <= ttft["ci_high"]
    assert rows[("tpot", "p99")]["verdict"] == "no_change"
    assert data["canary"]["verdict"] == "regression"
    assert "ttft.p95" in data["canary"]["text"]


def test_same_service_passes(tmp_path: Path) -> None:
    base = _log(tmp_path / "base.parquet", 4000, 1)
    again = _log(tmp_path / "again.parquet", 4000, 3)
    res = _run(again, base, "--fail-on-regression")
    assert res.exit_code == 0, res.output
    assert "Canary against the baseline: **pass**" in res.output


def test_small_logs_are_inconclusive_never_pass(tmp_path: Path) -> None:
    base = _log(tmp_path / "base.parquet", 300, 1)
    again = _log(tmp_path / "again.parquet", 300, 3)
    res = _run(again, base, "--fail-on-regression")
    assert res.exit_code == 1
    assert "**inconclusive**" in res.output and "fewer than 1,000 points" in res.output


def test_fail_on_regression_needs_a_baseline(tmp_path: Path) -> None:
    log = _log(tmp_path / "a.parquet", 100, 1)
    res = runner.invoke(app, ["audit", str(log), "--slo", "p99=5", "--fail-on-regression"])
    assert res.exit_code == 2 and "add --baseline" in res.output


def test_goodput_interval_is_newcombes() -> None:
    # Newcombe (1998), example (a): 56/70 vs 48/80 -> difference 0.2, 95% CI 0.0524..0.3339.
    g = goodput_change((56, 70), (48, 80))
    assert g.change == pytest.approx(0.2)
    assert g.ci_low == pytest.approx(0.0524, abs=1e-4)
    assert g.ci_high == pytest.approx(0.3339, abs=1e-4)


def test_a_regression_small_logs_prove_is_a_regression(tmp_path: Path) -> None:
    # 300 requests a side are under the 1,000 a pass needs, but TTFT 2.5x slower is proved
    # (the one verdict rule against the baseline's upper bound): never "inconclusive".
    import json

    base = _log(tmp_path / "base.parquet", 300, 1)
    canary = _log(tmp_path / "canary.parquet", 300, 2, ttft_scale=2.5)
    res = _run(canary, base, "--format", "json", "--fail-on-regression")
    assert res.exit_code == 1, res.output
    data = json.loads(res.stdout)
    rows = {(c["metric"], c["percentile"]): c for c in data["canary"]["objectives"]}
    assert rows[("ttft", "p95")]["verdict"] == "regression"
    assert rows[("tpot", "p99")]["verdict"] == "inconclusive"  # unchanged, too few to pass
    assert data["canary"]["verdict"] == "regression"


def test_a_proved_regression_is_rare_on_the_same_service() -> None:
    # Two samples of one distribution: the proof's error rate stays under its 5%.
    from tailbudget.audit.canary import proves_regression

    rng = np.random.default_rng(5)
    hits = sum(
        proves_regression(rng.lognormal(0, 0.5, 200), rng.lognormal(0, 0.5, 400), "p95")
        for _ in range(400)
    )
    assert hits / 400 <= 0.05


def test_a_goodput_drop_small_counts_prove_is_a_regression() -> None:
    # The Nezha fault minute against its day's baseline: 98.4% -> 84.5% on 62 / 58
    # requests, Newcombe's interval wholly below 0: a regression, not "inconclusive".
    g = goodput_change((49, 58), (61, 62))
    assert g.ci_high < 0 and g.verdict == "regression"
    assert goodput_change((57, 58), (61, 62)).verdict == "inconclusive"  # no proof either way
