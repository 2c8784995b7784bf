"""A new user's walk over the shared files: the same objective reads one figure, counted
over the same requests, in every command, every output of one report and the Python API.

Each test is a finding of that walk that failed on main before its fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tailbudget as tb
from tests.conftest import SHARED_DATA

TP8 = SHARED_DATA / "vllm_llama33-70b_tp8_sharegpt_qps_inf.json"


def _need(path: Path) -> None:
    if not path.is_file():
        pytest.skip(f"real data not found: {path}")


def _key(o: dict) -> str:  # type: ignore[type-arg]
    return f"{o['metric']}.{o['percentile']}"


def test_simulated_tpot_leaves_out_one_token_answers_as_the_audit_and_the_fit_table_do():
    # The tp8 burst holds 14 one-token answers. The audit's tpot.p99 is over the other 186
    # (vLLM's definition); simulate counted the 14 as TPOT 0 (n 200), so one report gave
    # the same run's tpot.p99 as 67 ms in its fit table and 66 ms in its policy table.
    _need(TP8)
    slo = "ttft.p95=500,tpot.p99=60"
    sim = json.loads(json.dumps(tb.simulate(TP8, slo, policy="fixed:1").json_data()))
    audit = json.loads(tb.audit(TP8, slo=slo).to_json())
    counted = {_key(o): o["n"] for o in audit["objectives"]}
    (run,) = sim["runs"]
    got = {_key(o): o for o in run["objectives"]}
    fit = {r["figure"]: r["predicted_ms"] for r in sim["fit"]}
    assert got["tpot.p99"]["n"] == counted["tpot.p99"] == 186
    assert got["tpot.p99"]["measured_ms"] == pytest.approx(fit["tpot.p99"], rel=1e-6)
    assert got["ttft.p95"]["measured_ms"] == pytest.approx(fit["ttft.p95"], rel=1e-6)
    # goodput still counts a one-token answer's TPOT as 0 (a good request, as vLLM does)
    assert sim["goodput"]["share"] >= 0.9
