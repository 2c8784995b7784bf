"""rebudget per class: each class re-budgeted on its own requests and stages."""

from __future__ import annotations

import json

import tailbudget as tb
from tailbudget.demo.tiers import BUDGET, tiered


def test_each_class_gets_its_own_proposal(tmp_path) -> None:
    path = tmp_path / "tiers.parquet"
    df = tiered(n=6000, seed=4)
    df.to_parquet(path, index=False)
    doc = json.loads(tb.rebudget(BUDGET, path).to_json())
    rows = {c["name"]: c for c in doc["classes"]}
    assert rows["premium"]["requests"] == int((df.tier == "premium").sum())
    assert not rows["premium"]["fits_now"] and rows["premium"]["speedup_needed_ms"]["p95"] > 0
    assert rows["standard"]["fits_now"]
    # batch skips the reranker: its proposal never touches that slice
    assert all(c["stage"] != "rerank" for c in rows["batch"]["changes"])
    text = tb.rebudget(BUDGET, path).to_text()
    assert "class premium (" in text and "does not fit now" in text


def test_no_classes_key_without_classes_or_without_the_column(tmp_path) -> None:
    path = tmp_path / "plain.parquet"
    tiered(n=2000, seed=4).drop(columns=["tier"]).to_parquet(path, index=False)
    assert "classes" not in json.loads(tb.rebudget(BUDGET, path).to_json())
    assert "classes" not in json.loads(tb.rebudget(BUDGET.split("classes:")[0], path).to_json())
