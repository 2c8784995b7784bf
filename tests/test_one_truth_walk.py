"""A new user's walk over the shared files: the same objective reads one figure, counted
over the same requests, in every command, every output of one report and the Python API.

Each test is a finding of that walk that failed on main before its fix.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tailbudget as tb
from tailbudget.cli import app
from tests.cli._expect import one_line_error
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


def test_a_log_with_one_good_row_reads_in_the_singular_and_counts_the_rest(tmp_path):
    # Three rows, two bad: the audit counts them with reasons; every count of one reads
    # "1 request" (it read "1 requests", "1 rows", "1 request(s)") and one request is not
    # said to have a percentile "between the two largest".
    log = tmp_path / "three.csv"
    log.write_text(
        "ts,total_ms\n2024-01-01T00:00:00Z,abc\n2024-01-01T00:00:01Z,-5\n2024-01-01T00:00:02Z,100\n"
    )
    rep = tb.audit(log, slo="p99=500")
    doc = json.loads(rep.to_json())
    assert doc["rows"]["rejected"] == 2
    assert doc["rows"]["rejected_reasons"] == {"non_numeric": 1, "negative": 1}
    md = rep.to_markdown()
    # "1 of 1 requests" reads as a share of the requests and stays plural.
    assert not re.search(r"(?<!of )\b1 (requests|rows)\b", md), md
    for wrong in ("request(s)", "two largest", "1 more requests"):
        assert wrong not in md, wrong
    assert "| inconclusive | yes | 1 request |" in md
    assert "on 1 request, about 99 more requests would settle it" in md


def test_a_baseline_without_the_objectives_metric_is_refused(tmp_path):
    # A microservice CSV as the baseline of a vLLM run: it has no TTFT, yet the canary
    # reported its goodput as 100% (every request "met" the ttft threshold it lacks).
    delag = SHARED_DATA / "delag_eshopper_000.csv"
    _need(TP8)
    _need(delag)
    with pytest.raises(tb.TailbudgetError) as err:
        tb.audit(TP8, slo="ttft.p95=500", baseline=delag)
    assert err.value.param == "baseline"
    assert "the baseline has no ttft values" in str(err.value)
    result = CliRunner().invoke(
        app, ["audit", str(TP8), "--slo", "ttft.p95=500", "--baseline", str(delag)]
    )
    one_line_error(result, "--baseline:", "delag_eshopper_000.csv", "no ttft values")


REPLAYABLE = [
    "vllm_llama33-70b_tp8_sharegpt_qps_inf.json",
    "vllm_grid/vllm_llama33-70b_04_tp4_pp2_IB_qps_01.json",
    "vllm_grid/vllm_llama33-70b_04_tp4_pp2_IB_qps_04.json",
    "vllm_grid/vllm_llama33-70b_04_tp4_pp2_IB_qps_inf.json",
    "aiperf_profile_export.jsonl",
]
FIGURES = "ttft.p50,ttft.p95,ttft.p99,tpot.p50,tpot.p99,e2e.p99,itl.p99"


@pytest.mark.parametrize("name", REPLAYABLE)
def test_the_fit_tables_measured_figures_are_the_audits(name):
    # simulate and capacity print each run's measured figures beside the prediction; they
    # are the audit's figures of that log. AIPerf's read 27.5 / 34.9 ms for tpot.p50 / p99
    # where the audit measures 27.6 / 33.7 (each TTFT was paired with another request's
    # end: the file is not in time order); itl.p99 was an order statistic (89.52 vs 89.50).
    from tailbudget.logs import ReadOptions
    from tailbudget.sim.fit import ModelOptions
    from tailbudget.sim.fitting import fit_logs

    log = SHARED_DATA / name
    _need(log)
    slo = ",".join(f"{f}=1e9" for f in FIGURES.split(","))
    audit = {_key(o): o["measured_ms"] for o in json.loads(tb.audit(log, slo=slo).to_json())["objectives"]}  # fmt: skip
    model = fit_logs([str(log)], ReadOptions(), ModelOptions()).model
    assert model.fit is not None and model.fit.rows
    for row in model.fit.rows:
        assert row.measured_ms == pytest.approx(audit[row.figure], rel=1e-9), row.figure


def test_a_tie_in_breach_minutes_names_every_tied_policy():
    # budget and fixed:1 both breach 1 minute on the tp8 burst; the headline named fixed:1
    # alone ("are fixed:1's") as if it did better, where it is only the cheaper of the two.
    _need(TP8)
    rep = tb.simulate(TP8, "ttft.p95=500,tpot.p99=60,e2e.p99=20000")
    minutes = {r.policy: r.record().minutes_in_breach for r in rep.runs}
    assert minutes == {"budget": 1, "fixed:1": 1}
    headline = rep.to_markdown().splitlines()[2]
    assert "1 minute, are fixed:1's and budget's, fixed:1 at the fewest replica-hours" in headline


def test_an_output_length_fit_reads_per_output_token():
    # It read "decode rises 31.6 ms per unit of output length output_tokens (R² 0.99)".
    _need(TP8)
    doc = json.loads(tb.audit(TP8, slo="e2e.p99=20000").to_json())
    (shape,) = [h for h in doc["hypotheses"] if h["kind"] == "input_shape"]
    assert "decode rises 31.6 ms per output token (output_tokens, R² 0.99)" in shape["evidence"]
    assert "per unit of" not in shape["evidence"]


def test_a_met_slo_gives_its_target_in_ms_as_the_figure():
    # "Every SLO target is met (p99 515 ms <= 900)": the target had no unit, where the
    # LLM objectives' line reads "ttft.p95 201 ms <= 300 ms".
    delag = SHARED_DATA / "delag_eshopper_000.csv"
    _need(delag)
    rec = tb.audit(delag, slo="p99=900", total="Latency").recommendation
    assert rec.text == "Every SLO target is met (p99 515 ms <= 900 ms); nothing to fix."
