"""plan's verdict comes first in text, markdown and HTML, and a plan that can estimate
none of its gated objectives says `not checked`, never FITS (issue 36)."""

from __future__ import annotations

import tailbudget as tb

UNCHECKED = """
service: chat
slo: {ttft: {p95: 500}, tpot: {p99: 60}}
pipeline:
  - stage: retrieval
    budget: {p50: 100, p95: 200, p99: 300}
  - stage: llm
    budget: {p50: 1000, p95: 2000, p99: 3000}
"""

FITS = """
service: rag
slo: {p99: 5000}
pipeline:
  - stage: retrieval
    budget: {p50: 100, p95: 200, p99: 300}
"""


def test_nothing_checked_is_not_a_fit():
    plan = tb.plan(UNCHECKED)
    assert [o.verdict for o in plan.objectives] == ["not_checked", "not_checked"]
    assert plan.not_checked and not plan.fits
    assert plan.verdict_words() == "not checked"
    assert plan.to_text().splitlines()[0].startswith("verdict: NOT CHECKED")
    assert "FITS" not in plan.to_text()
    assert "Verdict: **not checked**" in plan.to_markdown()


def test_the_verdict_is_the_first_line_in_every_format():
    plan = tb.plan(FITS)
    assert plan.fits and not plan.not_checked
    assert plan.to_text().splitlines()[0] == "verdict: FITS"
    md = [line for line in plan.to_markdown().splitlines() if line.strip()]
    assert md[1] == "Verdict: **fits**."
    html = plan.to_html()
    assert html.index("The budget fits") < html.index("<table")
