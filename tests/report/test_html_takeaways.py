"""Takeaways are written from the data: change the data and the sentence changes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailbudget.report.html import takeaways
from tailbudget.report.html.page import fmt_ms

finite = st.floats(min_value=0.1, max_value=1e6, allow_nan=False)


def test_delta_names_whichever_stage_dominates():
    rng = np.random.default_rng(3)
    slow = {"prefill": rng.normal(900, 50, 400), "decode": rng.normal(300, 40, 400)}
    fast = {"prefill": rng.normal(200, 30, 4000), "decode": rng.normal(250, 30, 4000)}
    deltas = [
        {
            "stage": s,
            "mean_slow": slow[s].mean(),
            "mean_fast": fast[s].mean(),
            "delta": slow[s].mean() - fast[s].mean(),
        }
        for s in slow
    ]
    share = deltas[0]["delta"] / (deltas[0]["delta"] + deltas[1]["delta"])
    text = takeaways.delta({"deltas": deltas})
    assert text.startswith(f"prefill drives {share:.0%} of the slow-vs-fast gap")
    # Swap the roles: the sentence follows the data.
    deltas[1]["delta"] = deltas[0]["delta"] * 3
    assert takeaways.delta({"deltas": deltas}).startswith("decode drives 75%")


def test_delta_ignores_stages_faster_in_slow_requests():
    text = takeaways.delta(
        {"deltas": [{"stage": "a", "delta": 300.0}, {"stage": "b", "delta": -100.0}]}
    )
    assert text.startswith("a drives 100%")
    assert "about the same" in takeaways.delta({"deltas": [{"stage": "a", "delta": -1.0}]})


def test_cdf_reports_worst_breach_or_closest_pass():
    slo = {"p50": 1000.0, "p95": 2000.0, "p99": 4000.0}
    text = takeaways.cdf({"p50": 900.0, "p95": 2500.0, "p99": 4400.0}, slo)
    assert text.startswith("p95 is 2,500 ms, 25% over its 2,000 ms SLO") and "2 of 3" in text
    ok = takeaways.cdf({"p50": 500.0, "p95": 1000.0, "p99": 3600.0}, slo)
    assert ok.startswith(
        "Every percentile meets its SLO; the closest is p99 at 3,600 ms, 10% under"
    )
    assert "no SLO" in takeaways.cdf({"p99": 10.0}, {})


def test_stages_prefers_budget_overrun_then_biggest_p99():
    rows = [
        {"name": "retrieval", "p50": 100, "p95": 300, "p99": 1600, "budget": {"p99": 800}},
        {
            "name": "llm",
            "p50": 900,
            "p95": 2000,
            "p99": 3000,
            "budget": {"p99": 4000},
            "share_of_p99": 0.6,
        },
    ]
    assert takeaways.stages(rows).startswith("retrieval p99 is 1,600 ms, 2.0x its 800 ms budget")
    rows[0]["p99"] = 1000
    assert takeaways.stages(rows).startswith("retrieval p99 is 1,000 ms, 25% over its 800 ms")
    rows[0]["p99"] = 1000
    assert takeaways.stages(rows).startswith("retrieval p99 is 1,000 ms, 25% over its 800 ms")
    rows[0]["p99"] = 700
    assert takeaways.stages(rows) == (
        "Every stage is within its budget; llm has the largest p99 at 3,000 ms, "
        "60% of the end-to-end p99."
    )


def test_cohorts_finds_the_over_represented_one():
    rows = [
        {"dim": "route", "value": "/chat", "share": 0.7, "share_of_slow": 0.4, "p99": 900},
        {"dim": "route", "value": "/search", "share": 0.3, "share_of_slow": 0.6, "p99": 2100},
    ]
    assert takeaways.cohorts(rows).startswith(
        "route=/search carries 30% of traffic but 60% of slow"
    )


def test_replay_counts_and_first_decision():
    rep = {
        "decisions": [
            {
                "t_offset_s": 600,
                "action": "shed_load",
                "metric": "p95",
                "value": 3100,
                "threshold": 3000,
            },
            {
                "t_offset_s": 120,
                "action": "scale_up",
                "metric": "p95",
                "value": 1900,
                "threshold": 1800,
            },
        ],
        "timeline": [{"p99": 2000.0}, {"p99": 4100.0}, {"p99": None}],
    }
    text = takeaways.replay(rep)
    assert text.startswith(
        "2 decisions (scale_up, shed_load); the first, scale_up at +2.0 min (p95 1,900 > 1,800)"
    )
    assert text.endswith("window p99 peaked at 4,100 ms.")
    assert takeaways.replay({"timeline": []}).startswith("The policy took no action")


@given(
    snap=st.fixed_dictionaries({p: finite for p in ("p50", "p95", "p99")}),
    slo=st.fixed_dictionaries({p: finite for p in ("p50", "p95", "p99")}),
)
def test_cdf_takeaway_never_fails_and_quotes_a_real_figure(snap, slo):
    text = takeaways.cdf(snap, slo)
    top = max(snap[p] / slo[p] for p in snap)
    worst = [p for p in snap if snap[p] / slo[p] == top]
    assert any(f"{p} " in text and fmt_ms(snap[p]) in text for p in worst)


@pytest.mark.parametrize("fn", [takeaways.delta, takeaways.replay, takeaways.shape])
def test_empty_inputs_give_a_sentence(fn):
    assert isinstance(fn({}), str) and fn({})
