"""The audit HTML report: sections, charts with their series, offline, says what is missing."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest

from tailbudget import _fmt as fmt
from tailbudget.audit.report import AuditReport
from tailbudget.report.html import page as html_page
from tailbudget.report.html import render_audit_html
from tailbudget.report.html.audit import SECTIONS
from tests.report import html_probe as hp
from tests.report import html_sample

ORDER = [
    "verdict",  # the verdict and the recommendation open the page (issue 26)
    "objectives",
    "provenance",
    "snapshot",
    "stages",
    "slow-vs-fast",
    "shape",
    "cohorts",
    "cold-start",
    "hypotheses",
    "ranking",
    "recommendation",
]


def _section(sid: str, report: AuditReport) -> str:
    return {s: fn for s, _, fn in SECTIONS}[sid](report)


@pytest.fixture(scope="module")
def log():
    return html_sample.make_log()


@pytest.fixture(scope="module")
def report(log):
    return html_sample.make_audit(log)


@pytest.fixture(scope="module")
def html(report):
    return render_audit_html(report)


@pytest.fixture(scope="module")
def figs(html):
    return hp.figures(html)


def test_sections_in_markdown_order(html):
    page = hp.parse(html)
    assert page.sections == ORDER
    assert page.na_notes == []  # the full sample has data for every section


def test_section_titles_match_the_markdown_report():
    from tailbudget.report.audit_md import SECTIONS as MD_SECTIONS

    assert tuple(title for _, title, _ in SECTIONS) == MD_SECTIONS


def test_self_contained_no_network(html):
    page = hp.parse(html)
    # Only in-page anchors and fragment references; no external resource of any kind.
    assert all(v.startswith("#") for _, _, v in page.urls), page.urls
    assert not {"link", "img", "iframe", "object", "embed"} & page.tags
    assert "@import" not in html and "url(http" not in html
    assert not re.search(r"<script[^>]+src=", html)
    assert "Content-Security-Policy" in html and "default-src 'none'" in html


def test_ids_are_unique_and_references_resolve(html):
    ids = Counter(hp.parse(html).ids)
    assert [i for i, n in ids.items() if n > 1] == []
    refs = re.findall(r'(?:href="#|url\(#)([^")]+)', html)
    assert refs and all(r in ids for r in refs)


def test_every_audit_chart_has_its_series(figs, report):
    n_shape = sum(1 for s in report.shape if s.flag) or 1  # flagged fits, else the best
    shapes = {f"shape-{i}" for i in range(n_shape)}
    assert set(figs) == {"cdf", "stages", "delta", "cohorts", "cold"} | shapes
    _, cdf = figs["cdf"]
    for gid in (
        "tb-cdf-curve",
        "tb-cdf-slo-p50",
        "tb-cdf-slo-p95",
        "tb-cdf-slo-p99",
        "tb-cdf-measured",
    ):
        (el,) = hp.by_id(cdf, gid)
        assert hp.drawn(el), gid
    # The curve is drawn from the report's CDF points, not a handful of them.
    assert hp.path_points(hp.by_id(cdf, "tb-cdf-curve")[0]) > 50
    _, stages = figs["stages"]
    n = len(report.stages)
    for p in ("p50", "p95", "p99"):
        assert len(hp.by_id(stages, f"tb-stages-{p}-")) == n
    assert hp.drawn(hp.by_id(stages, "tb-stages-budget")[0])
    _, delta = figs["delta"]
    assert len(hp.by_id(delta, "tb-delta-bar-")) == len(report.tail.deltas)
    _, shape = figs["shape-0"]
    for gid in ("mean", "p50", "p95", "fit"):
        assert hp.drawn(hp.by_id(shape, f"tb-shape-0-{gid}")[0])
    _, cohorts = figs["cohorts"]
    assert bool(hp.by_id(cohorts, "tb-cohorts-flagged")) == any(c.flag for c in report.cohorts)
    assert hp.by_id(cohorts, "tb-cohorts-points") and hp.by_id(cohorts, "tb-cohorts-slo")
    _, cold = figs["cold"]
    assert report.cold_start is not None
    assert hp.path_points(hp.by_id(cold, "tb-cold-p99")[0]) == len(report.cold_start.timeline)
    assert len(hp.by_id(cold, "tb-cold-event-")) == len(report.cold_start.events)


def test_charts_have_titles_and_axis_labels_with_units(figs):
    for name, (takeaway, svg) in figs.items():
        texts = " ".join(t.text or "" for t in svg.iter(f"{hp.SVG_NS}text"))
        assert re.search(r"\((ms|%|min|UTC)|\bms\b", texts), name
        assert takeaway.strip(), name


def test_shape_chart_order_is_strongest_fit_first(figs, report):
    best = max(report.shape, key=lambda s: s.r2)
    assert figs["shape-0"][0].startswith(best.stage)


def test_takeaway_names_the_driver_from_the_log(figs, log, report):
    # Recompute the slow-vs-fast split straight from the log, independently of the audit.
    total = log["total"]
    slow = (total >= np.percentile(total, 95)) & (total <= np.percentile(total, 99))
    gaps = {s: log[s][slow].mean() - log[s][~slow].mean() for s in html_sample.BUDGETS}
    top = max(gaps, key=gaps.__getitem__)
    text = figs["delta"][0]
    assert text.startswith(f"{top} drives ")


def test_tables_are_sortable_and_hold_every_row(html, report):
    page = hp.parse(html)
    assert html.count('<table class="sortable">') == len(page.tables)
    stage_table = next(t for t in page.tables if t[0][:2] == ["stage", "p50 ms"])
    assert [r[0] for r in stage_table[1:]] == [s.name for s in report.stages]
    # Numbers sort by value: every numeric cell carries its raw value.
    assert re.search(r'<td class="num" data-v="[0-9.e+-]+">', html)


def test_rendering_is_deterministic(report, html):
    # Same data, same bytes (svg.hashsalt, no Date): re-render two chart sections to compare.
    again = {sid: fn for sid, _, fn in SECTIONS}
    for sid in ("snapshot", "cold-start"):
        part = again[sid](report)
        assert "<svg" in part and part in html


def test_escapes_names_from_the_log(report):
    stages = [report.stages[0].model_copy(update={"name": "<script>alert(1)</script>"})]
    cohorts = [report.cohorts[0].model_copy(update={"value": '"><img src=x>'})]
    r = report.model_copy(update={"stages": stages + report.stages[1:], "cohorts": cohorts})
    out = _section("stages", r) + _section("cohorts", r)
    assert "<script>alert(1)" not in out and "<img src=x>" not in out
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out


EMPTY = {
    "objectives": {"objectives": []},
    "stages": {"stages": []},
    "slow-vs-fast": {"tail": "deltas"},
    "shape": {"shape": []},
    "cohorts": {"cohorts": []},
    "cold-start": {"cold_start": None},
    "hypotheses": {"hypotheses": []},
    "ranking": {"ranking": [], "refusals": []},
}


@pytest.mark.parametrize("key", sorted(EMPTY))
def test_missing_section_says_not_available(report, key):
    update = dict(EMPTY[key])
    if update.get("tail") == "deltas":
        update["tail"] = report.tail.model_copy(update={"deltas": []})
    notes = hp.parse(_section(key, report.model_copy(update=update))).na_notes
    assert len(notes) >= 1
    assert all(n.startswith("not available: ") and len(n) > 20 for n in notes)


def test_a_log_with_only_totals_renders_every_section(log):
    only_total = html_sample.make_audit(log, only_total=True)
    page = hp.parse(render_audit_html(only_total))
    assert page.sections == ORDER
    missing = {"stages", "slow-vs-fast", "shape", "cohorts", "cold-start"}
    assert len(page.na_notes) >= len(missing)


def test_a_failing_section_does_not_cost_the_rest(report):
    def broken(_: AuditReport) -> str:
        raise ValueError("bad figure")

    parts = html_page.render_sections(report, (("a", "A", broken), *SECTIONS[1:3]))
    assert parts[0][2].startswith('<p class="na">not available: this section')
    assert "<svg" in parts[2][2]


def test_refusals_shown_when_nothing_ranked(report):
    refusal = "no per-stage columns, so no fix can be ranked by stage"
    r = report.model_copy(update={"ranking": [], "refusals": [refusal]})
    assert any("no per-stage columns" in n for n in hp.parse(_section("ranking", r)).na_notes)


def test_shape_charts_follow_the_flags(report):
    def flagged(flag: bool) -> AuditReport:
        rows = [s.model_copy(update={"flag": flag}) for s in report.shape]
        return report.model_copy(update={"shape": rows})

    profiled = sum(1 for s in report.shape if s.profile)  # a fit without bins has no chart
    assert len(hp.figures(_section("shape", flagged(True)))) == min(4, profiled)
    only = hp.figures(_section("shape", flagged(False)))
    assert len(only) == 1  # nothing flagged: the strongest fit alone
    best = max(report.shape, key=lambda s: s.r2)
    assert only["shape-0"][0].startswith(f"{best.stage} grows")


def test_missing_section_quotes_the_audits_own_refusal(report):
    refusal = "the log has no timestamps: no cold-start check and no per-minute timeline"
    r = report.model_copy(update={"cold_start": None, "refusals": [refusal]})
    assert hp.parse(_section("cold-start", r)).na_notes == [f"not available: {refusal}"]


def test_baseline_change_in_ms_and_relative(html, report):
    table = next(t for t in hp.parse(html).tables if t[0][:2] == ["percentile", "before ms"])
    assert report.baseline
    p99 = next(b for b in report.baseline if b.percentile == "p99")
    row = next(r for r in table[1:] if r[0] == "p99")
    assert row[3] == fmt.ms(p99.change)
    assert row[4] == fmt.share(p99.change / p99.before)
