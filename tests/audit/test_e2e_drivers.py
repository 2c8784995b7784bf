"""The audit's recommendation names every gated breach, whichever one it starts with."""

from __future__ import annotations

from tailbudget.audit.e2e_drivers import naming_every_breach
from tailbudget.audit.report import ObjectiveRow, Recommendation


def row(metric: str, p: str, target: float, measured: float, driver: str = "") -> ObjectiveRow:
    verdict = "breach" if measured > target else "pass"
    return ObjectiveRow(
        metric=metric,
        percentile=p,
        target_ms=target,
        measured_ms=measured,
        verdict=verdict,
        gated=True,
        n=200,
        driver=driver,
    )


def test_an_unnamed_breach_is_added_and_a_named_one_is_not():
    rows = [
        row("tpot", "p99", 60, 76),
        row("e2e", "p99", 20_000, 23_543, "decode holds"),
        row("ttft", "p95", 500, 448),
    ]
    rec = Recommendation(choice="add_capacity", text="tpot.p99 is 16 ms over its 60 ms target.")
    text = naming_every_breach(rec, rows).text
    assert text == (
        "tpot.p99 is 16 ms over its 60 ms target. Also over target: e2e.p99 23,543 ms "
        "against its 20,000 ms (what drives it is under Objectives)."
    )


def test_the_e2e_tails_own_words_name_its_percentile():
    rows = [row("e2e", "p99", 500, 515)]
    rec = Recommendation(choice="fix_tail", text="p99 is 15 ms over target. Start with x.")
    assert naming_every_breach(rec, rows) == rec


def test_a_breached_stage_objective_gets_the_same_driver_in_audit_and_rebudget(tmp_path):
    # A stage objective over its target is explained like an e2e one, from one function:
    # the audit's objectives[].driver and rebudget's gaps[].says are the same text.
    import json

    import pytest
    from typer.testing import CliRunner

    from tailbudget.cli import app
    from tests.conftest import SHARED_DATA

    log = SHARED_DATA / "vllm_llama33-70b_tp8_sharegpt_qps_inf.json"
    if not log.is_file():
        pytest.skip(f"real data not found: {log}")
    runner, budget = CliRunner(), tmp_path / "b.yaml"
    made = runner.invoke(
        app,
        ["init", "--from", str(log), "--slo", "decode.p99=15000,e2e.p99=30000", "-o", str(budget)],
    )
    assert made.exit_code == 0, made.output
    audit = json.loads(
        runner.invoke(app, ["audit", str(log), "--budget", str(budget), "--format", "json"]).stdout
    )
    rebudget = json.loads(
        runner.invoke(app, ["rebudget", str(budget), str(log), "--format", "json"]).stdout
    )
    rows = {f"{o['metric']}.{o['percentile']}": o for o in audit["objectives"]}
    assert rows["decode.p99"]["verdict"] == "breach"
    assert rows["e2e.p99"]["driver"] == ""  # passing: no driver
    said = rows["decode.p99"]["driver"]
    assert said.startswith("decode.p99 is ") and "requests at or above it spend" in said
    assert "also above the end-to-end p99" in said
    assert [g["says"] for g in rebudget["gaps"] if g["objective"] == "decode.p99"] == [said]
    markdown = runner.invoke(app, ["audit", str(log), "--budget", str(budget)]).stdout
    assert f"- **decode.p99**: {said}" in markdown
