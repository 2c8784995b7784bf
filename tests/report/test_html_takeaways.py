"""Takeaways are written from the data: change the data and the sentence changes."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tailbudget import _fmt as fmt
from tailbudget.audit.report import (
    CohortRow,
    Delta,
    Percentiles,
    ShapeRow,
    Snapshot,
    StageRow,
    Tail,
)
from tailbudget.control.replay_record import ReplayDecision, ReplayPoint
from tailbudget.report.html import takeaways
from tests.report import html_sample

finite = st.floats(min_value=0.1, max_value=1e6, allow_nan=False)


def _tail(deltas: list[Delta]) -> Tail:
    return Tail(
        driver=None,
        deltas=deltas,
        slow_range_ms=[],
        fast_range_ms=[],
        n_slow=100,
        n_fast=1000,
    )


def _delta(stage: str, delta: float, slow: float = 0.0, fast: float = 0.0) -> Delta:
    return Delta(stage=stage, mean_slow=slow, mean_fast=fast, delta=delta)


def _snap(p50: float, p95: float, p99: float) -> Snapshot:
    return Snapshot(
        p50=p50,
        p95=p95,
        p99=p99,
        max=p99,
        mean=p50,
        verdict={},
        breach_rate_per_min=None,
        count=1000,
        errors=0,
        duration_min=None,
    )


def _stage(name: str, p99: float, budget: dict[str, float], share: float = 0.1) -> StageRow:
    return StageRow(
        name=name, p50=p99 / 4, p95=p99 / 2, p99=p99, mean=p99 / 4, share_of_p99=share,
        budget=budget,
    )  # fmt: skip


def _cohort(value: str, share: float, share_of_slow: float, p99: float) -> CohortRow:
    return CohortRow(
        dim="route", value=value, n=100, share=share, p99=p99, delta_vs_global=0.0,
        share_of_slow=share_of_slow, flag=False,
    )  # fmt: skip


def test_delta_names_whichever_stage_dominates():
    rng = np.random.default_rng(3)
    slow = {"prefill": rng.normal(900, 50, 400), "decode": rng.normal(300, 40, 400)}
    fast = {"prefill": rng.normal(200, 30, 4000), "decode": rng.normal(250, 30, 4000)}
    gaps = {k: float(slow[k].mean() - fast[k].mean()) for k in slow}
    deltas = [_delta(k, g, slow[k].mean(), fast[k].mean()) for k, g in gaps.items()]
    share = gaps["prefill"] / sum(gaps.values())
    text = takeaways.delta(_tail(deltas))
    assert text.startswith(f"prefill drives {share:.0%} of the slow-vs-fast gap")
    # Swap the roles: the sentence follows the data.
    deltas[1] = _delta("decode", gaps["prefill"] * 3)
    assert takeaways.delta(_tail(deltas)).startswith("decode drives 75%")


def test_delta_ignores_stages_faster_in_slow_requests():
    text = takeaways.delta(_tail([_delta("a", 300.0), _delta("b", -100.0)]))
    assert text.startswith("a drives 100%")
    assert "about the same" in takeaways.delta(_tail([_delta("a", -1.0)]))
    assert "about the same" in takeaways.delta(_tail([]))


def test_cdf_reports_worst_breach_or_closest_pass():
    slo = Percentiles(p50=1000.0, p95=2000.0, p99=4000.0)
    text = takeaways.cdf(_snap(900.0, 2500.0, 4400.0), slo)
    assert text.startswith("p95 is 2,500 ms, 25% over its 2,000 ms SLO") and "2 of 3" in text
    ok = takeaways.cdf(_snap(500.0, 1000.0, 3600.0), slo)
    assert ok.startswith(
        "Every percentile meets its SLO; the closest is p99 at 3,600 ms, 10% under"
    )
    assert "no SLO" in takeaways.cdf(_snap(1.0, 5.0, 10.0), Percentiles())


def test_stages_prefers_budget_overrun_then_biggest_p99():
    llm = _stage("llm", 3000, {"p99": 4000}, share=0.6)
    over = [_stage("retrieval", 1600, {"p99": 800}), llm]
    assert takeaways.stages(over).startswith("retrieval p99 is 1,600 ms, 2.0x its 800 ms budget")
    over[0] = _stage("retrieval", 1000, {"p99": 800})
    assert takeaways.stages(over).startswith("retrieval p99 is 1,000 ms, 25% over its 800 ms")
    within = [_stage("retrieval", 700, {"p99": 800}), llm]
    assert takeaways.stages(within) == (
        "Every stage is within its budget; llm has the largest p99 at 3,000 ms, "
        "60% of the end-to-end p99."
    )


def test_cohorts_finds_the_over_represented_one():
    rows = [_cohort("/chat", 0.7, 0.4, 900), _cohort("/search", 0.3, 0.6, 2100)]
    assert takeaways.cohorts(rows).startswith(
        "route=/search carries 30% of traffic but 60% of slow"
    )


def _decision(t: float, action: str, value: float, threshold: float) -> ReplayDecision:
    return ReplayDecision(
        t=f"PT{t}S", t_offset_s=t, action=action, metric="p95", value=value,
        threshold=threshold, reason="",
    )  # fmt: skip


def test_replay_counts_and_first_decision():
    base = html_sample.make_replay(html_sample.make_log(n=2000))
    points = [
        ReplayPoint(t="PT0S", t_offset_s=0, p99=p99, known=p99 is not None)
        for p99 in (2000.0, 4100.0, None)
    ]
    rep = base.model_copy(
        update={
            "decisions": [
                _decision(600, "shed_load", 3100, 3000),
                _decision(120, "scale_up", 1900, 1800),
            ],
            "timeline": points,
        }
    )
    text = takeaways.replay(rep)
    assert text.startswith(
        "2 decisions (scale_up, shed_load); the first, scale_up at +2.0 min "
        "(p95 1,900 ms > 1,800 ms)"
    )
    assert text.endswith("window p99 peaked at 4,100 ms.")
    quiet = base.model_copy(update={"decisions": [], "timeline": []})
    assert takeaways.replay(quiet).startswith("The policy took no action")


@given(
    snap=st.fixed_dictionaries({p: finite for p in ("p50", "p95", "p99")}),
    slo=st.fixed_dictionaries({p: finite for p in ("p50", "p95", "p99")}),
)
def test_cdf_takeaway_never_fails_and_quotes_a_real_figure(snap, slo):
    text = takeaways.cdf(_snap(**snap), Percentiles(**slo))
    top = max(snap[p] / slo[p] for p in snap)
    worst = [p for p in snap if snap[p] / slo[p] == top]
    assert any(f"{p} " in text and fmt.ms(snap[p]) in text for p in worst)


def test_shape_quotes_the_fit_with_the_tables_formatter():
    row = ShapeRow(
        stage="llm", covariate="seq_len", r2=0.5912, slope=13.8437, intercept=1.0, flag=True
    )
    assert takeaways.shape(row) == (
        "llm grows 13.84 ms per unit of seq_len; seq_len explains 59% of its variance "
        "(R\u00b2 0.59)."
    )
