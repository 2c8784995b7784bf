"""plan per class: each class's objectives against the composed figures of the stages it
goes through (batch skips rerank); a class that does not fit fails the plan, named."""

from __future__ import annotations

import json

from typer.testing import CliRunner

import tailbudget as tb
from tailbudget.cli import app
from tailbudget.demo.tiers import BUDGET


def test_each_class_composed_over_its_own_stages() -> None:
    plan = tb.plan(BUDGET)
    assert plan.classes is not None
    rows = {c.name: c for c in plan.classes}
    assert rows["batch"].stages == ["retrieval", "llm"] and rows["batch"].skip == ["rerank"]
    assert rows["premium"].stages == ["retrieval", "rerank", "llm"]
    # Without the reranker batch composes lower than the classes that call it.
    assert rows["batch"].composed["p99"] < rows["standard"].composed["p99"]
    assert not rows["premium"].fits and rows["standard"].fits and rows["batch"].fits
    assert not plan.fits
    assert any(p.message.startswith("class premium: p95") for p in plan.problems)


def test_plan_cli_names_the_class_and_json_has_classes(tmp_path) -> None:
    path = tmp_path / "b.yaml"
    path.write_text(BUDGET)
    result = CliRunner().invoke(app, ["plan", str(path), "-f", "json"])
    assert result.exit_code == 1
    assert "class premium" in result.output.splitlines()[-1]
    doc = json.loads(result.stdout[: result.stdout.rindex("}") + 1])
    assert [c["name"] for c in doc["classes"]] == ["premium", "standard", "batch"]
    md = CliRunner().invoke(app, ["plan", str(path), "-f", "md"]).stdout
    assert "- class batch (priority 2; skips rerank): fits" in md


def test_a_plan_without_classes_has_no_classes_key() -> None:
    plan = tb.plan(BUDGET.split("classes:")[0])
    assert plan.classes is None and "classes" not in json.loads(plan.to_json())


def test_the_rag_templates_classes_plan_under_its_environment() -> None:
    # prd gates p99: a class stating p95 too keeps it, shown and not gated (no crash).
    from tailbudget.cli.init import template_text

    lines = template_text("rag").splitlines()
    start = lines.index("# classes:")
    text = "\n".join(lines[:start] + [line[2:] for line in lines[start:]])
    plan = tb.plan(text)
    rows = {c.name: c for c in plan.classes or []}
    assert set(rows) == {"premium", "standard", "batch"} and plan.fits
    assert [(o.percentile, o.gated) for o in rows["premium"].objectives] == [
        ("p95", False),
        ("p99", True),
    ]
    assert "rerank" not in rows["batch"].stages
