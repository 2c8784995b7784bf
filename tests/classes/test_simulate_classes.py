"""simulate with classes: shed_load's share is the share of the class shed first (the
highest priority number), measured from the log's class column."""

from __future__ import annotations

import json

import tailbudget as tb
from tailbudget.demo.tiers import BUDGET, tiered


def _share(report) -> dict:
    doc = json.loads(report.to_json())
    return next(p for p in doc["model"]["parameters"] if p["name"] == "low_priority_share")


def test_the_shed_share_is_the_lowest_priority_class(tmp_path) -> None:
    df = tiered(n=3000, seed=5)
    path = tmp_path / "tiers.parquet"
    df.to_parquet(path, index=False)
    share = _share(tb.simulate(path, budget=BUDGET, policy=["fixed"]))
    batch = int((df.tier == "batch").sum())
    assert share["source"] == "measured" and "class batch" in share["note"]
    assert abs(share["value"] - batch / len(df)) < 1e-3
    # Premium made the lowest priority: its share is shed instead.
    swapped = BUDGET.replace("priority: 0}", "priority: 9}")
    premium = int((df.tier == "premium").sum())
    assert (
        abs(
            _share(tb.simulate(path, budget=swapped, policy=["fixed"]))["value"] - premium / len(df)
        )
        < 1e-3
    )


def test_without_the_class_column_the_default_share_stays(tmp_path) -> None:
    df = tiered(n=3000, seed=5).drop(columns=["tier"])
    path = tmp_path / "plain.parquet"
    df.to_parquet(path, index=False)
    assert _share(tb.simulate(path, budget=BUDGET, policy=["fixed"]))["source"] == "default"
