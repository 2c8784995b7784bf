"""Helpers of the export tests: the shipped budget templates.

A uniquely named module (not conftest) so `from export_helpers import ...` cannot pick
up another directory's conftest when the whole suite runs.
"""

from __future__ import annotations

import shutil
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
