"""`init --from LOG --class-by COLUMN`: a classes: block measured per class, which plan
reads back at each class's own figures; a stated class objective the log breaches is
said, and the measured service does not fit."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

import tailbudget as tb
from tailbudget.cli import app
from tailbudget.demo.tiers import tiered


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    path = tmp_path_factory.mktemp("init") / "tiers.parquet"
    tiered(n=6000, seed=3).to_parquet(path, index=False)
    return path


def test_each_class_measured_and_planned_at_its_own_figures(log) -> None:
    df = tiered(n=6000, seed=3)
    measured = tb.measure_budget(log, class_by="tier")
    cs = measured.budget.class_set
    assert cs is not None and cs.by == "tier"
    assert set(cs.names()) == {"premium", "standard", "batch"}
    batch = cs.get("batch")
    assert batch is not None and batch.skip == ("rerank",)  # batch never calls the reranker
    plan = tb.plan(measured.budget)
    assert plan.classes is not None
    for row in plan.classes:
        mine = df[df.tier == row.name].total_ms
        for o in row.objectives:
            want = np.percentile(mine, float(o.percentile[1:]))
            assert o.composed_ms is not None and abs(o.composed_ms / want - 1) < 0.01
        assert row.fits


def test_a_stated_class_breach_is_said_and_does_not_fit(log) -> None:
    result = CliRunner().invoke(
        app, ["init", "--from", str(log), "--class-by", "tier", "--slo", "p99=1500,premium:p95=800"]
    )
    assert result.exit_code == 0, result.output
    assert "premium: {slo: {p95: 800}, priority: 0" in result.stdout
    assert "does NOT fit" in result.output
    assert "breach: class premium e2e.p95" in result.output


def test_class_flags_need_a_log() -> None:
    result = CliRunner().invoke(app, ["init", "--class-by", "tier"])
    assert result.exit_code == 2 and "--class-by goes with --from" in result.output


def test_class_parts_as_a_mapping_measure_the_same_budget(log) -> None:
    """`measure_budget` takes class parts as a mapping, as audit and simulate do: each
    part read once by `Objectives.coerce`, never joined into a string and read again."""
    text = tb.measure_budget(log, "p99=1500,premium:p95=800", class_by="tier")
    mapping = tb.measure_budget(log, {"p99": 1500, "premium:p95": 800}, class_by="tier")
    assert mapping.text == text.text and mapping.fits == text.fits
