"""Chart functions on small hand-shaped inputs: edge cases and SVG hygiene."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np

from tailbudget.report.html import charts
from tailbudget.report.html.timelines import cold_start_chart, parse_time
from tests.report import html_probe as hp


def _svg(text: str | None) -> ET.Element:
    assert text is not None
    return ET.fromstring(text)


def test_svg_is_inline_scalable_and_metadata_free():
    text = charts.delta_chart([{"stage": "llm", "delta": 120.0}, {"stage": "db", "delta": 30.0}])
    assert text is not None and text.startswith("<svg")
    head = text[: text.index(">")]
    assert "viewBox=" in head and " width=" not in head  # scales with the page
    assert "<metadata>" not in text and "<?xml" not in text
    assert 'class="tb-series"' in text


def test_shape_fit_without_intercept_goes_through_the_weighted_mean():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 100, 2000)
    y = 50 + 3 * x + rng.normal(0, 5, x.size)
    bins = np.digitize(x, np.linspace(0, 100, 6)[1:-1])
    profile = [
        {"x": x[bins == b].mean(), "n": int((bins == b).sum()), "mean_ms": y[bins == b].mean()}
        for b in range(5)
    ]
    slope = float(np.polyfit(x, y, 1)[0])
    svg = _svg(
        charts.shape_chart(
            {"stage": "s", "covariate": "x", "slope": slope, "profile": profile}, "t"
        )
    )
    assert hp.drawn(hp.by_id(svg, "tb-shape-t-fit")[0])
    assert hp.drawn(hp.by_id(svg, "tb-shape-t-mean")[0])
    assert not hp.by_id(svg, "tb-shape-t-p95")  # no p95 in the profile, no p95 line


def test_charts_return_none_without_data():
    assert charts.cdf_chart([], {}, {}) is None
    assert charts.cdf_chart([{"q": 0.5, "ms": 10}], {}, {}) is None  # one point is no curve
    assert charts.stage_chart([{"name": "a"}]) is None
    assert charts.delta_chart([{"stage": "a", "delta": None}]) is None
    assert charts.shape_chart({"profile": [{"x": 1, "mean_ms": 2}]}, "k") is None
    assert charts.cohort_chart([], None, None) is None
    assert cold_start_chart({"timeline": [{"t": "2026-01-01T00:00:00Z", "p99": 3}]}, None) is None


def test_stage_without_budget_has_bars_but_no_budget_tick():
    svg = _svg(charts.stage_chart([{"name": "a", "p50": 1, "p95": 2, "p99": 3, "budget": None}]))
    assert len(hp.by_id(svg, "tb-stages-p99-")) == 1
    assert not hp.by_id(svg, "tb-stages-budget")


def test_cold_start_events_outside_the_timeline_are_left_out():
    timeline = [{"t": f"2026-01-01T00:{m:02d}:00Z", "p99": 100 + m} for m in range(10)]
    events = [
        {"t": "2026-01-01T00:04:00Z", "event": "deploy"},
        {"t": "2026-01-02T00:00:00Z", "event": "next day"},
        {"t": "garbage", "event": "bad"},
    ]
    svg = _svg(cold_start_chart({"timeline": timeline, "events": events, "window_min": 3}, 120))
    assert len(hp.by_id(svg, "tb-cold-event-")) == 1
    assert hp.by_id(svg, "tb-cold-slo")


def test_parse_time_accepts_iso_z_naive_and_epoch():
    a = parse_time("2026-01-01T00:00:00Z")
    assert a is not None and a == parse_time("2026-01-01T00:00:00") == parse_time(1767225600)
    assert parse_time("yesterday") is None


def test_long_stage_names_turn_the_bars_sideways():
    rows = [
        {
            "name": f"ItemsControllerFindItem{i}",
            "p50": 2.0 + i,
            "p95": 40.0 * (i + 1),
            "p99": 90.0 * (i + 1),
            "budget": {"p99": 100.0},
        }
        for i in range(7)
    ]
    svg = _svg(charts.stage_chart(rows))
    assert len(hp.by_id(svg, "tb-stages-p95-")) == 7
    assert hp.drawn(hp.by_id(svg, "tb-stages-budget")[0])
    texts = [t.text or "" for t in svg.iter(f"{hp.SVG_NS}text")]
    assert "ItemsControllerFindItem6" in texts and "stage latency (ms, log scale)" in texts


def test_far_slo_is_a_note_not_a_squashed_axis():
    timeline = [{"t": f"2026-01-01T00:{m:02d}:00Z", "p99": 800 + 10 * m} for m in range(10)]
    far = _svg(cold_start_chart({"timeline": timeline}, 40_000))
    assert [e.get("id") for e in hp.by_id(far, "tb-cold-slo")] == ["tb-cold-slo-above"]
    near = _svg(cold_start_chart({"timeline": timeline}, 1000))
    assert [e.get("id") for e in hp.by_id(near, "tb-cold-slo")] == ["tb-cold-slo"]
