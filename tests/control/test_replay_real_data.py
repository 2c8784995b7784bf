"""Replay on the real recorded logs in ../shared/data (skipped when the folder is missing)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailbudget.cli import app

# the repo's parent folder holds shared/ (as in CI); TAILBUDGET_SHARED_DATA overrides it
DATA = Path(
    os.environ.get("TAILBUDGET_SHARED_DATA")
    or Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
)
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data is not here")
runner = CliRunner()


def test_trainticket_spans_replay() -> None:
    res = runner.invoke(
        app, ["replay", str(DATA / "nezha_trainticket_baseline_spans.csv"), "-f", "json"]
    )
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    # one request per trace (71 root spans) over about three minutes
    assert rep["rows"]["used"] == rep["rows"]["total"] > 50
    assert 120 < rep["duration_s"] < 600
    assert sum(1 for _ in rep["timeline"]) == rep["evaluations"]
    # sparse traffic: windows below min_samples are unknown, the busy middle is known
    counts = [w["count"] for w in rep["timeline"]]
    assert all(w["known"] == (w["count"] >= 20) for w in rep["timeline"])
    assert min(counts) < 20 <= max(counts)
    known = [w for w in rep["timeline"] if w["known"]]
    assert all(w["p50"] <= w["p95"] <= w["p99"] for w in known)
    # a fault-free minute: no rollback, and the missing baseline is stated
    assert not [d for d in rep["decisions"] if d["action"] == "rollback"]
    assert "no baseline: p99 rollback rule inactive" in rep["notes"]


@pytest.mark.parametrize(
    "name",
    ["delag_eshopper_000.csv", "vllm_llama33-70b_tp8_sharegpt_qps_inf.json"],
)
def test_logs_without_time_exit_2(name: str) -> None:
    res = runner.invoke(app, ["replay", str(DATA / name)])
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--timestamp" in lines[0]
