"""The replay HTML report: the timeline with thresholds and every decision marked."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
    assert page.sections == ["summary", "timeline", "decisions", "policy"]
    assert all(v.startswith("#") for _, _, v in page.urls)
    assert page.na_notes == []


def test_every_decision_is_marked(html, replay):
    assert replay["decisions"], "the sample must make the controller act"
    take, svg = hp.figures(html)["replay"]
    marks = hp.by_id(svg, "tb-replay-decision-")
    lines = [m for m in marks if m.get("id", "").split("-")[-1].isdigit()]
    assert len(lines) == len(replay["decisions"])
    assert all(hp.drawn(m) for m in lines)
    for gid in (
        "tb-replay-p95",
        "tb-replay-p99",
        "tb-replay-threshold-0",
        "tb-replay-error-rate",
        "tb-replay-error-threshold-0",
    ):
        assert hp.drawn(hp.by_id(svg, gid)[0]), gid
    assert take.startswith(f"{len(replay['decisions'])} decisions")


def test_decision_table_lists_each_decision(html, replay):
    table = next(t for t in hp.parse(html).tables if t[0][:3] == ["time", "offset (s)", "action"])
    assert [r[2] for r in table[1:]] == [d["action"] for d in replay["decisions"]]


def test_unknown_windows_are_gaps_not_zeros(replay):
    tl = copy.deepcopy(replay["timeline"])
    tl[3]["known"] = False
    tl[4]["p95"] = None
    s = _series(tl, "p95")
    assert math.isnan(s[3]) and math.isnan(s[4]) and not np.isnan(s[5])


def test_thresholds_from_policy_rules_including_baseline_ratio():
    rep = {
        "baseline_p99_ms": 2000.0,
        "policy": {
            "rules": [
                {"metric": "p95", "threshold": 1800, "action": "scale_up"},
                {"metric": "p99_vs_baseline", "threshold": 1.2, "action": "rollback"},
                {"metric": "error_rate", "threshold": 0.01, "action": "rollback"},
                {"metric": "p99", "threshold": "oops"},
            ]
        },
    }
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
    r = copy.deepcopy(replay)
    r.pop("timeline")
    r["decisions"] = []
    page = hp.parse(render_replay_html(r))
    assert page.sections == ["summary", "timeline", "decisions", "policy"]
    assert any("no window timeline" in n for n in page.na_notes)
    assert any("took no action" in n for n in page.na_notes)
    assert len(hp.parse(render_replay_html({})).na_notes) == 4


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(
        st.sampled_from(
            ["decisions", "timeline", "policy", "thresholds", "summary", "notes", "source"]
        ),
        st.one_of(
            st.none(),
            st.integers(),
            st.text(max_size=4),
            st.lists(
                st.dictionaries(
                    st.sampled_from(["t_offset_s", "p95", "action", "known"]),
                    st.one_of(st.none(), st.integers(), st.text(max_size=3)),
                ),
                max_size=3,
            ),
            st.dictionaries(
                st.sampled_from(["rules", "window_s"]), st.one_of(st.none(), st.text(max_size=3))
            ),
        ),
        max_size=6,
    )
)
def test_any_junk_still_renders_every_replay_section(rep):
    assert hp.parse(render_replay_html(rep)).sections == [
        "summary",
        "timeline",
        "decisions",
        "policy",
    ]
