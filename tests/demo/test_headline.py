"""The demo's reports say what their figures mean (issue 26, "a report that contradicts
itself"): interval wording follows the interval, ratios are not called shares, the
culprit score is defined, and rollbacks at cold starts are said to be cold starts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tailbudget.demo.run import run_demo

INTERVAL = re.compile(r"95% interval ([-+][\d,.]+) to ([-+][\d,.]+);[^)]*?(, [^)]*)?\)")


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    run_demo(out, rows=40_000)
    return out


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def test_interval_wording_follows_the_interval(demo):
    md = (demo / "report.md").read_text()
    found = INTERVAL.findall(md)
    assert found, "the demo's culprits carry a growth interval"
    for low, high, words in found:
        excludes_zero = _num(low) > 0 or _num(high) < 0
        assert ("not distinguishable" in words) is (not excludes_zero), (low, high, words)
    assert any(_num(high) < 0 and "real drop" in words for low, high, words in found)


def test_stage_ratios_are_not_labelled_as_shares(demo):
    md = (demo / "report.md").read_text()
    html = (demo / "report.html").read_text()
    for text in (md, html):
        assert "share of p99" not in text
        assert "p99 / e2e p99" in text and "not parts of a whole" in text


def test_the_culprit_score_says_how_it_differs_from_the_shares(demo):
    md = (demo / "report.md").read_text()
    assert "Score (0 to 1) weighs three figures" in md
    assert "of the slow requests' time (not of the gap)" in md


def test_the_replay_says_its_rollbacks_fell_in_cold_windows(demo):
    rep = json.loads((demo / "replay.json").read_text())
    rollbacks = [d for d in rep["decisions"] if d["action"] == "rollback"]
    assert rollbacks, "the demo's cold starts trip the rollback rule"
    assert all(d.get("cold_window") for d in rollbacks)
    assert all("cold start" in d["reason"] for d in rollbacks)
    assert any("cold window" in n for n in rep["notes"])
