"""Chart functions on small hand-shaped records: edge cases and SVG hygiene."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np

from tailbudget.audit.report import (
    ColdStart,
    Delta,
    EventPoint,
    ProfilePoint,
    ShapeRow,
    StageRow,
    Tail,
    TimelinePoint,
)
from tailbudget.report.html import charts
from tailbudget.report.html.timelines import cold_start_chart, parse_time
from tests.report import html_probe as hp


def _svg(text: str | None) -> ET.Element:
    assert text is not None
    return ET.fromstring(text)


def _tail(*deltas: tuple[str, float]) -> Tail:
    return Tail(
        driver=None,
        deltas=[Delta(stage=s, mean_slow=d, mean_fast=0.0, delta=d) for s, d in deltas],
        slow_range_ms=[],
        fast_range_ms=[],
        n_slow=100,
        n_fast=1000,
    )


def _stage(name: str, p50: float, p95: float, p99: float, budget: dict | None) -> StageRow:
    return StageRow(name=name, p50=p50, p95=p95, p99=p99, mean=p50, share_of_p99=0.1, budget=budget)


def _cold(timeline: list[tuple[str, float]], events=(), window_min: float = 5.0) -> ColdStart:
    return ColdStart(
        window_min=window_min,
        unfiltered_p99=1.0,
        filtered_p99=1.0,
        verdict="not_cold_start",
        timeline=[TimelinePoint(t=t, p99=p, n=10) for t, p in timeline],
        events=[EventPoint(t=t, event=e) for t, e in events],
    )


def test_svg_is_inline_scalable_and_metadata_free():
    text = charts.delta_chart(_tail(("llm", 120.0), ("db", 30.0)))
    assert text is not None and text.startswith("<svg")
    head = text[: text.index(">")]
    assert "viewBox=" in head and " width=" not in head  # scales with the page
    assert "<metadata>" not in text and "<?xml" not in text
    assert 'class="tb-series"' in text


def test_shape_chart_draws_the_records_fit_and_bins():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 100, 2000)
    y = 50 + 3 * x + rng.normal(0, 5, x.size)
    bins = np.digitize(x, np.linspace(0, 100, 6)[1:-1])
    profile = [
        ProfilePoint(
            x=float(x[bins == b].mean()),
            n=int((bins == b).sum()),
            mean_ms=float(y[bins == b].mean()),
            p50_ms=float(np.percentile(y[bins == b], 50)),
            p95_ms=float(np.percentile(y[bins == b], 95)),
        )
        for b in range(5)
    ]
    slope, icpt = (float(v) for v in np.polyfit(x, y, 1))
    row = ShapeRow(
        stage="s", covariate="x", r2=0.9, slope=slope, intercept=icpt, flag=True, profile=profile
    )
    svg = _svg(charts.shape_chart(row, "t"))
    for gid in ("fit", "mean", "p50", "p95"):
        assert hp.drawn(hp.by_id(svg, f"tb-shape-t-{gid}")[0]), gid


def test_charts_return_none_without_data():
    row = ShapeRow(stage="s", covariate="x", r2=0.1, slope=1.0, intercept=0.0, flag=False)
    assert charts.stage_chart([]) is None
    assert charts.delta_chart(_tail()) is None
    assert charts.shape_chart(row, "k") is None  # no bins, no chart
    assert charts.cohort_chart([], 1.0, None) is None
    assert cold_start_chart(_cold([("2026-01-01T00:00:00Z", 3)]), None) is None


def test_stage_without_budget_has_bars_but_no_budget_tick():
    svg = _svg(charts.stage_chart([_stage("a", 1, 2, 3, None)]))
    assert len(hp.by_id(svg, "tb-stages-p99-")) == 1
    assert not hp.by_id(svg, "tb-stages-budget")


def test_cold_start_events_outside_the_timeline_are_left_out():
    timeline = [(f"2026-01-01T00:{m:02d}:00Z", 100 + m) for m in range(10)]
    events = [
        ("2026-01-01T00:04:00Z", "deploy"),
        ("2026-01-02T00:00:00Z", "next day"),
        ("garbage", "bad"),
    ]
    svg = _svg(cold_start_chart(_cold(timeline, events, window_min=3), 120))
    assert len(hp.by_id(svg, "tb-cold-event-")) == 1
    assert hp.by_id(svg, "tb-cold-slo")


def test_parse_time_accepts_iso_z_naive_and_epoch():
    a = parse_time("2026-01-01T00:00:00Z")
    assert a is not None and a == parse_time("2026-01-01T00:00:00") == parse_time(1767225600)
    assert parse_time("yesterday") is None


def test_long_stage_names_turn_the_bars_sideways():
    rows = [
        _stage(f"ItemsControllerFindItem{i}", 2.0 + i, 40.0 * (i + 1), 90.0 * (i + 1),
               {"p99": 100.0})
        for i in range(7)
    ]  # fmt: skip
    svg = _svg(charts.stage_chart(rows))
    assert len(hp.by_id(svg, "tb-stages-p95-")) == 7
    assert hp.drawn(hp.by_id(svg, "tb-stages-budget")[0])
    texts = [t.text or "" for t in svg.iter(f"{hp.SVG_NS}text")]
    assert "stage latency (ms, log scale)" in texts
    # Every bar keeps its name (issue 36: every other one was dropped at 7 stages).
    assert {f"ItemsControllerFindItem{i}" for i in range(7)} <= set(texts)


def test_every_delta_bar_is_labelled():
    deltas = [(f"ProductsControllerFind{i}", 10.0 * (i + 1)) for i in range(9)]
    svg = _svg(charts.delta_chart(_tail(*deltas)))
    texts = {t.text or "" for t in svg.iter(f"{hp.SVG_NS}text")}
    assert {name for name, _ in deltas} <= texts


def test_far_slo_is_a_note_not_a_squashed_axis():
    timeline = [(f"2026-01-01T00:{m:02d}:00Z", 800 + 10 * m) for m in range(10)]
    far = _svg(cold_start_chart(_cold(timeline), 40_000))
    assert [e.get("id") for e in hp.by_id(far, "tb-cold-slo")] == ["tb-cold-slo-above"]
    near = _svg(cold_start_chart(_cold(timeline), 1000))
    assert [e.get("id") for e in hp.by_id(near, "tb-cold-slo")] == ["tb-cold-slo"]


def test_a_policy_far_off_the_others_is_drawn_off_scale():
    # Issue 36: the demo's fixed:2 reached 800,000 ms and flattened every other policy.
    from types import SimpleNamespace

    from tailbudget.report.html.simulate import _scale

    def run(*values: float) -> SimpleNamespace:
        return SimpleNamespace(timeline=[SimpleNamespace(value_ms=v) for v in values])

    runs = [run(5_000, 25_000), run(4_000, 35_000), run(6_000, 14_000), run(9_000, 815_894)]
    top, off = _scale(runs, 4_000.0)  # type: ignore[arg-type]
    assert off == {3: 815_894}
    assert top is not None and 35_000 < top < 50_000
    assert _scale(runs[:3], 4_000.0) == (None, {})  # nothing far off: matplotlib's own axis
