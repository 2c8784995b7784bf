"""The replay HTML report: the timeline with thresholds and every decision marked."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tailbudget.budget.policy_model import Rule
from tailbudget.report.html import render_replay_html
from tailbudget.report.html.timelines import _series, rule_thresholds
from tests.report import html_probe as hp
from tests.report import html_sample


@pytest.fixture(scope="module")
def replay():
    return html_sample.make_replay()


@pytest.fixture(scope="module")
def html(replay):
    return render_replay_html(replay)


def test_sections_and_offline(html):
    page = hp.parse(html)
    # Issue 26 item 6: the page opens with the verdict (it opened with the summary).
    assert page.sections == ["verdict", "summary", "timeline", "decisions", "policy"]
    assert all(v.startswith("#") for _, _, v in page.urls)
    assert page.na_notes == []


def test_every_decision_is_marked(html, replay):
    assert replay.decisions, "the sample must make the controller act"
    take, svg = hp.figures(html)["replay"]
    marks = hp.by_id(svg, "tb-replay-decision-")
    lines = [m for m in marks if m.get("id", "").split("-")[-1].isdigit()]
    assert len(lines) == len(replay.decisions)
    assert all(hp.drawn(m) for m in lines)
    for gid in (
        "tb-replay-p95",
        "tb-replay-p99",
        "tb-replay-threshold-0",
        "tb-replay-error-rate",
        "tb-replay-error-threshold-0",
    ):
        assert hp.drawn(hp.by_id(svg, gid)[0]), gid
    assert take.startswith(f"{len(replay.decisions)} decisions")


def test_decision_table_lists_each_decision(html, replay):
    table = next(t for t in hp.parse(html).tables if t[0][:3] == ["time", "offset (s)", "action"])
    assert [r[2] for r in table[1:]] == [d.action for d in replay.decisions]


def test_unknown_windows_are_gaps_not_zeros(replay):
    tl = list(replay.timeline)
    tl[3] = tl[3].model_copy(update={"known": False})
    tl[4] = tl[4].model_copy(update={"p95": None})
    s = _series(tl, "p95")
    assert math.isnan(s[3]) and math.isnan(s[4]) and not np.isnan(s[5])


def _rule(metric: str, threshold: float, action: str) -> Rule:
    return Rule(
        name=f"{action}_{metric}",
        metric=metric,
        threshold=threshold,
        action=action,
        clear_threshold=threshold * 0.9,
    )


def test_thresholds_from_policy_rules_including_baseline_ratio(replay):
    rules = [
        _rule("p95", 1800, "scale_up"),
        _rule("p99_vs_baseline", 1.2, "rollback"),
        _rule("error_rate", 0.01, "rollback"),
    ]
    rep = replay.model_copy(
        update={
            "baseline_p99_ms": 2000.0,
            "policy": replay.policy.model_copy(update={"rules": rules}),
        }
    )
    got = rule_thresholds(rep)
    assert [(m, v) for m, _, v, _ in got] == [
        ("p95", 1800.0),
        ("p99", 2400.0),
        ("error_rate", 0.01),
    ]
    assert [t.label for t in got] == [
        "scale_up: p95 > 1,800 ms",
        "rollback: p99 > 1.2x baseline (2,400 ms)",
        "rollback: errors > 1%",
    ]


def test_missing_timeline_or_decisions_says_not_available(replay):
    r = replay.model_copy(update={"timeline": [], "decisions": []})
    page = hp.parse(render_replay_html(r))
    assert page.sections == ["verdict", "summary", "timeline", "decisions", "policy"]
    assert "The policy took no action over" in render_replay_html(r)
    assert any("no window timeline" in n for n in page.na_notes)
    assert any("took no action" in n for n in page.na_notes)


def test_open_loop_is_said_first_and_thresholds_in_their_units(html):
    # The open-loop caveat moved from the summary into the verdict that now opens the page.
    verdict = html.split('<section id="verdict">', 1)[1]
    assert verdict.startswith('<h2>Verdict</h2><p class="verdict"><strong>The policy would')
    assert '</strong></p><p class="rec" id="open-loop">open loop' in verdict.split("</section>")[0]
    policy = hp.parse(html.split('<section id="policy">', 1)[1]).tables[0]
    errors = next(r for r in policy[1:] if r[1] == "error_rate")
    assert errors[3] == "1%" and errors[7] == "0.5%"  # not "0.01" and "0.005"


def test_title_names_the_service(html):
    assert "<h1>Policy replay: rag-chat</h1>" in html


def test_the_verdict_says_the_decisions_by_action(html, replay):
    verdict = html.split('<section id="verdict">', 1)[1].split("</section>")[0]
    n = len(replay.decisions)
    assert f"would have made {n} decision" in verdict
    assert all(f"{k} x{v}" in verdict for k, v in replay.summary.items())
