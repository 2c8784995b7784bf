"""Helpers of the export tests: the shipped budget templates.

A uniquely named module (not conftest) so `from export_helpers import ...` cannot pick
up another directory's conftest when the whole suite runs.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tailbudget.budget import Budget, parse_budget

TEMPLATES = sorted(
    (Path(__file__).resolve().parents[2] / "src" / "tailbudget" / "budget" / "templates").glob(
        "*.yaml"
    )
)
RAG = TEMPLATES[[p.stem for p in TEMPLATES].index("rag")]
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
needs_promtool = pytest.mark.skipif(
    not Path(PROMTOOL).exists(), reason="promtool is not installed (Debian package prometheus)"
)


def budget_with_policy(policy: dict[str, Any] | str, **changes: Any) -> Budget:
    """The rag template with another policy block (and top-level changes)."""
    data = yaml.safe_load(RAG.read_text())
    data["policy"] = policy
    data.update(changes)
    return parse_budget(data)


def promtool_test(
    rules: Path, series: list[dict], interval: str, **checks: list[dict]
) -> subprocess.CompletedProcess[str]:
    """`promtool test rules` of the rules file on `series` sampled every `interval`, with
    its checks (`alert_rule_test=[...]`, `promql_expr_test=[...]`); the test file is
    written beside the rules."""
    test = {
        "rule_files": [str(rules)],
        "evaluation_interval": interval,
        "tests": [{"interval": interval, "input_series": series, **checks}],
    }
    path = rules.parent / "test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    return subprocess.run(
        [PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
