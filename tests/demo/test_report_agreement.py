"""The demo's report.md, report.html, report.json (and replay, and the summary) agree.

Each section of the markdown and the HTML report is checked against the JSON: the
same figures, formatted by the one formatter, the same verdicts and the same marks.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from tailbudget import _fmt as fmt
from tailbudget.audit.report import AuditReport, ColdStart
from tailbudget.audit.weak import MIN_SLOW_REQUESTS
from tailbudget.cli import app
from tailbudget.report import audit_view as view

SECTIONS = {
    "Objectives": "objectives",
    "Provenance": "provenance",
    "Snapshot": "snapshot",
    "Stages": "stages",
    "Slow vs fast": "slow-vs-fast",
    "Input shape": "shape",
    "Cohorts": "cohorts",
    "Cold start": "cold-start",
    "Hypotheses": "hypotheses",
    "Ranking": "ranking",
    "Recommendation": "recommendation",
}


def _text(fragment: str) -> str:
    # Charts' SVG text is left out: sections are compared on their prose and tables.
    fragment = re.sub(
        r"<svg.*?</svg>|<style>.*?</style>|<script>.*?</script>", " ", fragment, flags=re.S
    )
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _md_sections(md: str) -> dict[str, str]:
    parts = re.split(r"(?m)^## ", md)[1:]
    return {p.split("\n", 1)[0]: " ".join(p.split("\n", 1)[1].split()) for p in parts}


def _html_sections(page: str) -> dict[str, str]:
    found = re.findall(r'<section id="([^"]+)"><h2>.*?</h2>(.*?)</section>', page, flags=re.S)
    return {sid: _text(body) for sid, body in found}


class Rendered:
    """One audit in its three formats, split into sections."""

    def __init__(self, report: dict[str, Any], md: str, page: str) -> None:
        self.json = report
        self.md_title = md.splitlines()[0].removeprefix("# ")
        self.html_title = html.unescape(re.search(r"<h1>(.*?)</h1>", page).group(1))  # type: ignore[union-attr]
        self.md = _md_sections(md)
        self.html = _html_sections(page)

    def both(self, section: str) -> tuple[str, str]:
        return self.md[section], self.html[SECTIONS[section]]

    def in_both(self, section: str, *needles: str) -> None:
        md, page = self.both(section)
        for n in needles:
            assert n in md, f"{section} (md) lacks {n!r}"
            assert n in page, f"{section} (html) lacks {n!r}"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("agree")
    res = CliRunner().invoke(app, ["demo", "--out", str(out), "--rows", "60000"])
    assert res.exit_code == 0, res.output
    return out, res.output


@pytest.fixture(scope="module")
def audit(demo: tuple[Path, str]) -> Rendered:
    out, _ = demo
    return Rendered(
        json.loads((out / "report.json").read_text()),
        (out / "report.md").read_text(),
        (out / "report.html").read_text(),
    )


def test_every_section_is_in_both_formats_and_titled_by_the_service(audit: Rendered) -> None:
    assert list(audit.md) == list(SECTIONS)
    # The HTML page opens with the verdict and the recommendation (issue 26), then follows
    # the markdown report's order.
    assert list(audit.html) == ["verdict", *SECTIONS.values()]
    assert audit.json["service"] == "rag-chat"
    assert audit.md_title == audit.html_title == "Latency audit: rag-chat"


def test_provenance_and_snapshot_agree(audit: Rendered) -> None:
    r = audit.json
    audit.in_both("Provenance", fmt.count(r["rows"]["total"]), r["provenance"]["engine"])
    snap = r["snapshot"]
    for p, verdict in snap["verdict"].items():
        audit.in_both("Snapshot", fmt.ms(snap[p]), fmt.ms(r["slo"][p]), verdict)
    audit.in_both("Snapshot", fmt.ms(snap["max"]), fmt.share(r["goodput"]["share"]))


def test_stages_and_slow_vs_fast_agree(audit: Rendered) -> None:
    r = audit.json
    for s in r["stages"]:
        audit.in_both("Stages", s["name"], fmt.ms(s["p99"]), fmt.share(s["share_of_p99"]))
    tail = r["tail"]
    audit.in_both("Slow vs fast", tail["driver"], fmt.count(tail["n_slow"]))
    for d in tail["deltas"]:
        audit.in_both("Slow vs fast", fmt.ms(d["mean_slow"]), fmt.ms(d["mean_fast"]))
    md, page = audit.both("Slow vs fast")
    assert not tail["weak"] and view.WEAK not in md + page  # 2,400 slow requests


def test_shape_shows_and_folds_the_same_fits(audit: Rendered) -> None:
    rows = audit.json["shape"]
    shown, folded = view.fold([s["flag"] for s in rows])
    md, _ = audit.both("Input shape")
    for i in shown:
        audit.in_both("Input shape", rows[i]["covariate"], fmt.number(rows[i]["slope"]))
        audit.in_both("Input shape", fmt.r2(rows[i]["r2"]))
    assert folded, "the demo has more fits than are shown"
    audit.in_both("Input shape", view.folded_note(len(folded)))
    # Markdown leaves folded fits to the JSON; HTML folds them in a <details> block.
    assert "<details>" not in md


def test_cohorts_agree(audit: Rendered) -> None:
    for c in audit.json["cohorts"]:
        audit.in_both("Cohorts", c["value"], fmt.share(c["share"]), fmt.ms(c["p99"]))
    md, page = audit.both("Cohorts")
    n_flag = sum(c["flag"] for c in audit.json["cohorts"])
    assert md.count("| flag") == page.count("flagged") == n_flag


def test_one_cold_start_verdict_everywhere(audit: Rendered, demo: tuple[Path, str]) -> None:
    r = audit.json
    cold = r["cold_start"]
    sentence = view.cold_verdict(ColdStart.model_validate(cold))
    audit.in_both("Cold start", cold["verdict"], sentence)
    kinds = [h["kind"] for h in r["hypotheses"]]
    fixes = [f["fix"] for f in r["ranking"]]
    # The section's verdict, the hypothesis and the fix never disagree.
    assert (cold["verdict"] == "cold_start") == ("cold_start" in kinds)
    assert ("prewarm_replicas" in fixes) <= ("cold_start" in kinds)
    for section in ("Cold start", "Hypotheses", "Ranking"):
        md, page = audit.both(section)
        if cold["verdict"] == "cold_start":
            assert "Not cold start" not in md + page
    # The demo's summary gives the same sentence, with its figures, not the JSON's token.
    assert sentence.removesuffix(".") in demo[1] and "cold start: cold_start" not in demo[1]


def test_hypotheses_ranking_and_recommendation_agree(
    audit: Rendered, demo: tuple[Path, str]
) -> None:
    r = audit.json
    for h in r["hypotheses"]:
        audit.in_both("Hypotheses", h["kind"], h["evidence"])
    md, page = audit.both("Ranking")
    for f in r["ranking"]:
        audit.in_both("Ranking", f["fix"], fmt.ms(f["p99_saved_ms"]), fmt.number(f["score"]))
    order = [f["fix"] for f in r["ranking"]]
    assert sorted(order, key=md.index) == order == sorted(order, key=page.index)
    rec = r["recommendation"]
    audit.in_both("Recommendation", rec["choice"], rec["text"])
    summary = demo[1]
    assert f"recommendation: {rec['choice']}" in summary
    causes = ", ".join(f"{h['kind']} ({h['stage']})" for h in r["hypotheses"])
    assert f"causes: {causes}" in summary
    assert AuditReport.model_validate(r).name() == "rag-chat"


def test_replay_report_agrees_and_says_it_is_open_loop(demo: tuple[Path, str]) -> None:
    out, summary = demo
    rep = json.loads((out / "replay.json").read_text())
    page = (out / "replay.html").read_text()
    text = _text(page)
    assert rep["loop"] == "open" and rep["notes"][0].startswith("open loop")
    assert rep["notes"][0] in text and 'id="open-loop"' in page
    assert f"Policy replay: {rep['service']}" in text
    for rule in rep["policy"]["rules"]:
        assert fmt.threshold(rule["metric"], rule["threshold"]) in text
        assert fmt.threshold(rule["metric"], rule["clear_threshold"]) in text
    assert f"{fmt.ms(rep['baseline_p99_ms'])} ms" in text
    replicas = rep["policy"]["replicas"]
    assert f"min {replicas['min']}, max {replicas['max']}, step {replicas['step']}" in text
    # No raw float reprs or dicts: every figure went through the formatter.
    figures = re.sub(r"\d\d:\d\d:\d\d\.\d+", "", text)  # ISO timestamps keep their digits
    assert not re.search(r"\d\.\d{4,}", figures) and "{'" not in text
    assert f"replay: {len(rep['decisions'])} decisions" in summary
    # Each threshold line has its own dash pattern and a label.
    lines = re.findall(r'<g id="tb-replay-threshold-\d+"[^>]*>(.*?)</g>', page, flags=re.S)
    styles = {re.search(r"stroke-dasharray: ([^;]+);.*?stroke: (#\w+)", g, re.S) for g in lines}
    assert len(lines) >= 3 and len({m.groups() for m in styles if m}) == len(lines)
    for i in range(len(lines)):
        assert f'id="tb-replay-threshold-{i}-label"' in page


def _small_log(path: Path, n: int) -> Path:
    rng = np.random.default_rng(3)
    a = rng.lognormal(np.log(50), 0.3, n)
    b = rng.lognormal(np.log(200), 0.8, n)
    rows = ["request_id,a_ms,b_ms,total_ms"]
    rows += [
        f"{i},{x:.3f},{y:.3f},{x + y + 5:.3f}" for i, (x, y) in enumerate(zip(a, b, strict=True))
    ]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_a_small_slow_group_is_weak_in_every_format(tmp_path: Path) -> None:
    log = _small_log(tmp_path / "small.csv", 300)
    outs = {}
    for f in ("json", "md", "html"):
        res = CliRunner().invoke(app, ["audit", str(log), "--slo", "p99=300", "-f", f])
        assert res.exit_code == 0, res.output
        outs[f] = res.output
    r = json.loads(outs["json"])
    n = r["tail"]["n_slow"]
    assert n < MIN_SLOW_REQUESTS and r["tail"]["weak"] and r["recommendation"]["weak"]
    assert r["ranking"] == [] and all(h["weak"] for h in r["hypotheses"])
    caveat = view.tail_caveat_for(n)
    md = Rendered(r, outs["md"], outs["html"])
    for section in ("Slow vs fast", "Recommendation"):
        md_s, page_s = md.both(section)
        assert view.WEAK in md_s and view.WEAK in page_s
    md.in_both("Slow vs fast", caveat)
    md.in_both("Recommendation", f"Only {n} requests in the slow group")
    md.in_both("Ranking", "fixes not ranked")
