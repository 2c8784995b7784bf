"""`tailbudget rebudget BUDGET LOG`: the JSON contract, markdown, text and exit codes."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tailbudget import _fmt as fmt
from tailbudget.budget.load import parse_budget
from tailbudget.cli import app

from .test_rebudget_framework import SLICES, framework_log

runner = CliRunner()


@pytest.fixture
def files(tmp_path):
    pipeline = "\n".join(f"  - stage: {s}\n    budget: {{p99: {v}}}" for s, v in SLICES.items())
    budget = tmp_path / "budget.yaml"
    budget.write_text(
        f"service: scoring\nslo: {{p99: 100}}\nheadroom: 0.1\npipeline:\n{pipeline}\n"
    )
    return budget, framework_log(tmp_path)


def test_json_contract(files):
    budget, log = files
    result = runner.invoke(app, ["rebudget", str(budget), str(log), "--format", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert {"fits_now", "speedup_needed_ms", "changes", "options", "budget"} <= set(out)
    assert out["fits_now"] is False
    assert out["speedup_needed_ms"]["p99"] == pytest.approx(17.0, abs=0.01)
    assert all({"stage", "from", "to", "reason"} <= set(c) for c in out["changes"])
    assert parse_budget(out["budget"]).service == "scoring"
    assert {c["method"].split(" ")[0] for c in out["composed"]} >= {"measured"}


def test_markdown_and_text_say_the_same_gap(files, tmp_path):
    budget, log = files
    target = tmp_path / "r.md"
    md = runner.invoke(app, ["rebudget", str(budget), str(log), "-f", "md", "-o", str(target)])
    assert md.exit_code == 0 and f"wrote {target}" in md.output
    text = runner.invoke(app, ["rebudget", str(budget), str(log)])
    gap = json.loads(runner.invoke(app, ["rebudget", str(budget), str(log), "-f", "json"]).stdout)
    needed = f"{fmt.ms(gap['speedup_needed_ms']['p99'])} ms"  # the reports' one formatter
    for body in (target.read_text(), text.stdout):
        assert needed in body
        assert "feature_fetch" in body


def test_fail_on_gap_exits_1(files):
    budget, log = files
    result = runner.invoke(app, ["rebudget", str(budget), str(log), "--fail-on-gap"])
    assert result.exit_code == 1


@pytest.mark.parametrize("which", ["budget", "log"])
def test_missing_file_is_one_line_exit_2(files, tmp_path, which):
    budget, log = files
    args = (
        [str(tmp_path / "nope.yaml"), str(log)]
        if which == "budget"
        else [str(budget), str(tmp_path / "nope.parquet")]
    )
    result = runner.invoke(app, ["rebudget", *args])
    assert result.exit_code == 2
    assert len([ln for ln in result.output.splitlines() if ln.strip()]) == 1


def test_a_budget_that_fits_says_so(tmp_path):
    log = framework_log(tmp_path)
    budget = tmp_path / "roomy.yaml"
    pipeline = "\n".join(f"  - stage: {s}\n    budget: {{p99: 60}}" for s in SLICES)
    budget.write_text(f"service: scoring\nslo: {{p99: 300}}\npipeline:\n{pipeline}\n")
    result = runner.invoke(app, ["rebudget", str(budget), str(log), "-f", "json"])
    out = json.loads(result.stdout)
    assert out["fits_now"] is True and out["changes"] == [] and out["speedup_needed_ms"]["p99"] == 0
