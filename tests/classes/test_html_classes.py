"""plan, rebudget and replay HTML pages show the classes their text and Markdown show:
a Classes section whose tables hold the same figures and verdicts (one truth), absent
without classes."""

from __future__ import annotations

from pathlib import Path

import pytest

import tailbudget as tb
from tailbudget.demo.tiers import BUDGET, tiered
from tests.report.html_probe import parse


@pytest.fixture(scope="module")
def log(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tiers") / "tiers.parquet"
    tiered(n=6000, seed=4).to_parquet(path, index=False)
    return path


def _rows(html: str, first: str) -> dict[str, dict[str, str]]:
    page = parse(html)
    assert "classes" in page.sections
    rows = next(t for t in page.tables if t and t[0][0] == first)
    return {r[0]: dict(zip(rows[0], r, strict=True)) for r in rows[1:] if r[0]}


def test_the_plan_page_has_each_class(log) -> None:
    plan = tb.plan(BUDGET)
    rows = _rows(plan.to_html(), "class")
    assert list(rows) == ["premium", "standard", "batch"]
    assert rows["premium"]["class verdict"] == "does not fit"
    assert rows["batch"]["skips"] == "rerank" and rows["batch"]["class verdict"] == "fits"
    premium = next(c for c in plan.classes or [] if c.name == "premium").objectives[0]
    assert rows["premium"]["composed ms"] == f"{premium.composed_ms:,.0f}"
    assert "class premium: p95" in plan.to_html()


def test_the_rebudget_page_has_each_class(log) -> None:
    r = tb.rebudget(BUDGET, log)
    rows = _rows(r.to_html(), "class")
    assert rows["premium"]["now"] == "does not fit now" and rows["standard"]["now"] == "fits now"
    assert "p95" in rows["premium"]["speed-up needed beyond reallocation"]
    assert "rerank" not in rows["batch"]["slices to change"]


def test_the_replay_page_has_each_class_and_the_shedding(log, tmp_path) -> None:
    budget = tmp_path / "tiers.yaml"
    budget.write_text(BUDGET)
    path = tmp_path / "tiers.parquet"
    tiered().to_parquet(path, index=False)
    rep = tb.replay(path, budget)
    html = rep.to_html()
    rows = _rows(html, "class")
    premium = next(c for c in rep.classes or [] if c.name == "premium")
    assert "shed_load x1" in rows["premium"]["decisions"]
    assert rows["premium"]["requests"] == f"{premium.requests:,}"
    assert rows["batch"]["decisions"] == "no action"
    steps = next(t for t in parse(html).tables if t and t[0][0] == "t")
    assert steps[1][1:4] == ["shed_load", "batch", "premium"]


def test_without_classes_no_class_section(log) -> None:
    plain = BUDGET.split("classes:")[0]
    assert "classes" not in parse(tb.plan(plain).to_html()).sections
    assert "classes" not in parse(tb.rebudget(plain, log).to_html()).sections
    assert "classes" not in parse(tb.replay(log).to_html()).sections
