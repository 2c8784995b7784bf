"""Where an LLM call sits in a pipeline: the streamed stage, what runs before its first
token, and the stage (if any) that already holds its TTFT.

A log of an LLM benchmark has a `ttft` stage and a `decode` stage whose `llm:` block
describes the same call: the `ttft` stage *is* the call's time to first token, so a
figure that adds the block's TTFT to the stages before `decode` counts it twice.
"""

from __future__ import annotations

from typing import Any

from tailbudget.budget import model as m

TTFT_STAGE = "ttft"
"""The stage name that holds an LLM call's time to first token (as the audit reads it)."""


def ttft_holder(budget: m.Budget, stage: m.Stage) -> str | None:
    """The stage before `stage` that already holds its TTFT (`ttft`), if any."""
    before_items, _ = before(budget, stage)
    return TTFT_STAGE if any(_contains(i, TTFT_STAGE) for i in before_items) else None


def streamed(budget: m.Budget) -> tuple[m.Stage, m.LLMSpec] | None:
    """The LLM stage whose tokens the client sees: the last one with an llm: block."""
    found = [(s, s.llm) for _, s in budget.stages() if s.llm is not None]
    if not found:
        return None
    stage, spec = found[-1]
    assert spec is not None
    return stage, spec


def _contains(item: Any, name: str) -> bool:
    if isinstance(item, m.Stage):
        return item.name == name
    children = item.parallel if isinstance(item, m.Parallel) else item.sequence
    return any(_contains(c, name) for c in children)


def before(budget: m.Budget, stage: m.Stage) -> tuple[list[Any], list[str]]:
    """Top-level pipeline items before the one that holds `stage`, and their names."""
    out: list[Any] = []
    for item in budget.pipeline:
        if _contains(item, stage.name):
            break
        out.append(item)
    return out, [label(i) for i in out]


def label(item: Any) -> str:
    if isinstance(item, m.Stage):
        return item.name
    children = item.parallel if isinstance(item, m.Parallel) else item.sequence
    inner = ", ".join(label(c) for c in children)
    return f"max({inner})" if isinstance(item, m.Parallel) else f"({inner})"
