"""replay per class: each class's rules on its own requests, and shed_load shedding the
lowest-priority class (the highest priority number) first."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import tailbudget as tb
from tailbudget.cli import app
from tailbudget.control.replay_classes import shed_steps
from tailbudget.control.replay_record import ReplayClass, ReplayDecision
from tailbudget.demo.tiers import BUDGET, tiered


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("replay")
    log, budget = tmp / "tiers.parquet", tmp / "tiers.yaml"
    tiered().to_parquet(log, index=False)
    budget.write_text(BUDGET)
    return log, budget


def test_premium_breach_sheds_batch_first(files) -> None:
    log, budget = files
    report = tb.replay(log, budget)
    rows = {c.name: c for c in report.classes or []}
    assert rows["premium"].summary.get("shed_load") == 1  # premium's own p95 rule fires
    assert rows["standard"].summary == {} and rows["batch"].summary == {}
    assert "shed_load" not in report.summary  # the service-wide rules never see it
    first = (report.shedding or [])[0]
    assert (first.action, first.trigger, first.sheds) == ("shed_load", "premium", "batch")
    doc = json.loads(report.to_json())
    assert doc["class_by"] == "tier" and [c["name"] for c in doc["classes"]] == [
        "premium",
        "standard",
        "batch",
    ]
    text = CliRunner().invoke(app, ["replay", str(log), "--budget", str(budget)]).stdout
    assert "shed_load (premium's shed_load_p95) sheds batch" in text


def _d(t: float, action: str, rule: str) -> ReplayDecision:
    return ReplayDecision(
        t=f"PT{t}S", t_offset_s=t, action=action, metric="p95", value=1.0, threshold=1.0,
        reason="", rule=rule,
    )  # fmt: skip


def _c(name: str, decisions: list[ReplayDecision]) -> ReplayClass:
    return ReplayClass(name=name, priority=0, requests=1, summary={}, decisions=decisions, rules=[])


def test_shed_order_lowest_priority_first_and_restores() -> None:
    order = ["batch", "standard", "premium"]
    steps = shed_steps(
        [_d(10, "shed_load", "shed_load_p99"), _d(50, "stop_shedding", "shed_load_p99")],
        [
            _c("premium", [_d(20, "shed_load", "shed_p95"), _d(60, "stop_shedding", "shed_p95")]),
            _c("standard", [_d(30, "shed_load", "shed_p99")]),
            _c("batch", [_d(40, "shed_load", "shed_p99")]),
        ],
        order,
    )
    assert [(s.action, s.trigger, s.sheds) for s in steps] == [
        ("shed_load", "service", "batch"),
        ("shed_load", "premium", "standard"),
        # A class's rule sheds only a class shed before it, never itself or one it
        # outranks: batch and standard are taken, so standard's and batch's shed nothing.
        ("shed_load", "standard", None),
        ("shed_load", "batch", None),
        ("stop_shedding", "service", "batch"),
        ("stop_shedding", "premium", "standard"),
    ]


def test_without_classes_nothing_changes_and_class_by_needs_them(files) -> None:
    log, _ = files
    report = tb.replay(log)
    assert report.classes is None and "classes" not in json.loads(report.to_json())
    result = CliRunner().invoke(app, ["replay", str(log), "--class-by", "tier"])
    assert result.exit_code == 2 and "classes:" in result.output
