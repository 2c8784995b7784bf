"""`plan` and `rebudget` as HTML pages: the verdict first, tables not a Markdown dump, no
external assets, and the same figures the Markdown report states."""

from __future__ import annotations

import re
from html import escape
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tailbudget as tb
from tailbudget.cli import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DELAG = Path(__file__).resolve().parents[3] / "shared" / "data" / "delag_eshopper_000.csv"


def _sections(html: str) -> list[str]:
    return re.findall(r'<section id="([^"]+)">', html)


def _self_contained(html: str) -> None:
    assert html.startswith("<!DOCTYPE html>")
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "<pre>#" not in html  # not the Markdown as plain text


@pytest.mark.parametrize("name", ["fraud", "llm-chat", "rag"])
def test_the_plan_page_opens_with_its_verdict(name: str) -> None:
    plan = tb.plan(EXAMPLES / f"{name}.yaml")
    html = plan.to_html()
    _self_contained(html)
    assert _sections(html)[:2] == ["verdict", "slices"]
    verdict = "The budget fits" if plan.fits else "The budget does not fit"
    assert html.index(verdict) < html.index('id="slices"')
    for check in plan.gates.checks:  # the Markdown's figures, in the page's cells
        assert f"{check.additive_ms:,.0f}" in html
    assert plan._repr_html_() == html


def test_the_rebudget_page_opens_with_its_verdict(tmp_path: Path) -> None:
    if not DELAG.exists():
        pytest.skip("../shared/data/delag_eshopper_000.csv is missing")
    measured = tb.measure_budget(DELAG, "p99=500", total="Latency", stages="*Controller*,Gateway*")
    proposal = tb.rebudget(measured, DELAG)
    html = proposal.to_html()
    _self_contained(html)
    assert _sections(html)[0] == "verdict"
    assert {"objectives", "slices", "changes", "options", "budget", "notes"} <= set(_sections(html))
    for o in proposal.objectives:
        assert o.objective in html
    for gap in proposal.gaps:  # where each e2e gap lies, as the Markdown says it
        assert escape(gap.says) in html


def test_plan_format_html_on_the_command_line(tmp_path: Path) -> None:
    out = tmp_path / "plan.html"
    res = CliRunner().invoke(
        app, ["plan", str(EXAMPLES / "rag.yaml"), "--format", "html", "-o", str(out)]
    )
    assert res.exit_code in (0, 1), res.output
    assert out.read_text(encoding="utf-8") == tb.plan(EXAMPLES / "rag.yaml").to_html()
