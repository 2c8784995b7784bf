"""What the class export tests share: the tiered budget's rule groups, and promtool's check
and `test rules` run on a rules file (a uniquely named module, not conftest, as
tests/export/export_helpers.py is)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tailbudget.budget import Budget
from tailbudget.export import prometheus_rules
from tests.export.export_helpers import PROMTOOL, promtool_test

CLASS_GROUP = "tailbudget-tiered-rag-classes"
"""The class group of the tiered budget's rules (tailbudget's own series)."""


def rule_group(budget: Budget, name: str = CLASS_GROUP) -> dict:
    """The rule group `name` of the budget's prometheus-rules export."""
    doc = yaml.safe_load(prometheus_rules.render(budget))
    return next(g for g in doc["groups"] if g["name"] == name)


def checked_rules(text: str, folder: Path) -> Path:
    """The rules file written to `folder`, after `promtool check rules` accepts it."""
    rules = folder / "rules.yaml"
    rules.write_text(text)
    check = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    return rules


def firing(rule: dict, **labels: str) -> dict:
    """The alert `rule` as promtool expects it firing: its labels (plus `labels`, the
    series' own) and annotations."""
    return {
        "exp_labels": {"alertname": rule["alert"], **rule["labels"], **labels},
        "exp_annotations": rule["annotations"],
    }


def promtool_fires(rules: Path, series: list[dict], alert: str, expected: list[dict]) -> None:
    """`promtool test rules` on `series` (1 s apart): `alert` at each (eval_time, alerts)."""
    checks = [
        {"eval_time": at["eval_time"], "alertname": alert, "exp_alerts": at["alerts"]}
        for at in expected
    ]
    run = promtool_test(rules, series, "1s", alert_rule_test=checks)
    assert run.returncode == 0, run.stdout + run.stderr
