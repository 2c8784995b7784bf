"""Helpers of the export tests: the shipped budget templates and schema loading.

A uniquely named module (not conftest) so `from export_helpers import ...` cannot pick
up another directory's conftest when the whole suite runs.
"""

from __future__ import annotations

import json
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
SCHEMAS = Path(__file__).resolve().parent / "schemas"
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


def strict(schema: Any) -> Any:
    """A CRD schema as the API server applies it: undeclared fields are errors.

    Kubernetes prunes (or, with strict field validation, rejects) fields that a
    structural schema does not declare; JSON Schema allows them unless
    additionalProperties is false, so add that wherever properties are listed.
    """
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def load_schema(name: str) -> Any:
    """A schema fixture (YAML or JSON) without its comment header."""
    text = (SCHEMAS / name).read_text()
    return json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
