"""`audit --format html` and `replay --format html` through the CLI, on a generated log."""

from __future__ import annotations

import json

import pyarrow.csv as pacsv
import pytest
from typer.testing import CliRunner

from tailbudget.cli import app
from tests.report import html_probe as hp
from tests.report import html_sample


@pytest.fixture(scope="module")
def log_csv(tmp_path_factory):
    table = html_sample.as_table(html_sample.make_log(n=3000))
    path = tmp_path_factory.mktemp("log") / "requests.csv"
    pacsv.write_csv(table, path)
    return path


def test_audit_format_html_writes_a_page_with_charts(log_csv, tmp_path):
    out = tmp_path / "report.html"
    args = [
        "audit",
        str(log_csv),
        "--slo",
        "p50=1300,p95=2800,p99=5200",
        "--stages",
        "*_ms",
        "--total",
        "total_ms",
        "--timestamp",
        "ts",
        "--shape",
        "seq_len",
        "--cohort",
        "route",
        "--format",
        "html",
        "-o",
        str(out),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    html = out.read_text()
    page = hp.parse(html)
    assert page.sections[:5] == ["verdict", "objectives", "provenance", "snapshot", "stages"]
    figs = hp.figures(html)
    assert {"cdf", "stages", "delta", "cohorts"} <= set(figs)
    assert figs["delta"][0].split(" drives ")[0] in {
        "llm",
        "retrieval",
        "embedding",
        "keyword_search",
    }


def test_replay_format_html_marks_every_decision(log_csv, tmp_path):
    out = tmp_path / "replay.html"
    args = [
        "replay",
        str(log_csv),
        "--total",
        "total_ms",
        "--timestamp",
        "ts",
        "--baseline-p99",
        "3000",
        "--format",
        "html",
        "-o",
        str(out),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    json_result = CliRunner().invoke(app, [*args[:-4], "--format", "json"])
    decisions = json.loads(json_result.output)["decisions"]
    _, svg = hp.figures(out.read_text())["replay"]
    marks = [
        m for m in hp.by_id(svg, "tb-replay-decision-") if m.get("id").split("-")[-1].isdigit()
    ]
    assert decisions and len(marks) == len(decisions)
