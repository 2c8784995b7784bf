"""The audit's recommendation names every gated breach, whichever one it starts with."""

from __future__ import annotations

from tailbudget.audit.e2e_drivers import naming_every_breach
from tailbudget.audit.report import ObjectiveRow, Recommendation


def row(metric: str, p: str, target: float, measured: float, driver: str = "") -> ObjectiveRow:
    verdict = "breach" if measured > target else "pass"
    return ObjectiveRow(
        metric=metric,
        percentile=p,
        target_ms=target,
        measured_ms=measured,
        verdict=verdict,
        gated=True,
        n=200,
        driver=driver,
    )


def test_an_unnamed_breach_is_added_and_a_named_one_is_not():
    rows = [
        row("tpot", "p99", 60, 76),
        row("e2e", "p99", 20_000, 23_543, "decode holds"),
        row("ttft", "p95", 500, 448),
    ]
    rec = Recommendation(choice="add_capacity", text="tpot.p99 is 16 ms over its 60 ms target.")
    text = naming_every_breach(rec, rows).text
    assert text == (
        "tpot.p99 is 16 ms over its 60 ms target. Also over target: e2e.p99 23,543 ms "
        "against its 20,000 ms (what drives it is under Objectives)."
    )


def test_the_e2e_tails_own_words_name_its_percentile():
    rows = [row("e2e", "p99", 500, 515)]
    rec = Recommendation(choice="fix_tail", text="p99 is 15 ms over target. Start with x.")
    assert naming_every_breach(rec, rows) == rec
