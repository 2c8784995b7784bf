"""A budget as the YAML text a re-budget proposes, and its diff against the current file."""

from __future__ import annotations

import difflib
from typing import Any

import yaml

from tailbudget.budget import model as m


def budget_yaml(budget: m.Budget, *, header: str = "") -> str:
    """A budget as YAML text that `tailbudget plan` reads back."""
    data = budget.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
    data.setdefault("slo", budget.slo.model_dump(mode="json", exclude_none=True))
    blocks = {s.name: s.llm.as_written() for _, s in budget.stages() if s.llm is not None}
    data["pipeline"] = [_as_written(i, blocks) for i in data["pipeline"]]
    # Wide lines: a distribution stays one flow mapping on one line, as `init` writes it.
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=4096)
    return (f"# {header}\n" if header else "") + text


def _as_written(item: Any, blocks: dict[str, dict[str, Any]]) -> Any:
    # Each llm: block in the form its file states (distributions, not derived medians).
    if "stage" in item:
        return {**item, "llm": blocks[item["stage"]]} if "llm" in item else item
    key = "parallel" if "parallel" in item else "sequence"
    items = [_as_written(i, blocks) for i in item[key]]
    if item.get("caller"):
        # As `init` writes it: the caller, and the calls nested under it.
        return {**items[0], "calls": items[1:]}
    return {**item, key: items}


def budget_diff(budget: m.Budget, proposed: m.Budget) -> str:
    a = budget_yaml(budget).splitlines(keepends=True)
    b = budget_yaml(proposed).splitlines(keepends=True)
    return "".join(difflib.unified_diff(a, b, "budget (current)", "budget (proposed)"))
