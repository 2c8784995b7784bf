"""`tailbudget plan` and `init` through Typer's CliRunner: output, exit codes, errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tailbudget.cli import app
from tailbudget.cli.init import Template, template_text
from tests.conftest import EXAMPLES

runner = CliRunner()


def test_plan_fits_exit_0_text():
    result = runner.invoke(app, ["plan", str(EXAMPLES / "seed-rag.yaml"), "--samples", "20000"])
    assert result.exit_code == 0, result.output
    assert "additive" in result.output and "composed" in result.output
    assert "FITS" in result.output


def test_plan_does_not_fit_exit_1_json():
    result = runner.invoke(
        app,
        ["plan", str(EXAMPLES / "seed-llm-decode.yaml"), "--format", "json", "--samples", "5000"],
    )
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["fits"] is False
    assert round(data["llm"][0]["total_ms"]) == 55_695


def test_plan_markdown_to_file(tmp_path):
    out = tmp_path / "plan.md"
    result = runner.invoke(
        app,
        ["plan", str(EXAMPLES / "seed-rag.yaml"), "-f", "md", "-o", str(out), "--samples", "5000"],
    )
    assert result.exit_code == 0
    text = out.read_text()
    assert text.startswith("# Latency budget plan: seed-rag")
    assert "| **additive** (gates) | 1,300 | 2,600 | 5,200 |" in text


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (None, "budget file not found"),
        ("slo: [", "not valid YAML"),
        ("slo: {p99: 100}\npipeline: [{stage: a, budget: {p95: x}}]", "pipeline[0].budget.p95"),
    ],
)
def test_plan_bad_input_exit_2_one_line(tmp_path, content, fragment):
    path = tmp_path / "b.yaml"
    if content is not None:
        path.write_text(content)
    result = runner.invoke(app, ["plan", str(path)])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert fragment in lines[0]
    assert "Traceback" not in result.output


def test_plan_rejects_silly_sample_counts():
    result = runner.invoke(app, ["plan", str(EXAMPLES / "seed-rag.yaml"), "--samples", "5"])
    assert result.exit_code == 2
    assert "--samples" in result.stderr


@pytest.mark.parametrize("template", [t.value for t in Template])
def test_init_templates_plan_cleanly(tmp_path, template):
    out = tmp_path / f"{template}.yaml"
    result = runner.invoke(app, ["init", "--template", template, "-o", str(out)])
    assert result.exit_code == 0
    assert out.read_text().startswith("# tailbudget budget file")
    planned = runner.invoke(app, ["plan", str(out), "--samples", "5000"])
    assert planned.exit_code == 0, planned.output


def test_init_refuses_to_overwrite(tmp_path):
    out = tmp_path / "b.yaml"
    out.write_text("mine")
    result = runner.invoke(app, ["init", "-o", str(out)])
    assert result.exit_code == 2 and out.read_text() == "mine"


@pytest.mark.parametrize("template", [t.value for t in Template])
def test_examples_folder_holds_the_templates(template):
    assert (EXAMPLES / f"{template}.yaml").read_text() == template_text(template)
