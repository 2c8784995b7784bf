"""simulate with classes: shed_load's share is the share of the class shed first (the
highest priority number), measured from the log's class column; each drawn request keeps
its class, shed_load sheds that class's requests, and each class is judged on its own
simulated requests (the planted tiers, and the vLLM grid by prompt-length terciles)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import tailbudget as tb
from tailbudget.demo.tiers import BUDGET, tiered
from tailbudget.sim.classes import SimClasses, shed_by_class
from tailbudget.sim.trace import Arrivals
from tests._data import DATA


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


def test_each_class_is_judged_on_its_own_simulated_requests(tmp_path) -> None:
    # The log's own arrivals replay each logged request once, with ample replicas: each
    # class's simulated figure is its logged one, as the audit measures it.
    df = tiered(n=6000, seed=5)
    path = tmp_path / "tiers.parquet"
    df.to_parquet(path, index=False)
    doc = json.loads(tb.simulate(path, budget=BUDGET, policy=["fixed:40"]).to_json())
    audit = json.loads(tb.audit(path, budget=BUDGET).to_json())
    want = {c["name"]: c for c in audit["classes"]}
    assert [c["name"] for c in doc["classes"]] == ["premium", "standard", "batch"]
    for c in doc["classes"]:
        assert c["requests"] == int((df.tier == c["name"]).sum()) == want[c["name"]]["requests"]
        (o,) = c["objectives"]
        (a,) = want[c["name"]]["objectives"]
        assert abs(o["measured_ms"] / a["measured_ms"] - 1) < 0.01
        assert o["verdict"] == a["verdict"]
    premium = doc["classes"][0]
    # The whole service passes its p99 while premium breaches its own p95, minute after minute.
    assert doc["objectives"][0]["verdict"] == "pass"
    assert premium["objectives"][0]["verdict"] == "breach" and premium["breach_minutes"] > 30
    assert doc["runs"][0]["classes"] == doc["classes"]


def test_without_classes_the_document_has_no_class_key(tmp_path) -> None:
    df = tiered(n=2000, seed=5).drop(columns=["tier"])
    path = tmp_path / "plain.parquet"
    df.to_parquet(path, index=False)
    doc = json.loads(tb.simulate(path, budget=BUDGET, policy=["fixed:40"]).to_json())
    assert "classes" not in doc and "classes" not in doc["runs"][0]


def test_shed_load_sheds_each_request_of_the_lowest_priority_class() -> None:
    cs = tb_budget_classes()
    labels = np.array(["premium", "standard", "batch", "batch"])
    arr = Arrivals(
        t_s=np.arange(6, dtype=np.float64),
        src=np.array([0, 1, 2, 3, 2, 0]),
        low_priority=np.zeros(6, dtype=bool),
    )
    shed = shed_by_class(arr, SimClasses(cs, labels))
    assert shed.low_priority.tolist() == [False, False, True, True, True, False]


def tb_budget_classes():
    from tailbudget.budget.load import parse_budget

    cs = parse_budget(BUDGET).class_set
    assert cs is not None
    return cs


def test_real_vllm_run_by_prompt_length_terciles() -> None:
    # Each drawn request keeps its tercile: with replicas to spare (no queueing), each
    # class's simulated e2e p95 is its own requests' logged p95, within draw noise.
    path = DATA / "vllm_grid" / "vllm_llama33-70b_04_tp4_pp2_IB_qps_04.json"
    df = tb.read(path).to_pandas()
    df["length"] = pd.qcut(df.input_tokens, 3, labels=["short", "medium", "long"]).astype(str)
    want = {n: float(np.percentile(g.total_ms, 95)) for n, g in df.groupby("length")}
    budget = (
        "service: vllm\nslo: {p95: 100000}\npipeline:\n  - stage: ttft\n"
        "    budget: {p95: 2000}\nclasses:\n  by: length\n"
        + "".join(f"  {n}: {{slo: {{p95: 100000}}, priority: {i}}}\n" for i, n in enumerate(want))
    )
    report = tb.simulate(
        df, budget=budget, policy=["fixed:200"], arrivals="poisson:2", duration="2h"
    )
    doc = json.loads(report.to_json())
    shares = df.length.value_counts(normalize=True)
    for c in doc["classes"]:
        (o,) = c["objectives"]
        assert abs(o["measured_ms"] / want[c["name"]] - 1) < 0.03
        assert abs(c["requests"] / doc["requests"]["arrived"] - shares[c["name"]]) < 0.02


def test_the_text_has_a_class_table(tmp_path) -> None:
    df = tiered(n=3000, seed=5)
    path = tmp_path / "tiers.parquet"
    df.to_parquet(path, index=False)
    text = tb.simulate(path, budget=BUDGET, policy=["fixed:40"]).to_markdown()
    table = text.split("## Classes", 1)[1]
    assert "| premium | fixed:40 |" in table and "(breach)" in table.split("\n| standard")[0]
    # The service passing never hides a breached class in the headline.
    assert "meets the service-wide objectives" in text
    assert "but class premium breaches e2e.p95" in text


def test_capacity_meets_every_class_and_names_the_class_that_sets_it(tmp_path) -> None:
    df = tiered(n=6000, seed=5)
    path = tmp_path / "tiers.parquet"
    df.to_parquet(path, index=False)
    # Premium's p95 is missed through a slow stage, however many replicas: not met, by it.
    (point,) = json.loads(tb.capacity(path, budget=BUDGET, load="1").to_json())["curve"]
    assert point["replicas"] is None and point["set_by"] == "premium"
    headline = tb.capacity(path, budget=BUDGET, load="1").to_markdown()
    assert "No replica count found: class premium's objectives are not met" in headline
    # Premium relaxed: the service-wide p99 sets the count, until standard's is tightened.
    relaxed = BUDGET.replace("premium:  {slo: {p95: 800}", "premium:  {slo: {p95: 2000}")
    (plain,) = json.loads(tb.capacity(path, budget=relaxed, load="1").to_json())["curve"]
    assert plain["set_by"] == "service"
    tight = relaxed.replace("standard: {slo: {p99: 1500}", "standard: {slo: {p99: 1000}")
    report = tb.capacity(path, budget=tight, load="1")
    (point,) = json.loads(report.to_json())["curve"]
    assert point["set_by"] == "standard" and point["replicas"] > plain["replicas"]
    assert all(o["verdict"] == "pass" for c in point["classes"] for o in c["objectives"])
    assert f"class standard sets the count, {point['replicas']} replicas" in report.to_markdown()


def test_capacity_without_classes_has_no_class_keys(tmp_path) -> None:
    df = tiered(n=2000, seed=5).drop(columns=["tier"])
    path = tmp_path / "plain.parquet"
    df.to_parquet(path, index=False)
    (point,) = json.loads(tb.capacity(path, budget=BUDGET, load="1").to_json())["curve"]
    assert "classes" not in point and "set_by" not in point


def test_an_arrival_trace_carries_each_arrivals_class(tmp_path) -> None:
    df = tiered(n=3000, seed=5)
    log = tmp_path / "tiers.parquet"
    df.to_parquet(log, index=False)
    # Twice the premium share of the log: each arrival copies a logged request of its class.
    tiers = ["premium" if i % 5 == 0 else "batch" for i in range(1200)]
    rows = "".join(f"{1_700_000_000 + i * 0.5:.1f},{t}\n" for i, t in enumerate(tiers))
    trace = tmp_path / "arrivals.csv"
    trace.write_text("ts,tier\n" + rows)
    doc = json.loads(
        tb.simulate(log, budget=BUDGET, policy=["fixed:40"], arrivals=str(trace)).to_json()
    )
    got = {c["name"]: c["requests"] for c in doc["classes"]}
    assert got == {"premium": 240, "standard": 0, "batch": 960}
    premium = doc["classes"][0]["objectives"][0]
    assert premium["verdict"] == "breach" and premium["measured_ms"] > 800
    # A class the log has no request of cannot be copied: said, not guessed.
    trace.write_text("ts,tier\n" + rows.replace("batch", "gold"))
    with pytest.raises(tb.TailbudgetError, match="'gold' has no request in the log"):
        tb.simulate(log, budget=BUDGET, policy=["fixed:40"], arrivals=str(trace))
